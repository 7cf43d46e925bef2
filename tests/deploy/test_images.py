"""The images the deployment pulls (deploy/images.py): each pinned to an exact patch version
that is not older than its security floor, and the release step that pins them by digest.

No registry answers here, so the digest step runs with a resolver of fixed digests; the
registry call itself is ``docker buildx imagetools inspect``.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.deploy.conftest import ROOT, load_module

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def images() -> ModuleType:
    return load_module("deploy/images.py", "dtq_deploy_images")


def test_every_pulled_image_is_pinned_and_above_its_floor(images: ModuleType) -> None:
    found = images.images()
    names = {image.parts["name"] for image in found if image.parts}
    # Every image of the compose file and the Dockerfiles that has a floor is in the list.
    assert set(images.FLOORS) <= names, set(images.FLOORS) - names
    assert images.problems(found) == []


def test_the_redis_and_grafana_lines_have_their_fixes(images: ModuleType) -> None:
    refs = {image.parts["name"]: image.parts["tag"] for image in images.images() if image.parts}
    # Redis 7.0 never got the Lua fixes (CVE-2024-31449, CVE-2024-46981, CVE-2025-49844).
    assert images.version(refs["redis"]) >= (8, 6, 3)
    assert images.version(refs["grafana/grafana"]) >= (12, 4, 5)  # CVE-2025-4123 and later


@pytest.mark.parametrize(
    ("ref", "complaint"),
    [
        ("redis:7.0.15-bookworm", "older than 8.6.3"),
        ("grafana/grafana:11.3.1", "older than 12.4.5"),
        ("redis:8", "exact patch version"),
        ("prom/prometheus:latest", "exact patch version"),
        ("redis:8.6.3@sha256:abc", "not name:tag"),
    ],
)
def test_a_weak_reference_is_named(images: ModuleType, ref: str, complaint: str) -> None:
    wrong = images.problems([images.Image(ref, ROOT / "docker-compose.yml")])
    assert len(wrong) == 1
    assert complaint in wrong[0], wrong


def test_release_check_requires_digests(images: ModuleType) -> None:
    tagged = images.Image("redis:8.6.3", ROOT / "docker-compose.yml")
    pinned = images.Image(f"redis:8.6.3@{DIGEST}", ROOT / "docker-compose.yml")
    assert images.problems([tagged, pinned]) == []
    wrong = images.problems([tagged, pinned], require_digests=True)
    assert len(wrong) == 1
    assert "redis:8.6.3: no digest" in wrong[0]


def test_pinning_rewrites_every_pulled_reference_and_only_those(images: ModuleType) -> None:
    asked: list[str] = []

    def resolve(ref: str) -> str:
        asked.append(ref)
        return DIGEST

    compose = (ROOT / "docker-compose.yml").read_text()
    pinned = images.pin_text(compose, resolve)
    for ref in asked:
        # `image: name:tag`, or the default of `image: ${REDIS_IMAGE:-name:tag}`
        assert f"image: {ref}@{DIGEST}" in pinned or f":-{ref}@{DIGEST}}}" in pinned, ref
    assert "image: ${REDIS_IMAGE:-redis:" in pinned
    assert "image: dtq-worker:${DTQ_VERSION:-latest}" in pinned  # built here, never pulled
    assert images.pin_text(pinned, resolve) == pinned  # pinning again changes nothing

    python = (ROOT / "deploy" / "docker" / "python.Dockerfile").read_text()
    pinned = images.pin_text(python, resolve)
    assert f"ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@{DIGEST}" in pinned
    assert "FROM ${PYTHON_IMAGE} AS build" in pinned

    dashboard = (ROOT / "deploy" / "docker" / "dashboard.Dockerfile").read_text()
    pinned = images.pin_text(dashboard, resolve)
    for name in ("NODE_IMAGE=node:", "PYTHON_IMAGE=python:", "NGINX_IMAGE=nginxinc/"):
        assert re.search(rf"^ARG {name}\S+@{DIGEST}$", pinned, re.M), name

    bases = (ROOT / "deploy" / "docker" / "bases.Dockerfile").read_text()
    assert images.pin_text(bases, resolve) == bases  # local stand-ins: nothing pulled


def test_pinning_refuses_an_answer_that_is_not_a_digest(images: ModuleType) -> None:
    with pytest.raises(ValueError, match="not a sha256 digest"):
        images.pin_text("FROM node:20.18.1-bookworm-slim AS spa\n", lambda ref: "oops")


def test_a_failed_pin_writes_nothing(
    images: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text("services:\n  a:\n    image: redis:8.6.3\n")
    dockerfile = tmp_path / "x.Dockerfile"
    dockerfile.write_text("FROM python:3.11.14-slim-bookworm AS a\nFROM no-such:1.0.0 AS b\n")
    monkeypatch.setattr(images, "COMPOSE", compose)
    monkeypatch.setattr(images, "DOCKERFILES", [dockerfile])
    monkeypatch.setattr(images, "ROOT", tmp_path)

    def registry(ref: str) -> str:
        if ref.startswith("no-such"):
            raise RuntimeError(f"{ref}: not found")
        return DIGEST

    monkeypatch.setattr(images, "registry_digest", registry)
    assert images.main(["--pin"]) == 1
    assert "@sha256" not in compose.read_text() + dockerfile.read_text()
