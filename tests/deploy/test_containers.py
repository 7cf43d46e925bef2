"""The images built for real and docker-compose.yml run for real (slow; CI runs it).

The module builds every image (``deploy/docker/build.py``, BuildKit, the host's CA bundle as a
build secret), brings the stack up with three workers and both schedulers, waits for every
healthcheck compose defines, and then, only through the ports published on 127.0.0.1: submits
tasks through the dashboard's nginx, sees every replica as its own Prometheus target, reads an
event over the gateway, checks that every service runs as its non-root user on a read-only root
file system with its own Redis ACL user, kills a worker mid-task, restarts Redis, and takes the
stack down. Grafana is left out: it has no Debian package to stand in for its image where no
registry answers, so it stays checked by tests/deploy/test_compose.py alone.

Base images: the official ones when the engine has them or can pull them; otherwise the
stand-ins ``deploy/docker/bases.sh`` builds from Debian's packages (``DTQTEST_BASES=official``
or ``local`` forces one). Docker: the engine that answers, or a ``dockerd`` this module starts
and stops (``dtq_devtools.testing.containers``). Neither available: skipped, failed under CI.

Figures (build and start-up times, image sizes) go to ``.artifacts/faults.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml

from dtq_devtools.testing import figures, free_ports, wait_until_sync
from dtq_devtools.testing.containers import (
    ComposeProject,
    Container,
    DockerEngine,
    EngineUnavailableError,
)
from dtq_devtools.testing.tools import unavailable
from tests.deploy.conftest import ROOT, load_module

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPLICAS = {
    "redis": 1,
    "ingest-api": 1,
    "worker": 3,
    "scheduler-leader": 2,
    "event-gateway": 1,
    "dashboard": 1,
    "prometheus": 1,
}
"""The services the test runs and how many of each must be healthy (Grafana left out)."""
ONESHOTS = ("migrate",)
SERVICES = (*REPLICAS, *ONESHOTS)
SCRAPED = {"ingest-api": 8000, "worker": 8001, "event-gateway": 8002, "scheduler-leader": 8003}
"""Prometheus jobs (the service names) and the port each replica is scraped on."""
LOCAL_BASES = ROOT / "deploy" / "compose" / "local-bases.env"
TAG = "containertest"
LOGS = ROOT / ".artifacts" / "containers-compose.log"


@dataclass
class Stack:
    """The running project and what the tests need to reach it."""

    project: ComposeProject
    engine: DockerEngine
    config: dict[str, Any]
    dashboard: str
    prometheus: str
    keys: dict[str, str]
    passwords: dict[str, str]
    figures: dict[str, Any] = field(default_factory=dict)
    submitted: dict[str, Any] = field(default_factory=dict)
    """task id -> the result it must end with"""

    def client(self, key: str = "client") -> httpx.Client:
        return httpx.Client(
            base_url=self.dashboard, headers={"X-API-Key": self.keys[key]}, timeout=30
        )

    def running(self, service: str) -> list[Container]:
        return [c for c in self.project.service(service) if c.status == "running"]


# -- the engine, the bases, the images --------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    try:
        found = DockerEngine.find_or_start(log)
    except EngineUnavailableError as exc:
        unavailable(f"no Docker engine for the container test: {exc}")
    try:
        yield found
    finally:
        found.stop()


@dataclass(frozen=True)
class Bases:
    """The base images of this run."""

    variables: dict[str, str]
    """``*_IMAGE`` variables for the builds and compose: empty for the official defaults."""
    seconds: float | None = None
    """How long bases.sh took, when the stand-ins were used."""


@pytest.fixture(scope="module")
def build_py() -> ModuleType:
    return load_module("deploy/docker/build.py", "dtq_deploy_docker_build")


def official_bases(build_py: ModuleType) -> dict[str, str]:
    """Each variable of local-bases.env with its official default (Dockerfile ``ARG`` or the
    compose file's ``${NAME:-default}``)."""
    names = build_py.read_env_file(LOCAL_BASES)
    texts = [p.read_text() for p in (ROOT / "deploy" / "docker").glob("*.Dockerfile")]
    texts.append((ROOT / "docker-compose.yml").read_text())
    defaults = {}
    for name in names:
        for text in texts:
            match = re.search(rf"(?:ARG {name}=|\$\{{{name}:-)([^\s}}]+)", text)
            if match:
                defaults[name] = match.group(1)
                break
    assert set(defaults) == set(names), f"no official default for {set(names) - set(defaults)}"
    return defaults


@pytest.fixture(scope="module")
def bases(engine: DockerEngine, build_py: ModuleType) -> Bases:
    """The official images when the engine has or can pull every one of them, else the local
    stand-ins, built now by bases.sh (``DTQTEST_BASES=official`` or ``local`` decides)."""
    wanted = os.environ.get("DTQTEST_BASES", "")
    official = official_bases(build_py)
    if wanted != "local" and all(engine.can_pull(ref) for ref in official.values()):
        return Bases({})
    if wanted == "official":
        pytest.fail(f"DTQTEST_BASES=official, but these cannot be pulled: {official}")
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "docker" / "bases.sh")],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
        env={**os.environ, "DOCKER": engine.docker},
    )
    if done.returncode != 0 and (
        "debootstrap is missing" in done.stderr or "needs root" in done.stderr
    ):
        unavailable(f"the local base images cannot be built here: {done.stderr.strip()[-400:]}")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "LOCAL STAND-INS for the official base images" in done.stderr
    return Bases(build_py.read_env_file(LOCAL_BASES), time.monotonic() - started)


