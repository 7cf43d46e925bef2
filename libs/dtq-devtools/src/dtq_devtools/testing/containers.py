"""Docker for the container test (``tests/deploy/test_containers.py``): the engine that
answers, or a ``dockerd`` the suite starts and stops itself, and a compose project run on it.

Only what this module started is ever stopped: the ``dockerd`` it launched (by its pid, and the
``containerd`` that daemon launched, by the pid file it wrote) and the compose project it
named. Images stay: they are the build cache of the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ComposeProject",
    "Container",
    "DockerEngine",
    "EngineUnavailableError",
]

DOCKER_PIDFILE = Path("/var/run/docker.pid")
CONTAINERD_PIDFILE = Path("/var/run/docker/containerd/containerd.pid")
"""Where a ``dockerd`` that runs its own ``containerd`` keeps that one's pid."""


class EngineUnavailableError(Exception):
    """No Docker engine answers and none can be started here (the message says why)."""


def _run(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else None,
        cwd=cwd,
    )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} ... exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-3000:]}"
        )
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@dataclass
class DockerEngine:
    """A Docker engine to run containers on.

    Attributes:
        docker: the client for everyday commands (``docker`` on ``PATH``).
        process: the ``dockerd`` this run started, or ``None`` when one was answering.
        log: that daemon's log file.
        started_in: seconds its start took (0 when it was running already).
    """

    docker: str
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    started_in: float = 0.0

    @classmethod
    def find_or_start(cls, log: Path, timeout: float = 120.0) -> DockerEngine:
        """The engine that answers on the default socket, or a ``dockerd`` started now.

        Raises:
            EngineUnavailableError: there is no client, or no engine answers and ``dockerd`` is not
                installed, this is not root, or the daemon does not come up.
        """
        docker = shutil.which("docker") or shutil.which("/usr/bin/docker")
        if docker is None:
            raise EngineUnavailableError("no docker client (apt-get install -y docker.io)")
        engine = cls(docker)
        if engine.answers():
            return engine
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise EngineUnavailableError(
                "no Docker engine answers and dockerd is not installed "
                "(apt-get install -y docker.io)"
            )
        if os.geteuid() != 0:
            raise EngineUnavailableError("no Docker engine answers and only root may start dockerd")
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with log.open("ab") as out:
            engine.process = subprocess.Popen(
                [dockerd], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        engine.log = log
        deadline = started + timeout
        while not engine.answers():
            if engine.process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                engine.stop()
                raise EngineUnavailableError(
                    f"dockerd did not come up within {timeout:.0f} s:\n{tail}"
                )
            time.sleep(0.5)
        engine.started_in = time.monotonic() - started
        return engine

    def answers(self) -> bool:
        try:
            done = _run(
                [self.docker, "info", "--format", "{{.ServerVersion}}"], timeout=30, check=False
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and bool(done.stdout.strip())

    def run(
        self, *args: str, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``docker <args>``; raises with its stderr when it fails and ``check``."""
        return _run([self.docker, *args], timeout=timeout, check=check)

    def server_version(self) -> str:
        return self.run("version", "--format", "{{.Server.Version}}").stdout.strip()

    def image_exists(self, ref: str) -> bool:
        return self.run("image", "inspect", ref, check=False, timeout=30).returncode == 0

    def can_pull(self, ref: str, timeout: float = 300.0) -> bool:
        """Whether ``ref`` is here or a registry hands it over now."""
        if self.image_exists(ref):
            return True
        try:
            return self.run("pull", "--quiet", ref, check=False, timeout=timeout).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def daemon_pid(self) -> int | None:
        if self.process is not None:
            return self.process.pid
        try:
            return int(DOCKER_PIDFILE.read_text().strip())
        except (OSError, ValueError):
            return None

    def nofile_limit(self) -> int | None:
        """The daemon's hard limit on open files: no container may be given a higher one."""
        pid = self.daemon_pid()
        if pid is None:
            return None
        try:
            limits = Path(f"/proc/{pid}/limits").read_text()
        except OSError:
            return None
        match = re.search(r"^Max open files\s+(\S+)\s+(\S+)", limits, re.M)
        if match is None or match.group(2) == "unlimited":
            return None
        return int(match.group(2))

    def stop(self) -> None:
        """Stop the ``dockerd`` this run started (it stops its containers), then the
        ``containerd`` that daemon ran, should it outlive it. A daemon found running stays."""
        if self.process is None:
            return
        containerd = None
        with contextlib.suppress(OSError, ValueError):
            containerd = int(CONTAINERD_PIDFILE.read_text().strip())
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if containerd is not None and not _wait_gone(containerd, 15):
            os.kill(containerd, signal.SIGTERM)
            _wait_gone(containerd, 15)
        self.process = None


@dataclass(frozen=True)
class Container:
    """One container of a compose project, as ``docker inspect`` describes it."""

    id: str
    name: str
    service: str
    hostname: str
    user: str
    read_only: bool
    status: str
    health: str | None
    exit_code: int
    restart_count: int
    started_at: str
    addresses: Mapping[str, str] = field(default_factory=dict)
    """network name (without the project prefix) -> IPv4 address"""
    published: tuple[tuple[str, str], ...] = ()
    """(host address, host port) of every published port"""

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any], project: str) -> Container:
        state = data["State"]
        networks = data["NetworkSettings"]["Networks"] or {}
        prefix = f"{project}_"
        return cls(
            id=data["Id"],
            name=data["Name"].lstrip("/"),
            service=data["Config"]["Labels"].get("com.docker.compose.service", ""),
            hostname=data["Config"]["Hostname"],
            user=data["Config"]["User"],
            read_only=bool(data["HostConfig"]["ReadonlyRootfs"]),
            status=state["Status"],
            health=(state.get("Health") or {}).get("Status"),
            exit_code=int(state["ExitCode"]),
            restart_count=int(data.get("RestartCount", 0)),
            started_at=state["StartedAt"],
            addresses={
                name.removeprefix(prefix): net["IPAddress"]
                for name, net in networks.items()
                if net.get("IPAddress")
            },
            published=tuple(
                (binding["HostIp"], binding["HostPort"])
                for bindings in (data["NetworkSettings"]["Ports"] or {}).values()
                for binding in bindings or ()
            ),
        )


class ComposeProject:
    """One compose project on ``engine``: its own name, its own env file (no ``.env`` of the
    checkout is read), and everything it makes labelled with that name."""

    def __init__(
        self,
        engine: DockerEngine,
        name: str,
        files: Sequence[Path],
        env_file: Path,
        directory: Path,
    ) -> None:
        self.engine = engine
        self.name = name
        self.files = list(files)
        self.env_file = env_file
        self.directory = directory
        self.command = self._compose_command()

    def _compose_command(self) -> list[str]:
        """``docker compose`` (v2) where the plugin is installed, else Debian's
        ``docker-compose`` (1.29)."""
        v2 = _run([self.engine.docker, "compose", "version"], timeout=30, check=False)
        if v2.returncode == 0:
            return [self.engine.docker, "compose"]
        v1 = shutil.which("docker-compose")
        if v1 is None:
            raise EngineUnavailableError("neither `docker compose` nor docker-compose is installed")
        return [v1]

    def run(
        self, *args: str, timeout: float = 300.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [*self.command, "--project-name", self.name, "--env-file", str(self.env_file)]
        for path in self.files:
            argv += ["--file", str(path)]
        return _run(
            [*argv, *args], timeout=timeout, check=check, cwd=self.directory, env=os.environ
        )

    def containers(self, *, all_states: bool = True) -> list[Container]:
        listed = self.engine.run(
            "ps",
            *(["--all"] if all_states else []),
            "--quiet",
            "--no-trunc",
            "--filter",
            f"label=com.docker.compose.project={self.name}",
        ).stdout.split()
        if not listed:
            return []
        data = json.loads(self.engine.run("inspect", *listed).stdout)
        return sorted(
            (Container.from_inspect(item, self.name) for item in data),
            key=lambda c: c.name,
        )

    def service(self, name: str) -> list[Container]:
        return [c for c in self.containers() if c.service == name]

    def logs(self, tail: int = 40) -> str:
        done = self.run("logs", "--no-color", "--tail", str(tail), check=False, timeout=60)
        return done.stdout[-12000:]

    def wait_ready(
        self, replicas: Mapping[str, int], oneshots: Sequence[str], timeout: float
    ) -> list[Container]:
        """Wait until every service of ``replicas`` has that many containers, all running and
        healthy, and every one-shot of ``oneshots`` has exited 0; returns the containers.

        Raises:
            RuntimeError: a one-shot failed or a container stopped (with the project's logs).
            TimeoutError: not ready within ``timeout`` s (with what was not, and the logs).
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self.containers()
            waiting = []
            for service, wanted in replicas.items():
                mine = [c for c in found if c.service == service]
                ready = [c for c in mine if c.status == "running" and c.health == "healthy"]
                if len(ready) != wanted:
                    states = ", ".join(f"{c.name}: {c.status}/{c.health}" for c in mine)
                    waiting.append(f"{service} {len(ready)}/{wanted} healthy ({states})")
            for service in oneshots:
                mine = [c for c in found if c.service == service]
                failed = [c for c in mine if c.status == "exited" and c.exit_code != 0]
                if failed:
                    raise RuntimeError(f"{service} exited {failed[0].exit_code}:\n{self.logs()}")
                if not mine or any(c.status != "exited" for c in mine):
                    waiting.append(f"{service} not done")
            if not waiting:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"not ready within {timeout:.0f} s: {'; '.join(waiting)}\n{self.logs()}"
                )
            time.sleep(1.0)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes still labelled with this project."""
        label = f"label=com.docker.compose.project={self.name}"
        return {
            "containers": self.engine.run(
                "ps", "--all", "--quiet", "--filter", label
            ).stdout.split(),
            "networks": self.engine.run(
                "network", "ls", "--quiet", "--filter", label
            ).stdout.split(),
            "volumes": self.engine.run("volume", "ls", "--quiet", "--filter", label).stdout.split(),
        }

    def down(self) -> None:
        """``down --volumes --remove-orphans``: containers, networks and volumes go."""
        self.run("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=300)
