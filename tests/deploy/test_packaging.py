"""Every package of the workspace builds a wheel and an sdist (``uv build``) that carry the
metadata an index shows and the files the code reads at run time (the Lua transitions,
``py.typed``), and that install and import in a fresh virtual environment. The dependencies
install from the index at the versions of ``uv.lock`` (as constraints), so a new upstream
release cannot fail the test and the uv cache of ``just setup`` serves them."""

from __future__ import annotations

import email.parser
import json
import os
import subprocess
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest

from dtq_core.protocol.library import library
from tests.deploy.conftest import ROOT, need_tool

pytestmark = pytest.mark.slow

LUA = sorted(p.name for p in (ROOT / "libs/dtq-core/src/dtq_core/protocol/lua").glob("*.lua"))
URLS = {"Homepage", "Documentation", "Changelog", "Issues"}
HELP_SCRIPTS = ("dtq", "dtq-worker", "dtq-scheduler")
"""The console scripts that parse arguments; the API and the gateway take none and serve."""


@dataclass(frozen=True)
class Package:
    folder: Path
    name: str
    version: str
    description: str
    scripts: tuple[str, ...]

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def wheel(self) -> str:
        return f"{self.module}-{self.version}-py3-none-any.whl"

    @property
    def sdist(self) -> str:
        return f"{self.module}-{self.version}.tar.gz"


def _packages() -> list[Package]:
    members = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    found = []
    for member in members["members"]:
        project = tomllib.loads((ROOT / member / "pyproject.toml").read_text())["project"]
        found.append(
            Package(
                ROOT / member,
                project["name"],
                project["version"],
                project["description"],
                tuple(project.get("scripts", {})),
            )
        )
    return found


PACKAGES = _packages()


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def _fresh_venv(path: Path) -> Path:
    _run(need_tool("uv"), "venv", "--quiet", "--python", "3.11", path, cwd=path.parent)
    return path / "bin" / "python"


def _install(python: Path, *targets: Path, constraints: Path) -> None:
    args = ("pip", "install", "--quiet", "--python", python, "-c", constraints, *targets)
    _run(need_tool("uv"), *args, cwd=python.parent)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(need_tool("uv"), "build", "--all-packages", "--quiet", "--out-dir", out, cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def constraints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locked versions of every third-party dependency."""
    out = tmp_path_factory.mktemp("constraints") / "constraints.txt"
    args = ("export", "--frozen", "--all-packages", "--no-dev", "--no-emit-workspace")
    _run(need_tool("uv"), *args, "--no-hashes", "--quiet", "--output-file", out, cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, constraints: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with every wheel installed; its ``bin`` folder."""
    python = _fresh_venv(tmp_path_factory.mktemp("wheels") / "venv")
    _install(python, *(dist / p.wheel for p in PACKAGES), constraints=constraints)
    return python.parent


def _metadata(wheel: Path, package: Package) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"{package.module}-{package.version}.dist-info/METADATA")
    return email.parser.BytesParser().parsebytes(text)


def _wheel_files(package: Package, dist: Path) -> set[str]:
    with zipfile.ZipFile(dist / package.wheel) as archive:
        return set(archive.namelist())


def _sdist_files(package: Package, dist: Path) -> set[str]:
    prefix = f"{package.module}-{package.version}/"
    with tarfile.open(dist / package.sdist) as archive:
        return {name.removeprefix(prefix) for name in archive.getnames()}