@pytest.fixture(scope="module")
def images(
    engine: DockerEngine,
    bases: Bases,
    build_py: ModuleType,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """Every image docker-compose.yml builds, built now; what that took."""
    started = time.monotonic()
    built = build_py.build(
        build_py.compose_builds({**bases.variables, "DTQ_VERSION": TAG}),
        ca=build_py.default_ca(),
        log_dir=tmp_path_factory.mktemp("build"),
        docker=engine.docker,
    )
    return {
        "build_seconds": round(time.monotonic() - started),
        "sizes_mb": {b.tag.split(":")[0]: round(b.size_bytes / 1e6) for b in built},
    }


# -- the stack ----------------------------------------------------------------------------------


def _secret(folder: Path, name: str) -> str:
    return (folder / name).read_text().strip()


@pytest.fixture(scope="module")
def stack(
    engine: DockerEngine,
    bases: Bases,
    images: dict[str, Any],
    secrets_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("compose")
    dashboard_port, prometheus_port = free_ports(2)
    name = f"dtqct{secrets.token_hex(3)}"
    variables = {
        "COMPOSE_PROJECT_NAME": name,
        "DTQ_VERSION": TAG,
        "DTQ_SECRETS_DIR": str(secrets_dir),
        "DASHBOARD_PORT": str(dashboard_port),
        "PROMETHEUS_PORT": str(prometheus_port),
        **bases.variables,
    }
    env_file = folder / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in variables.items()))
    files = [ROOT / "docker-compose.yml"]
    # The gateway asks for 65536 open files; a daemon whose own hard limit is lower (a
    # sandbox's) cannot grant it, so the test asks for what the daemon has, and says so.
    limit = engine.nofile_limit()
    if limit is not None and limit < 65536:
        override = folder / "nofile.yml"
        override.write_text(
            yaml.safe_dump(
                {
                    "services": {
                        "event-gateway": {"ulimits": {"nofile": {"soft": limit, "hard": limit}}}
                    }
                }
            )
        )
        files.append(override)
    project = ComposeProject(engine, name, files, env_file, ROOT)
    config: dict[str, Any] = yaml.safe_load(project.run("config").stdout)
    scale = [f"--scale={s}={n}" for s, n in REPLICAS.items() if n > 1]
    measured: dict[str, Any] = {
        "bases": "local stand-ins" if bases.variables else "official",
        "bases_seconds": None if bases.seconds is None else round(bases.seconds),
        **images,
        "nofile_capped_at": limit if len(files) > 1 else None,
        "engine": engine.server_version(),
        "dockerd_start_seconds": round(engine.started_in, 1) if engine.process else None,
        "compose": " ".join(Path(p).name for p in project.command),
    }
    started = time.monotonic()
    try:
        project.run("up", "--detach", "--no-build", *scale, *SERVICES, timeout=600)
        project.wait_ready(REPLICAS, ONESHOTS, timeout=300)
        measured["up_to_healthy_seconds"] = round(time.monotonic() - started)
        yield Stack(
            project=project,
            engine=engine,
            config=config,
            dashboard=f"http://127.0.0.1:{dashboard_port}",
            prometheus=f"http://127.0.0.1:{prometheus_port}",
            keys={
                k: _secret(secrets_dir, f"api_key_{k}") for k in ("admin", "client", "dashboard")
            },
            passwords={"dtq-ops": _secret(secrets_dir, "redis_pw_ops")},
            figures=measured,
        )
    finally:
        if any(project.leftovers().values()):
            save_logs(project)
            project.down()
        figures.append(
            figures.figures_path(ROOT),
            {"test": f"{__name__}::stack", "fault": "container stack", **measured},
        )


