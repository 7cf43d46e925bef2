"""The third-party images dtq deploys with: check them, and pin them by digest at release.

``python deploy/images.py`` (``just images``) lists every image that docker-compose.yml pulls
and every base image of deploy/docker/*.Dockerfile, and fails when one is not pinned to an
exact patch tag or is older than its security floor (:data:`FLOORS`: the first release of the
chosen line with the fixes named there). ``--require-digests`` also fails on a reference that
carries no ``@sha256:`` digest: the release check.

``python deploy/images.py --pin`` (``just pin-images``) asks the registry for the digest of
each tag (``docker buildx imagetools inspect``, so it needs a Docker client that reaches the
registry) and rewrites each reference as ``name:tag@sha256:<digest>`` in place; the tag stays
for the reader, the digest is what Docker pulls. Run it when cutting a release, review the
diff, commit it. Images dtq builds itself (``dtq-*``) are not pulled and not pinned.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILES = sorted((ROOT / "deploy" / "docker").glob("*.Dockerfile"))

# name -> (lowest acceptable version, why). A bump below a floor fails `just images`.
FLOORS: dict[str, tuple[tuple[int, ...], str]] = {
    "redis": (
        (8, 6, 3),
        "Lua CVE-2024-31449, CVE-2024-46981, CVE-2025-49844 (never fixed in 7.0); "
        "CVE-2026-23479 (unblock use-after-free, 7.2.0-8.6.2)",
    ),
    "grafana/grafana": (
        (12, 4, 5),
        "CVE-2025-4123 (open redirect, fixed in 11.6.2/12.0.1), CVE-2026-27876 (12.4.2), "
        "the 12.4.5 JWT role mapping fix",
    ),
    "nginxinc/nginx-unprivileged": (
        (1, 28, 0),
        "CVE-2025-23419 (TLS session reuse, fixed in 1.27.4); 1.28 is the stable line",
    ),
    "python": ((3, 11, 14), "3.11 takes security fixes only: the newest of them"),
}

_TAG = re.compile(
    r"^(?P<name>[a-z0-9][a-z0-9._/-]*):(?P<tag>[A-Za-z0-9._-]+)(?P<digest>@sha256:[0-9a-f]{64})?$"
)
_VERSION = re.compile(r"^v?(\d+(?:\.\d+)+)")
# `image: name:tag`, or `image: ${VARIABLE:-name:tag}` (a base that deploy/docker/bases.sh
# can stand in for: the default is the pulled image, and what gets pinned).
_COMPOSE_IMAGE = re.compile(r"^(\s*image:\s*(?:\$\{\w+:-)?)([^\s}]+)", re.M)
_FROM = re.compile(r"^(FROM\s+)(\S+)", re.M)
_ARG_IMAGE = re.compile(r"^(ARG\s+\w+_IMAGE=)(\S+)", re.M)


@dataclass(frozen=True)
class Image:
    """One image reference, where it was found."""

    ref: str
    path: Path

    @property
    def parts(self) -> re.Match[str] | None:
        return _TAG.match(self.ref)


def _refs(text: str) -> Iterator[str]:
    for pattern in (_COMPOSE_IMAGE, _FROM, _ARG_IMAGE):
        for match in pattern.finditer(text):
            yield match.group(2)


def pulled(ref: str) -> bool:
    """Whether Docker pulls ``ref`` from a registry (not a dtq image, a stage or an ARG)."""
    return not (ref.startswith(("dtq-", "$")) or ":" not in ref)


def images() -> list[Image]:
    """Every pulled image reference of the compose file and the Dockerfiles."""
    found: list[Image] = []
    for path in (COMPOSE, *DOCKERFILES):
        found += [Image(ref, path) for ref in _refs(path.read_text()) if pulled(ref)]
    return found


def version(tag: str) -> tuple[int, ...] | None:
    """``8.6.3`` of ``8.6.3-bookworm`` or ``v3.5.0``; None when the tag names no version."""
    match = _VERSION.match(tag)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def problems(found: list[Image], *, require_digests: bool = False) -> list[str]:
    """What is wrong with the references, one line each (empty: all good)."""
    out: list[str] = []
    for image in found:
        where = image.path.relative_to(ROOT)
        parts = image.parts
        if parts is None:
            out.append(f"{where}: {image.ref}: not name:tag[@sha256:<64 hex>]")
            continue
        number = version(parts["tag"])
        if number is None or len(number) < 3:
            out.append(f"{where}: {image.ref}: not pinned to an exact patch version")
            continue
        floor = FLOORS.get(parts["name"])
        if floor is not None and number < floor[0]:
            lowest = ".".join(map(str, floor[0]))
            out.append(f"{where}: {image.ref}: older than {lowest} ({floor[1]})")
        if require_digests and not parts["digest"]:
            out.append(f"{where}: {image.ref}: no digest (run `just pin-images`)")
    return out


def pin_text(text: str, resolve: Callable[[str], str]) -> str:
    """``text`` with every pulled ``name:tag`` reference as ``name:tag@sha256:…``.

    ``resolve`` answers the digest of a ``name:tag``; a reference that has one already is
    resolved again (a tag re-pushed since is then noticed in the diff).
    """

    def one(match: re.Match[str]) -> str:
        ref = match.group(2)
        if not pulled(ref) or (parts := _TAG.match(ref)) is None:
            return match.group(0)
        digest = resolve(f"{parts['name']}:{parts['tag']}")
        if re.fullmatch(r"sha256:[0-9a-f]{64}", digest) is None:
            raise ValueError(f"{ref}: the registry answered {digest!r}, not a sha256 digest")
        return f"{match.group(1)}{parts['name']}:{parts['tag']}@{digest}"

    for pattern in (_COMPOSE_IMAGE, _FROM, _ARG_IMAGE):
        text = pattern.sub(one, text)
    return text


def registry_digest(ref: str) -> str:
    """The digest of the manifest (list) a registry serves for ``ref``."""
    docker = shutil.which("docker")
    if docker is None:
        raise RuntimeError("docker is not installed: pinning needs `docker buildx imagetools`")
    done = subprocess.run(
        [docker, "buildx", "imagetools", "inspect", ref, "--format", "{{.Manifest.Digest}}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{ref}: {done.stderr.strip() or 'no answer from the registry'}")
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pin", action="store_true", help="rewrite each tag with its digest")
    parser.add_argument(
        "--require-digests", action="store_true", help="fail on a reference without a digest"
    )
    args = parser.parse_args(argv)
    if args.pin:
        # Every digest first, then the writes: a registry that fails half-way changes nothing.
        try:
            pinned = {p: pin_text(p.read_text(), registry_digest) for p in (COMPOSE, *DOCKERFILES)}
        except (RuntimeError, ValueError) as exc:
            print(f"images: {exc}", file=sys.stderr)
            return 1
        for path, text in pinned.items():
            path.write_text(text)
    found = images()
    for image in found:
        print(f"{image.path.relative_to(ROOT)}\t{image.ref}")
    wrong = problems(found, require_digests=args.require_digests)
    for line in wrong:
        print(f"images: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
