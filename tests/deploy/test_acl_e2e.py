"""The services end to end, each as its own Redis ACL user from the generated users.acl, with
passwords and API keys from files, as docker-compose.yml runs them: `dtq migrate` loads the
function library as dtq-migrate; then a submit through the API, a worker runs it, a scheduler
promotes a delayed task, the gateway streams the events; the API's browse and admin routes
are exercised too, a schedule is put, fired by the scheduler, paused, resumed and deleted, and
the operator CLI runs as dtq-ops (the audit stream holds the admin actions of both). At the
end Redis's ACL LOG must be empty: no service was refused a command anywhere on the way (a
missing grant shows there even when a caller tolerates it).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import redis

from dtq_devtools.testing import free_port, wait_until_sync
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess, services
from tests.deploy.conftest import ADMIN, ADMIN_PASSWORD, AclRedis

pytestmark = pytest.mark.slow


def service_env(acl_redis: AclRedis, secrets_dir: Path, user: str) -> dict[str, str]:
    short = user.removeprefix("dtq-")
    return {
        **FAST_ENV,
        "DTQ_REDIS_URL": acl_redis.url(),
        "DTQ_REDIS_USERNAME": user,
        "DTQ_REDIS_PASSWORD_FILE": str(secrets_dir / f"redis_pw_{short}"),
    }


class SseReader:
    """Collects the data lines of an SSE stream in a thread."""

    def __init__(self, url: str, key: str) -> None:
        self.lines: list[str] = []
        self.url = url
        self.key = key
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(5.0, read=None)) as http:  # noqa: SIM117
            with http.stream("GET", self.url, headers={"X-API-Key": self.key}) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        self.lines.append(line)
                    if self.stop.is_set():
                        return

    def saw(self, *needles: str) -> bool:
        return any(all(n in line for n in needles) for line in list(self.lines))


@pytest.fixture
def admin(acl_redis: AclRedis) -> Iterator[redis.Redis]:
    client = redis.Redis(
        port=acl_redis.port, username=ADMIN, password=ADMIN_PASSWORD, decode_responses=True
    )
    yield client
    client.close()


def test_every_service_runs_as_its_own_acl_user(
    acl_redis: AclRedis,
    admin: redis.Redis,
    secrets_dir: Path,
    make_secrets: ModuleType,
    tmp_path: Path,
) -> None:
    key = {
        name: (secrets_dir / f"api_key_{name}").read_text().strip()
        for name in make_secrets.API_KEYS
    }
    keys_file = {"DTQ_API_KEYS_FILE": str(secrets_dir / "api_keys"), "DTQ_ENV": "production"}

    migrate = subprocess.run(
        [sys.executable, "-m", "dtq_core.ops.cli", "migrate"],
        env={**service_env(acl_redis, secrets_dir, "dtq-migrate"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    api_port, gateway_port = free_port(), free_port()
    api = ServiceProcess(
        "dtq_ingest_api",
        [],
        {
            **service_env(acl_redis, secrets_dir, "dtq-api"),
            **keys_file,
            "DTQ_API_PORT": str(api_port),
        },
        tmp_path / "api.log",
    )
    gateway = ServiceProcess(
        "dtq_event_gateway",
        [],
        {
            **service_env(acl_redis, secrets_dir, "dtq-gateway"),
            **keys_file,
            "DTQ_GATEWAY_PORT": str(gateway_port),
        },
        tmp_path / "gateway.log",
    )
    worker = ServiceProcess(
        "dtq_worker",
        ["--app", "dtq_devtools.testing.app:registry", "--queues", "default", "--concurrency", "4"],
        service_env(acl_redis, secrets_dir, "dtq-worker"),
        tmp_path / "worker.log",
    )
    scheduler_port = free_port()
    scheduler = ServiceProcess(
        "dtq_scheduler_leader",
        ["--app", "dtq_devtools.testing.app:registry"],
        {
            **service_env(acl_redis, secrets_dir, "dtq-scheduler"),
            # Every duty runs several times within the test: the reconciler's SCAN too.
            "DTQ_RECONCILE_INTERVAL_S": "0.3",
            "DTQ_QUEUE_METRICS_INTERVAL_S": "0.2",
            "DTQ_SCHEDULER_METRICS_PORT": str(scheduler_port),
            "DTQ_METRICS_HOST": "127.0.0.1",
        },
        tmp_path / "scheduler.log",
    )
    logs = (api, gateway, worker, scheduler)
    base = f"http://127.0.0.1:{api_port}"
    with services(*logs), httpx.Client(base_url=base, timeout=30) as http:
        try:
            _exercise(http, base, gateway_port, key, logs)
            _schedules(http, key, admin)
            _workflows(http, key, admin)
            _operator(acl_redis, secrets_dir)
            # The admin actions of the API and of the operator CLI are in the audit stream.
            audit = [fields for _, fields in admin.xrange("dtq:audit")]
            assert {"queue.pause", "schedule.put", "schedule.delete"} <= {
                a["action"] for a in audit
            }
            assert any(a["actor"] == "acl-e2e-operator" for a in audit), audit
            # The leader's queue gauges, read as dtq-scheduler, show the queue.
            metrics = f"http://127.0.0.1:{scheduler_port}/metrics"
            wait_until_sync(
                lambda: (
                    "dtq_queue_depth{" in _text(metrics) and 'queue="default"' in _text(metrics)
                ),
                timeout=15,
                message="scheduler queue gauges",
            )
            assert 'dtq_scheduler_redis_errors_total{duty="reconciler"} 0.0' in _text(metrics)
        except BaseException:
            for p in logs:
                print(f"--- {p.module}\n{p.log()[-3000:]}")
            print("--- ACL LOG", admin.acl_log())
            raise
    denials = [(e["username"], e["reason"], e["object"]) for e in admin.acl_log()]
    assert denials == []


def _ready(http: httpx.Client) -> bool:
    try:
        return http.get("/ready").status_code == 200
    except httpx.TransportError:
        return False


def _exercise(
    http: httpx.Client,
    base: str,
    gateway_port: int,
    key: dict[str, str],
    procs: tuple[ServiceProcess, ...],
) -> None:
    wait_until_sync(lambda: _ready(http), timeout=30, message="ingest-api ready")
    gw = f"http://127.0.0.1:{gateway_port}"
    wait_until_sync(lambda: _answers(f"{gw}/health"), timeout=30, message="event-gateway answering")
    events = SseReader(f"{gw}/sse/events?queue=default", key["dashboard"])
    # A client without a cursor starts live: submit only once it is subscribed.
    wait_until_sync(lambda: events.saw('"subscribed"'), timeout=15, message="SSE subscribed")
    client = {"X-API-Key": key["client"]}
    admin = {"X-API-Key": key["admin"]}

    # Workers register their tasks; a submit of a known task then goes through.
    now = _submit(http, client, {"task": "echo", "args": [1, 2]})
    later = _submit(http, client, {"task": "echo", "args": ["later"], "delay_s": 1})
    # Grouped tasks: the claim, finish and promotion keep their group's keys as each user.
    limits = http.put("/api/v1/queues/default", json={"group_concurrency": 1}, headers=admin)
    assert limits.is_success, limits.text
    paused = http.put("/api/v1/queues/default/groups/acme", json={"paused": True}, headers=admin)
    assert paused.is_success, paused.text
    grouped = [
        _submit(http, client, {"task": "echo", "args": [i], "group": "acme", "delay_s": i})
        for i in range(2)
    ]
    resumed = http.put("/api/v1/queues/default/groups/acme", json={"paused": False}, headers=admin)
    assert resumed.is_success, resumed.text
    for task_id in (now, later, *grouped):
        outcome = http.get(f"/api/v1/tasks/{task_id}/result", params={"wait": 15}, headers=client)
        assert outcome.status_code == 200, outcome.text
        assert outcome.json()["status"] == "succeeded", outcome.text
    wait_until_sync(
        lambda: events.saw("task.succeeded", later), timeout=15, message="gateway event"
    )
    assert events.saw("task.succeeded", now)

    # Browse and steer through the API: every one of these is a Redis path of its own.
    assert http.get("/api/v1/queues", headers=client).status_code == 200
    assert http.get("/api/v1/queues/default", headers=client).status_code == 200
    assert http.get("/api/v1/workers", headers=client).status_code == 200
    assert http.get("/api/v1/tasks", params={"queue": "default"}, headers=client).is_success
    assert http.get(f"/api/v1/tasks/{now}", headers=client).status_code == 200
    parked = _submit(http, client, {"task": "echo", "args": [3], "delay_s": 600})
    assert http.post(f"/api/v1/tasks/{parked}/cancel", headers=admin).is_success
    assert http.post("/api/v1/queues/default/pause", headers=admin).is_success
    assert http.post("/api/v1/queues/default/resume", headers=admin).is_success
    dead = _submit(http, client, {"task": "fail_permanently"})
    wait_until_sync(
        lambda: http.get(f"/api/v1/tasks/{dead}", headers=client).json()["status"] == "dead",
        timeout=15,
        message="task in the DLQ",
    )
    assert http.get("/api/v1/queues/default/dlq", headers=client).status_code == 200
    requeue = http.post("/api/v1/queues/default/dlq/requeue", json={"ids": [dead]}, headers=admin)
    assert requeue.is_success, requeue.text
    assert http.get("/api/v1/schedules", headers=client).status_code == 200
    # The per-minute history: counted by submit, finish and claim as their users, read here.
    history = http.get("/api/v1/stats/history", params={"queue": "default"}, headers=client)
    assert history.status_code == 200, history.text
    assert sum(history.json()["succeeded"]) >= 4, history.text
    assert http.get(f"{base}/metrics").status_code == 200
    assert all(p.alive() for p in procs), [p.module for p in procs if not p.alive()]
    events.stop.set()


def _workflows(http: httpx.Client, key: dict[str, str], admin: redis.Redis) -> None:
    """A chord submitted through the API (dtq-api), its steps finished by the worker (which
    notes them in the outbox as dtq-worker), advanced and announced by the scheduler leader
    (dtq-scheduler); another one cancelled through the API."""
    members = [{"task": "echo", "args": [i]} for i in range(3)]
    body = {"workflow": {"chord": {"header": members, "callback": {"task": "echo"}}}}
    submitted = http.post("/api/v1/workflows", json=body, headers={"X-API-Key": key["client"]})
    assert submitted.status_code == 201, submitted.text
    url = submitted.headers["location"]
    read = {"X-API-Key": key["dashboard"]}
    wait_until_sync(
        lambda: http.get(url, headers=read).json()["status"] == "succeeded",
        timeout=30,
        message="the workflow succeeded",
    )
    result = http.get(url, headers=read).json()["result"]
    assert [r["args"] for r in result["args"][0]] == [[0], [1], [2]]
    slow = {"workflow": {"chain": [{"task": "sleep", "args": [30]}, {"task": "echo"}]}}
    wf = http.post("/api/v1/workflows", json=slow, headers={"X-API-Key": key["client"]}).json()
    cancel = http.post(f"/api/v1/workflows/{wf['id']}/cancel", headers={"X-API-Key": key["admin"]})
    assert cancel.status_code == 200, cancel.text
    wait_until_sync(
        lambda: (
            {"workflow.succeeded", "workflow.cancelled"}
            <= {f.get("type") for _, f in admin.xrange("dtq:events")}
        ),
        timeout=15,
        message="the leader published the workflow events",
    )
    _children_and_batches(http, key)


def _children_and_batches(http: httpx.Client, key: dict[str, str]) -> None:
    """A parent whose children ride in its finish (dtq-worker routes and checks them) and are
    made by the leader (dtq-scheduler lists their workflow); a batch created, filled and
    sealed through the API (dtq-api), its callback submitted by the leader."""
    client, read = {"X-API-Key": key["client"]}, {"X-API-Key": key["dashboard"]}
    parent = http.post(
        "/api/v1/tasks", json={"task": "spawner", "args": [3, 0]}, headers=client
    ).json()["id"]
    wait_until_sync(
        lambda: http.get(f"/api/v1/tasks/{parent}", headers=read).json()["children_workflow_id"],
        timeout=30,
        message="the parent spawned its children",
    )
    children = http.get(f"/api/v1/tasks/{parent}", headers=read).json()["children_workflow_id"]
    url = f"/api/v1/workflows/{children}"
    wait_until_sync(
        lambda: http.get(url, headers=read).json().get("status") == "succeeded",
        timeout=30,
        message="the children and their continuation ran",
    )
    assert http.get(url, headers=read).json()["result"] == [0, 1, 2]
    assert any(
        w["id"] == children for w in http.get("/api/v1/workflows", headers=read).json()["workflows"]
    )

    created = http.post("/api/v1/batches", json={"on_complete": {"task": "echo"}}, headers=client)
    assert created.status_code == 201, created.text
    batch = created.json()["id"]
    added = http.post(
        f"/api/v1/batches/{batch}/tasks",
        json={"tasks": [{"task": "echo", "args": [i]} for i in range(2)]},
        headers=client,
    )
    assert added.status_code == 201, added.text
    assert http.post(f"/api/v1/batches/{batch}/seal", headers=client).status_code == 200
    wait_until_sync(
        lambda: http.get(f"/api/v1/batches/{batch}", headers=read).json()["status"] == "succeeded",
        timeout=30,
        message="the batch called back",
    )
    done = http.get(f"/api/v1/batches/{batch}", headers=read).json()
    assert (done["succeeded"], done["on_complete"]) == (2, "succeeded")


def _schedules(http: httpx.Client, key: dict[str, str], admin: redis.Redis) -> None:
    """A schedule put, fired by the scheduler (its watermark written as dtq-scheduler), paused,
    resumed and deleted through the API (which writes the schedule and its watermark)."""
    headers = {"X-API-Key": key["admin"]}
    body = {"task": "echo", "queue": "default", "every_s": 1, "args": ["tick"]}
    put = http.put("/api/v1/schedules/acl-tick", json=body, headers=headers)
    assert put.status_code == 201, put.text
    wait_until_sync(
        lambda: admin.hget("dtq:schedules:state", "acl-tick") is not None,
        timeout=15,
        message="the scheduler saw the schedule",
    )
    first = int(admin.hget("dtq:schedules:state", "acl-tick") or 0)
    wait_until_sync(
        lambda: int(admin.hget("dtq:schedules:state", "acl-tick") or 0) > first,
        timeout=15,
        message="the scheduler fired the schedule",
    )
    for action in ("pause", "resume"):
        response = http.post(f"/api/v1/schedules/acl-tick/{action}", headers=headers)
        assert response.status_code == 200, response.text
    assert http.delete("/api/v1/schedules/acl-tick", headers=headers).status_code == 200


def _operator(acl_redis: AclRedis, secrets_dir: Path) -> None:
    """The operator CLI as dtq-ops: status, a submit that waits for its outcome, and a pause
    and resume (both audited)."""
    env = {
        **service_env(acl_redis, secrets_dir, "dtq-ops"),
        "PATH": "/usr/bin:/bin",
    }
    for argv in (
        ["status"],
        ["enqueue", "echo", "--args", "[5]", "--wait", "15"],
        ["queue", "pause", "default"],
        ["queue", "resume", "default"],
    ):
        run = subprocess.run(
            [sys.executable, "-m", "dtq_core.ops.cli", "--actor", "acl-e2e-operator", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, (argv, run.stdout + run.stderr)


def _text(url: str) -> str:
    try:
        return httpx.get(url, timeout=2).text
    except httpx.TransportError:
        return ""


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _submit(http: httpx.Client, headers: dict[str, str], body: dict[str, Any]) -> str:
    for _ in range(2):
        response = http.post("/api/v1/tasks", json=body, headers=headers)
        if response.status_code in (200, 201):
            return str(response.json()["id"])
    raise AssertionError(f"submit refused: {response.status_code} {response.text}")
