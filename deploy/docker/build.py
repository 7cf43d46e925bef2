"""Build dtq's images with BuildKit, as docker-compose.yml describes them.

    python deploy/docker/build.py [--env-file deploy/compose/local-bases.env] [--ca FILE]

Every service of docker-compose.yml with a ``build:`` section is built once per image tag
(``migrate`` and ``ingest-api`` share one), with its context, Dockerfile and build arguments
from the compose file, so the two cannot disagree. The Python services' images share every
layer that costs something (see python.Dockerfile), and the dashboard's image is built beside
them, at the same time.

Why not ``docker-compose build``: the Dockerfiles use BuildKit's cache and secret mounts, and
Debian bookworm's docker-compose (1.29) can pass neither a secret nor BuildKit to a client
that needs the buildx plugin for it. Where ``docker compose`` (v2) and buildx are installed and
the official base images can be pulled, ``docker compose up --build`` builds the same images.

Base images: the Dockerfiles' defaults are the official images. ``--env-file`` (or the
environment) may name others as ``PYTHON_IMAGE``, ``NODE_IMAGE``, ``NGINX_IMAGE``;
``deploy/compose/local-bases.env`` names the stand-ins ``deploy/docker/bases.sh`` builds where
no registry can be reached. Each is passed only to the Dockerfiles that declare it.

``--ca FILE`` (default: ``DTQ_BUILD_CA``, else the host's bundle when it exists; ``--ca ''``
for none) is a CA bundle the builds' downloads must trust, passed as the BuildKit secret
``ca``: mounted into the steps that download, never written into an image.

``bases.sh`` builds its stand-ins through :func:`build` too (``--bases``), so there is one
place that knows how this machine builds with BuildKit (:func:`buildkit_command`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
BASES_DOCKERFILE = ROOT / "deploy" / "docker" / "bases.Dockerfile"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
BASE_VARIABLES = ("PYTHON_IMAGE", "NODE_IMAGE", "NGINX_IMAGE")
"""The base-image build arguments of dtq's Dockerfiles (each with the official default)."""

BASES = (
    ("python", "dtq-local/python:3.11-bookworm"),
    ("node", "dtq-local/node:20-bookworm"),
    ("nginx", "dtq-local/nginx:bookworm"),
    ("redis", "dtq-local/redis:bookworm"),
    ("prometheus", "dtq-local/prometheus:bookworm"),
)
"""The stand-in targets of bases.Dockerfile and their tags, in build order (node's fetch stage
builds on python's)."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


@dataclass(frozen=True)
class Build:
    """One ``docker build``: a tag and what makes it."""

    tag: str
    dockerfile: Path
    context: Path
    args: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None


@dataclass(frozen=True)
class Built:
    """What a build took: wall-clock seconds, and the image's size as ``docker images``
    reports it (every layer, shared ones included)."""

    tag: str
    seconds: float
    size_bytes: int


def read_env_file(path: Path) -> dict[str, str]:
    """The ``NAME=value`` lines of an env file (comments and blank lines left out)."""
    env = {}
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            name, _, value = stripped.partition("=")
            env[name.strip()] = value.strip()
    return env


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """``${NAME:-default}`` and ``${NAME}`` as compose resolves them."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), text)


def declared_args(dockerfile: Path) -> set[str]:
    return set(re.findall(r"^ARG\s+(\w+)", dockerfile.read_text(), re.M))


def compose_builds(env: Mapping[str, str], compose: Path = COMPOSE) -> list[Build]:
    """One :class:`Build` per image tag that ``compose`` builds, base arguments from ``env``."""
    import yaml  # noqa: PLC0415 - only this function reads YAML; --bases runs without PyYAML

    services: dict[str, Any] = yaml.safe_load(compose.read_text())["services"]
    builds: dict[str, Build] = {}
    for name, svc in services.items():
        spec = svc.get("build")
        if not spec:
            continue
        if "image" not in svc:
            raise ValueError(f"{compose.name}: service {name} builds an image but names no tag")
        tag = interpolate(svc["image"], env)
        context = (compose.parent / spec.get("context", ".")).resolve()
        dockerfile = context / spec.get("dockerfile", "Dockerfile")
        declared = declared_args(dockerfile)
        args = {k: interpolate(str(v), env) for k, v in (spec.get("args") or {}).items()}
        args |= {k: env[k] for k in BASE_VARIABLES if k in env and k in declared}
        build = Build(tag, dockerfile, context, args, spec.get("target"))
        if builds.setdefault(tag, build) != build:
            raise ValueError(f"{compose.name}: two services build {tag} differently")
    return list(builds.values())


def base_builds(rootfs: str) -> list[Build]:
    """The stand-ins of bases.Dockerfile, on the imported debootstrap rootfs."""
    context = BASES_DOCKERFILE.parent
    return [
        Build(tag, BASES_DOCKERFILE, context, {"DEBIAN_IMAGE": rootfs}, target)
        for target, tag in BASES
    ]