# -- helpers ------------------------------------------------------------------------------------


def save_logs(project: ComposeProject) -> None:
    """Every container's log, for a look after the run (CI keeps ``.artifacts``)."""
    done = project.run("logs", "--no-color", "--timestamps", check=False, timeout=120)
    LOGS.parent.mkdir(parents=True, exist_ok=True)
    LOGS.write_text(done.stdout + done.stderr)


def submit(stack: Stack, body: dict[str, Any]) -> str:
    with stack.client() as client:
        answer = client.post("/api/v1/tasks", json=body)
    assert answer.status_code == 201, answer.text
    task_id: str = answer.json()["id"]
    return task_id


def outcome(stack: Stack, task_id: str, timeout: float) -> dict[str, Any]:
    """The task once it has ended, read through nginx; 503s (Redis restarting) are waited out."""
    deadline = time.monotonic() + timeout
    with stack.client() as client:
        while True:
            wait = max(1, min(20, int(deadline - time.monotonic())))
            try:
                answer = client.get(f"/api/v1/tasks/{task_id}/result", params={"wait": wait})
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code == 200:
                done = answer.json()
                if done["status"] in {"succeeded", "failed", "dead", "cancelled", "expired"}:
                    task: dict[str, Any] = client.get(f"/api/v1/tasks/{task_id}").json()
                    return task
            if time.monotonic() > deadline:
                last = answer.text if answer is not None else "no answer"
                raise TimeoutError(f"{task_id} not ended within {timeout:.0f} s: {last}")
            if answer is None or answer.status_code != 200:
                time.sleep(0.5)


def prometheus_targets(stack: Stack) -> dict[str, set[tuple[str, str]]]:
    answer = httpx.get(f"{stack.prometheus}/api/v1/targets", params={"state": "active"}, timeout=10)
    answer.raise_for_status()
    found: dict[str, set[tuple[str, str]]] = {}
    for target in answer.json()["data"]["activeTargets"]:
        found.setdefault(target["labels"]["job"], set()).add(
            (target["labels"]["instance"], target["health"])
        )
    return found


def process_uids(stack: Stack, container: Container) -> set[int]:
    """The uid of every process in ``container``, as the host's ``ps`` sees them."""
    top = stack.engine.run("top", container.id, "-o", "pid,uid").stdout.splitlines()
    return {int(line.split()[1]) for line in top[1:] if line.strip()}