def test_the_workspace_has_its_packages() -> None:
    assert {p.module for p in PACKAGES} >= {
        "dtq_core",
        "dtq_worker",
        "dtq_scheduler_leader",
        "dtq_ingest_api",
        "dtq_event_gateway",
    }


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_each_package_carries_the_repository_license(package: Package) -> None:
    assert (package.folder / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert (package.folder / "README.md").read_text().startswith(f"# {package.name}\n")


def test_each_package_builds_a_wheel_and_an_sdist(dist: Path) -> None:
    expected = {name for p in PACKAGES for name in (p.wheel, p.sdist)}
    assert {p.name for p in dist.iterdir()} >= expected


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_wheel_metadata(package: Package, dist: Path) -> None:
    meta = _metadata(dist / package.wheel, package)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Summary"] == package.description
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert str(meta.get_payload()).startswith(f"# {package.name}\n")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL", []))
    assert set(urls) == URLS
    assert all(u.startswith("https://github.com/dtq-dev/dtq") for u in urls.values())
    classifiers = set(meta.get_all("Classifier", []))
    assert {
        "Development Status :: 4 - Beta",
        "Framework :: AsyncIO",
        "Programming Language :: Python :: 3.11",
        "Topic :: System :: Distributed Computing",
        "Typing :: Typed",
    } <= classifiers
    assert not any(c.startswith("License ::") for c in classifiers)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_wheel_and_sdist_ship_the_package_files(package: Package, dist: Path) -> None:
    wheel = _wheel_files(package, dist)
    sdist = _sdist_files(package, dist)
    assert f"{package.module}/py.typed" in wheel
    assert f"{package.module}-{package.version}.dist-info/licenses/LICENSE" in wheel
    assert {f"src/{package.module}/py.typed", "LICENSE", "README.md", "pyproject.toml"} <= sdist
    assert not any("/tests/" in f"/{name}" for name in wheel | sdist)


def test_the_core_packages_ship_every_lua_transition(dist: Path) -> None:
    core = next(p for p in PACKAGES if p.name == "dtq-core")
    assert len(LUA) > 1
    assert {f"dtq_core/protocol/lua/{n}" for n in LUA} <= _wheel_files(core, dist)
    assert {f"src/dtq_core/protocol/lua/{n}" for n in LUA} <= _sdist_files(core, dist)


_PROBE = """
import importlib, json, sys
from importlib.metadata import distribution
from dtq_core.protocol.library import library
modules = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}
scripts = {}
for name in sys.argv[1:]:
    for ep in distribution(name.replace("_", "-")).entry_points:
        if ep.group == "console_scripts":
            scripts[ep.name] = callable(ep.load())
print(json.dumps({"modules": modules, "scripts": scripts, "library": library().name}))
"""


def test_the_wheels_install_and_import_in_a_fresh_venv(installed: Path) -> None:
    venv = installed.parent
    done = _run(installed / "python", "-c", _PROBE, *(p.module for p in PACKAGES), cwd=venv)
    probe = json.loads(done.stdout)
    for module, path in probe["modules"].items():
        assert Path(path).is_relative_to(venv), f"{module} imported from {path}"
    assert probe["scripts"] == {s: True for p in PACKAGES for s in p.scripts}
    assert probe["library"] == library().name, "the installed Lua differs from the checkout's"
    for script in HELP_SCRIPTS:
        assert (installed / script).exists()
        assert "usage:" in _run(installed / script, "--help", cwd=venv).stdout


def test_the_core_sdist_installs(dist: Path, constraints: Path, tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    core = next(p for p in PACKAGES if p.name == "dtq-core")
    _install(python, dist / core.sdist, constraints=constraints)
    probe = "from dtq_core.protocol.library import library; print(library().name)"
    assert _run(python, "-c", probe, cwd=tmp_path).stdout.strip() == library().name
    assert _run(python.parent / "dtq", "--help", cwd=tmp_path).stdout.startswith("usage: dtq")


_PLAIN_CORE = """
import asyncio, importlib.util, json, sys
from dtq_core import Client
from dtq_core.errors import SettingsError
from dtq_core.infra import tracing

async def submit(url):
    async with Client.from_url(url, reject_unknown_queues=False) as client:
        handle = await client.enqueue("t", args=[1])
        record = await client.get(handle.id)
    return handle.trace_id, record.status, record.trace_id

refusals = []
for endpoint, env in (("http://collector:4318", {}), ("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})):
    try:
        tracing.configure_tracing("app", endpoint, env=env)
    except SettingsError as exc:
        refusals.append(str(exc))
print(json.dumps({
    "sdk": importlib.util.find_spec("opentelemetry.sdk") is not None,
    "off": tracing.configure_tracing("app", env={}),
    "submit": asyncio.run(submit(sys.argv[1])),
    "refusals": refusals,
}))
"""


def test_the_core_without_its_otlp_extra_submits_with_tracing_off(
    dist: Path, constraints: Path, tmp_path: Path, redis_url: str
) -> None:
    """A producer installs dtq-core alone: the OpenTelemetry API, not the SDK nor the
    exporter. It imports and submits; tracing is off, and asking for an export says what to
    install."""
    python = _fresh_venv(tmp_path / "venv")
    core = next(p for p in PACKAGES if p.name == "dtq-core")
    _install(python, dist / core.wheel, constraints=constraints)
    # The last line: structlog, left unconfigured, prints the client's log lines before it.
    out = _run(python, "-c", _PLAIN_CORE, redis_url, cwd=tmp_path).stdout
    probe = json.loads(out.splitlines()[-1])
    assert probe["sdk"] is False
    assert probe["off"] is False
    assert probe["submit"] == [None, "queued", None]
    assert probe["refusals"] == [
        "DTQ_OTLP_ENDPOINT asks for traces, but the OpenTelemetry SDK is not installed: "
        "install dtq-core[otlp]",
        "OTEL_EXPORTER_OTLP_ENDPOINT asks for traces, but the OpenTelemetry SDK is not "
        "installed: install dtq-core[otlp]",
    ]


@pytest.mark.parametrize("name", ["dtq-worker", "dtq-ingest-api", "dtq-scheduler-leader"])
def test_the_services_install_the_core_with_its_exporter(name: str, dist: Path) -> None:
    package = next(p for p in PACKAGES if p.name == name)
    requires = _metadata(dist / package.wheel, package).get_all("Requires-Dist", [])
    assert "dtq-core[otlp]" in requires
    core = next(p for p in PACKAGES if p.name == "dtq-core")
    core_requires = _metadata(dist / core.wheel, core).get_all("Requires-Dist", [])
    assert not any(r.startswith("opentelemetry-sdk") for r in core_requires if "extra" not in r)
    assert any(r.startswith("opentelemetry-sdk") and "extra == 'otlp'" in r for r in core_requires)
