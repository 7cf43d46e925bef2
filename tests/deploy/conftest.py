"""Fixtures of the deployment tests: the repository's deploy scripts as modules, generated
secrets, and a redis-server that loads the generated ACL file."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from dtq_devtools.testing import free_port, terminate, wait_until_sync
from dtq_devtools.testing.tools import need_tool  # noqa: F401 - the deploy tests import it from here

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "test-admin"
"""A user only the tests add to the rendered ACL file, to look at the others (ACL DRYRUN)."""
ADMIN_PASSWORD = "test-admin-password"  # noqa: S105 - a throwaway server's test-only user


def load_module(relative: str, name: str) -> ModuleType:
    """Import a script of the repository (``deploy/...``) that is not in a package."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def make_secrets() -> ModuleType:
    return load_module("deploy/make_secrets.py", "dtq_deploy_make_secrets")


@pytest.fixture(scope="session")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory, make_secrets: ModuleType) -> Path:
    """A complete ``deploy/secrets`` made by the real generator, in a temporary folder."""
    out = tmp_path_factory.mktemp("secrets")
    make_secrets.generate(out)
    return out


class AclRedis:
    """A redis-server started with ``--aclfile``: its default user is off, so readiness is
    a NOAUTH answer rather than PONG. Only its own PID is ever signalled."""

    def __init__(self, data_dir: Path, aclfile: Path, *extra: str) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is required"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(data_dir),
                "--aclfile",
                str(aclfile),
                "--save",
                "",
                "--logfile",
                str(data_dir / "redis.log"),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until_sync(self._answers, timeout=10, message="redis-server with an ACL file")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            log = (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited: {log}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"-NOAUTH")
        except OSError:
            return False

    def url(self, user: str | None = None) -> str:
        who = f"{user}@" if user else ""
        return f"redis://{who}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        terminate(self.proc)


def acl_file_with_admin(secrets_dir: Path, dest: Path, admin_password: str) -> Path:
    """The generated ACL file plus the tests' own admin user."""
    text = (secrets_dir / "users.acl").read_text()
    dest.write_text(text + f"user {ADMIN} on >{admin_password} ~* &* +@all\n")
    return dest


@pytest.fixture
def acl_redis(tmp_path: Path, secrets_dir: Path) -> Iterator[AclRedis]:
    aclfile = acl_file_with_admin(secrets_dir, tmp_path / "users.acl", ADMIN_PASSWORD)
    server = AclRedis(tmp_path / "redis", aclfile)
    yield server
    server.stop()