def redis_clients(stack: Stack) -> list[dict[str, str]]:
    """CLIENT LIST, asked inside the Redis container as the operators' user (dtq-ops)."""
    redis = stack.running("redis")[0]
    done = stack.engine.run(
        "exec",
        "--env",
        f"REDISCLI_AUTH={stack.passwords['dtq-ops']}",
        redis.id,
        "redis-cli",
        "--user",
        "dtq-ops",
        "client",
        "list",
    )
    return [
        dict(pair.split("=", 1) for pair in line.split() if "=" in pair)
        for line in done.stdout.splitlines()
        if line.strip()
    ]


# -- the tests, in the order they run -----------------------------------------------------------


def test_every_service_is_healthy_and_published_on_loopback_only(stack: Stack) -> None:
    containers = stack.project.containers()
    for service, wanted in REPLICAS.items():
        healthy = [c for c in containers if c.service == service and c.health == "healthy"]
        assert len(healthy) == wanted, service
    migrate = [c for c in containers if c.service == "migrate"]
    assert [(c.status, c.exit_code) for c in migrate] == [("exited", 0)]
    published = {c.service: set(c.published) for c in containers if c.published}
    assert set(published) == {"dashboard", "prometheus"}
    for service, bindings in published.items():
        assert {host for host, _ in bindings} == {"127.0.0.1"}, service


def test_tasks_submitted_through_the_dashboard_succeed(stack: Stack) -> None:
    with stack.client() as client:
        body = {"tasks": [{"task": "examples.add", "args": [i, 1000]} for i in range(30)]}
        answer = client.post("/api/v1/tasks/batch", json=body)
    assert answer.status_code == 200, answer.text
    ids = [item["task"]["id"] for item in answer.json()["results"]]
    assert len(ids) == 30
    ran_on = set()
    for i, task_id in enumerate(ids):
        task = outcome(stack, task_id, timeout=60)
        assert (task["status"], task["result"]) == ("succeeded", i + 1000), task
        ran_on.add(task["worker"])
        stack.submitted[task_id] = i + 1000
    stack.figures["workers_that_ran_the_batch"] = len(ran_on)


def test_every_replica_is_its_own_prometheus_target(stack: Stack) -> None:
    wanted = {
        job: {(f"{c.addresses['app']}:{port}", "up") for c in stack.running(job)}
        for job, port in SCRAPED.items()
    }
    assert len(wanted["worker"]) == 3
    assert len(wanted["scheduler-leader"]) == 2

    def all_up() -> bool:
        found = prometheus_targets(stack)
        return all(found.get(job) == targets for job, targets in wanted.items())

    try:
        wait_until_sync(all_up, timeout=90, interval=2, message="every replica scraped")
    finally:
        stack.figures["prometheus_targets"] = {
            job: len(t) for job, t in prometheus_targets(stack).items()
        }


def test_an_event_arrives_over_the_gateway(stack: Stack) -> None:
    task_id = ""
    params = {"queue": "default", "types": "task.succeeded"}
    with (
        stack.client("dashboard") as reader,
        reader.stream("GET", "/sse/events", params=params, timeout=30) as events,
    ):
        assert events.status_code == 200
        kind = ""
        for line in events.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "subscribed" and not task_id:
                task_id = submit(stack, {"task": "examples.add", "args": [40, 2]})
                stack.submitted[task_id] = 42
            elif line.startswith("data: ") and task_id:
                frame = json.loads(line.removeprefix("data: "))
                if frame.get("task_id") == task_id:
                    assert frame["type"] == "task.succeeded"
                    assert frame["cursor"]
                    break
    assert task_id