def _client_version(client: str) -> int | None:
    done = subprocess.run(
        [client, "version", "--format", "{{.Client.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    match = re.match(r"(\d+)\.", done.stdout.strip())
    return int(match.group(1)) if match else None


def buildkit_command(docker: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line (up to the build's own arguments) that builds with BuildKit here, and
    the environment it needs.

    Docker 23 and later build with BuildKit through the buildx plugin; older clients (Debian
    bookworm's docker.io, 20.10) have it built in behind ``DOCKER_BUILDKIT=1``. A newer client
    without the plugin can do neither, so the first client that can is taken: ``docker`` (or
    ``$DOCKER``), then Debian's ``/usr/bin/docker``.

    Raises:
        RuntimeError: no client here can.
    """
    candidates = [docker or os.environ.get("DOCKER", "docker"), "/usr/bin/docker"]
    for candidate in candidates:
        client = shutil.which(candidate)
        if client is None:
            continue
        buildx = subprocess.run(
            [client, "buildx", "version"], capture_output=True, timeout=30, check=False
        )
        if buildx.returncode == 0:
            return [client, "buildx", "build", "--load"], {}
        major = _client_version(client)
        if major is not None and major < 23:
            return [client, "build"], {"DOCKER_BUILDKIT": "1"}
    raise RuntimeError(
        "no Docker client here builds with BuildKit: install the buildx plugin "
        "(docker-buildx) or Debian bookworm's docker.io"
    )


def default_ca() -> Path | None:
    named = os.environ.get("DTQ_BUILD_CA")
    if named is not None:
        return Path(named) if named else None
    return HOST_CA if HOST_CA.is_file() else None


def build_argv(build: Build, prefix: Sequence[str], ca: Path | None) -> list[str]:
    argv = [*prefix, "--progress=plain", "--file", str(build.dockerfile), "--tag", build.tag]
    if build.target:
        argv += ["--target", build.target]
    for name, value in build.args.items():
        argv += ["--build-arg", f"{name}={value}"]
    if ca is not None:
        argv += ["--secret", f"id=ca,src={ca}"]
    return [*argv, str(build.context)]


def image_size(tag: str, docker: str) -> int:
    done = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(done.stdout.strip())


def run_build(
    build: Build, prefix: Sequence[str], env: Mapping[str, str], ca: Path | None, log_dir: Path
) -> Built:
    """One build, its whole output in ``log_dir``; raises with the log's end on failure."""
    log = log_dir / f"build-{re.sub(r'[^A-Za-z0-9_.-]', '_', build.tag)}.log"
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            build_argv(build, prefix, ca),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            timeout=1800,
            check=False,
        )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"building {build.tag} failed (log: {log}):\n{tail}")
    return Built(build.tag, seconds, image_size(build.tag, prefix[0]))


def build(
    builds: Sequence[Build],
    *,
    ca: Path | None,
    log_dir: Path,
    parallel: bool = True,
    docker: str | None = None,
) -> list[Built]:
    """Run ``builds``: those of one Dockerfile one after the other (the first fills the cache
    the others hit), different Dockerfiles side by side when ``parallel``."""
    prefix, env = buildkit_command(docker)
    log_dir.mkdir(parents=True, exist_ok=True)
    chains: dict[Path, list[Build]] = {}
    for item in builds:
        chains.setdefault(item.dockerfile, []).append(item)

    def chain(items: list[Build]) -> list[Built]:
        return [run_build(item, prefix, env, ca, log_dir) for item in items]

    if not parallel:
        return [done for items in chains.values() for done in chain(items)]
    with ThreadPoolExecutor(max_workers=len(chains) or 1) as pool:
        results = [pool.submit(chain, items) for items in chains.values()]
        return [done for future in results for done in future.result()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-file", type=Path, help="base images etc. (NAME=value lines)")
    parser.add_argument("--ca", help="CA bundle for the builds' downloads ('' for none)")
    parser.add_argument("--bases", metavar="ROOTFS", help="build bases.Dockerfile's stand-ins")
    parser.add_argument("--sequential", action="store_true", help="one build at a time")
    parser.add_argument("--log-dir", type=Path, default=ROOT / ".cache" / "build")
    args = parser.parse_args(argv)
    env = {**os.environ, **(read_env_file(args.env_file) if args.env_file else {})}
    ca = (Path(args.ca) if args.ca else None) if args.ca is not None else default_ca()
    try:
        todo = base_builds(args.bases) if args.bases else compose_builds(env)
        started = time.monotonic()
        for built in build(todo, ca=ca, log_dir=args.log_dir, parallel=not args.sequential):
            print(f"built {built.tag}: {built.size_bytes / 1e6:.0f} MB, {built.seconds:.0f} s")
    except (RuntimeError, ValueError, subprocess.SubprocessError, OSError) as exc:
        print(f"build: {exc}", file=sys.stderr)
        return 1
    print(f"build: {len(todo)} images in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
