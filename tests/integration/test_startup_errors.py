"""Every entry point refuses a configuration it cannot run with in one line on stderr, exit
status 2 and no traceback, before it writes anything: a port another process holds (a second
copy next to ``just up``) and a ``DTQ_REDIS_URL`` that is not a Redis URL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from dtq_devtools.testing import free_port


@dataclass(frozen=True)
class Entry:
    program: str
    module: str
    args: tuple[str, ...] = ()


WORKER = Entry("dtq-worker", "dtq_worker", ("--app", "dtq_devtools.testing.app:registry"))
SCHEDULER = Entry("dtq-scheduler", "dtq_scheduler_leader")
API = Entry("dtq-ingest-api", "dtq_ingest_api")
GATEWAY = Entry("dtq-event-gateway", "dtq_event_gateway")
CLI = Entry("dtq", "dtq_core.ops.cli", ("status",))

METRICS_OFF = {"DTQ_WORKER_METRICS_PORT": "0", "DTQ_SCHEDULER_METRICS_PORT": "0"}


def run(entry: Entry, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``entry`` as its own process, with only the ``DTQ_*`` variables given here."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-m", entry.module, *entry.args],
        env={**clean, "DTQ_METRICS_HOST": "127.0.0.1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process is listening on (as the stack's services do)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        yield int(s.getsockname()[1])


@dataclass(frozen=True)
class PortCase:
    entry: Entry
    setting: str
    message: str
    extra: tuple[tuple[str, str], ...] = ()


METRICS_HINT = ", or 0 to turn the listener off"
PORT_CASES = {
    "worker": PortCase(
        WORKER,
        "DTQ_WORKER_METRICS_PORT",
        "metrics port {port} is in use; set DTQ_WORKER_METRICS_PORT to a free port" + METRICS_HINT,
    ),
    "worker-2-processes": PortCase(
        WORKER,
        "DTQ_WORKER_METRICS_PORT",
        "metrics port {port} is in use; set DTQ_WORKER_METRICS_PORT to a free port" + METRICS_HINT,
        (("DTQ_WORKER_PROCESSES", "2"),),
    ),
    "scheduler": PortCase(
        SCHEDULER,
        "DTQ_SCHEDULER_METRICS_PORT",
        "metrics port {port} is in use; set DTQ_SCHEDULER_METRICS_PORT to a free port"
        + METRICS_HINT,
    ),
    "api": PortCase(API, "DTQ_API_PORT", "port {port} is in use; set DTQ_API_PORT to a free port"),
    "api-2-workers": PortCase(
        API,
        "DTQ_API_PORT",
        "port {port} is in use; set DTQ_API_PORT to a free port",
        (("DTQ_API_WORKERS", "2"),),
    ),
    "gateway": PortCase(
        GATEWAY, "DTQ_GATEWAY_PORT", "port {port} is in use; set DTQ_GATEWAY_PORT to a free port"
    ),
}


@pytest.mark.parametrize("case", PORT_CASES.values(), ids=PORT_CASES.keys())
async def test_a_port_in_use_is_one_line_naming_the_setting(
    redis: aioredis.Redis, redis_url: str, held_port: int, case: PortCase
) -> None:
    env = {**METRICS_OFF, "DTQ_REDIS_URL": redis_url, case.setting: str(held_port)}
    done = run(case.entry, {**env, **dict(case.extra)})
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.stderr == f"{case.entry.program}: {case.message.format(port=held_port)}\n"
    assert done.returncode == 2
    assert await redis.dbsize() == 0  # refused before it connected


def test_an_address_not_on_this_host_is_one_line_naming_the_host_setting() -> None:
    done = run(GATEWAY, {"DTQ_GATEWAY_HOST": "192.0.2.1", "DTQ_GATEWAY_PORT": str(free_port())})
    assert done.returncode == 2
    assert done.stderr.startswith("dtq-event-gateway: cannot listen on 192.0.2.1:"), done.stderr
    assert done.stderr.endswith("; check DTQ_GATEWAY_HOST and DTQ_GATEWAY_PORT\n")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("entry", [WORKER, SCHEDULER, API, GATEWAY, CLI], ids=lambda e: e.program)
def test_a_bad_redis_url_is_one_line_from_every_entry_point(entry: Entry) -> None:
    ports = {
        **METRICS_OFF,
        "DTQ_API_PORT": str(free_port()),
        "DTQ_GATEWAY_PORT": str(free_port()),
    }
    done = run(entry, {**ports, "DTQ_REDIS_URL": "http://:s3cret@localhost:6379"})
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.stderr == (
        f"{entry.program}: DTQ_REDIS_URL='http://localhost:6379' is invalid: the scheme must "
        "be one of redis, rediss, unix, redis+cluster, rediss+cluster, redis+sentinel, "
        "rediss+sentinel; expected redis://[user:password@]host:port/db, "
        "redis+cluster://[user:password@]host:port[,host:port...], "
        "redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]\n"
    )
    assert done.returncode == 2


def test_a_bad_process_count_is_one_line() -> None:
    done = run(WORKER, {**METRICS_OFF, "DTQ_WORKER_PROCESSES": "many"})
    assert done.returncode == 2
    assert done.stderr == (
        "dtq-worker: DTQ_WORKER_PROCESSES='many' is invalid: it must be `auto` (the CPUs the "
        "worker may use) or a number of processes from 1 to 256\n"
    )
    flag = subprocess.run(
        [sys.executable, "-m", "dtq_worker", *WORKER.args, "--processes", "0"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DTQ_")}, **METRICS_OFF},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert flag.returncode == 2
    assert flag.stderr.startswith("dtq-worker: DTQ_WORKER_PROCESSES='0' is invalid"), flag.stderr


@pytest.mark.parametrize("entry", [WORKER, SCHEDULER, API], ids=lambda e: e.program)
async def test_an_otel_variable_the_exporter_would_fail_on_is_one_line(
    redis: aioredis.Redis, redis_url: str, entry: Entry
) -> None:
    """The processes that export spans read the OpenTelemetry variables at start-up: an
    endpoint that is not a URL stops them there, as a DTQ_* setting would, instead of failing
    every export later."""
    env = {
        **METRICS_OFF,
        "DTQ_API_PORT": str(free_port()),
        "DTQ_REDIS_URL": redis_url,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "otel-collector:4318",
    }
    done = run(entry, env)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.stderr.endswith(
        f"{entry.program}: OTEL_EXPORTER_OTLP_ENDPOINT='otel-collector:4318' is invalid: it must "
        "be an http:// or https:// URL with a host, like http://otel-collector:4318\n"
    ), done.stderr
    assert done.returncode == 2
    assert await redis.dbsize() == 0  # refused before it connected