def test_every_service_runs_as_its_own_non_root_user_on_a_read_only_root(stack: Stack) -> None:
    services = stack.config["services"]
    for container in stack.project.containers():
        if container.status != "running":
            continue
        user = services[container.service]["user"]
        assert container.user == user, container.name
        uid = int(user.split(":")[0])
        assert uid != 0, container.name
        assert process_uids(stack, container) == {uid}, container.name
        assert container.read_only, container.name
        probe = stack.engine.run("exec", container.id, "touch", "/.dtq-write-probe", check=False)
        assert probe.returncode != 0, container.name
        assert "Read-only file system" in probe.stderr, (container.name, probe.stderr)

    # Every dtq service talks to Redis as its own ACL user, and only as that one.
    users = {
        name: services[name]["environment"]["DTQ_REDIS_USERNAME"]
        for name in ("ingest-api", "worker", "scheduler-leader", "event-gateway")
    }
    assert len(set(users.values())) == len(users)
    replicas = [c for name in users for c in stack.running(name)]
    by_address = {c.addresses["data"]: c for c in replicas}

    def seen() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for client in redis_clients(stack):
            container = by_address.get(client["addr"].rsplit(":", 1)[0])
            if container is not None:
                found.setdefault(container.name, set()).add(client["user"])
        return found

    found = wait_until_sync(
        lambda: (f := seen()) and len(f) == len(replicas) and f,
        timeout=30,
        interval=1,
        message="a Redis connection from every replica of every dtq service",
    )
    for container in replicas:
        assert found[container.name] == {users[container.service]}, container.name


def test_a_killed_workers_task_finishes_on_another(stack: Stack) -> None:
    task_id = submit(stack, {"task": "examples.sleep", "args": [6]})

    def running() -> dict[str, Any] | None:
        with stack.client() as client:
            task: dict[str, Any] = client.get(f"/api/v1/tasks/{task_id}").json()
        return task if task["status"] == "running" and task.get("worker") else None

    task = wait_until_sync(running, timeout=30, interval=0.2, message="the task running")
    victim_id = task["worker"]
    hostname = victim_id.rsplit("-", 1)[0]
    victim = next(c for c in stack.running("worker") if c.hostname == hostname)
    killed_at = time.monotonic()
    stack.engine.run("kill", victim.id)
    # The lease outlives the worker by up to DTQ_VISIBILITY_TIMEOUT_S (30 s), then a peer
    # reclaims the entry and runs the task again.
    done = outcome(stack, task_id, timeout=150)
    stack.figures["killed_worker_task_finished_after_seconds"] = round(time.monotonic() - killed_at)
    after = next(c for c in stack.project.service("worker") if c.id == victim.id)
    stack.figures["killed_worker_container_restarted"] = after.restart_count > 0
    assert done["status"] == "succeeded", done
    assert done["attempts"] >= 2, done
    assert done["worker"] != victim_id, done
    # Docker counts `docker kill` as a manual stop, so restart: unless-stopped leaves the
    # container down (20.10 does); where an engine restarts it, its new worker may be the peer.
    if after.restart_count == 0:
        assert done["worker"].rsplit("-", 1)[0] != hostname, done
    stack.submitted[task_id] = 6


def test_a_redis_restart_brings_every_task_back_from_the_aof(stack: Stack) -> None:
    # Tasks due after the restart: they exist only in Redis, as scheduled tasks, meanwhile.
    later = {
        submit(stack, {"task": "examples.add", "args": [i, 5], "delay_s": 12}): i + 5
        for i in range(10)
    }
    redis = stack.running("redis")[0]
    restarted_at = time.monotonic()
    stack.engine.run("restart", "--time", "30", redis.id, timeout=120)
    stack.project.wait_ready({"redis": 1}, (), timeout=120)
    assert stack.running("redis")[0].started_at != redis.started_at
    for task_id, result in {**stack.submitted, **later}.items():
        task = outcome(stack, task_id, timeout=120)
        assert (task["status"], task["result"]) == ("succeeded", result), task
    stack.figures["redis_restart_to_all_done_seconds"] = round(time.monotonic() - restarted_at)
    stack.figures["tasks_checked_after_restart"] = len(stack.submitted) + len(later)


def test_down_leaves_nothing(stack: Stack) -> None:
    save_logs(stack.project)
    started = time.monotonic()
    stack.project.down()
    stack.figures["down_seconds"] = round(time.monotonic() - started)
    assert stack.project.leftovers() == {"containers": [], "networks": [], "volumes": []}
