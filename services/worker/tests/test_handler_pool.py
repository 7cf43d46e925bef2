"""``executor="process"``: sync handlers in handler processes, against a real Redis and real
processes (``dtq_devtools.testing.app:cpu``). What a thread cannot do, a process does: a timeout,
a cancel and the end of a drain kill the handler's process, so nothing it would have done after
the outcome was recorded ever happens; a new process takes its place."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings, load_settings
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.app import cpu
from dtq_devtools.testing.plugin import FAST
from dtq_worker.handler_pool import HandlerPoolError
from dtq_worker.worker import Worker

pytestmark = pytest.mark.slow  # each worker starts handler processes: seconds on a busy host

Start = Callable[..., Awaitable[Worker]]


@pytest.fixture
async def side(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[aioredis.Redis]:
    """Where the handlers record what they did (database 1; the handler processes inherit
    ``DTQTEST_SIDE_URL``)."""
    url = redis_server.url.replace("/0", "/1")
    monkeypatch.setenv("DTQTEST_SIDE_URL", url)
    r = connect(url)
    await r.flushdb()
    yield r
    await r.aclose()


@pytest.fixture
async def env(redis_server: RedisServer) -> AsyncIterator[tuple[Settings, Client]]:
    settings = load_settings({}, redis_url=redis_server.url, **FAST)
    client = Client.from_url(redis_server.url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushdb()
    yield settings, client
    await client.aclose()


@pytest.fixture
async def start(env: tuple[Settings, Client]) -> AsyncIterator[Start]:
    """``await start(registry, **setting_overrides)``: a running worker; stopped at the end."""
    settings, _ = env
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def go(registry: TaskRegistry = cpu, **overrides: Any) -> Worker:
        s = settings.with_overrides(worker_process_pool=2, **overrides)
        worker = Worker(s, registry, ["default"], concurrency=4)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        running.append((stop, task))
        await wait_until(lambda: worker.state == "running" or task.done(), timeout=60)
        return worker

    yield go
    for stop, _ in running:
        stop.set()
    for _, task in running:
        await asyncio.wait_for(task, 30)


def _replaced(worker: Worker, reason: str) -> float | None:
    """``dtq_worker_handler_processes_replaced_total{reason}`` as the worker exports it."""
    return worker.metrics.registry.get_sample_value(
        "dtq_worker_handler_processes_replaced_total", {"reason": reason}
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def _entries(side: aioredis.Redis, kind: str) -> list[list[str]]:
    return [e.split("|") for e in await side.lrange(kind, 0, -1)]


async def test_results_failures_and_progress_cross_the_process_boundary(
    env: tuple[Settings, Client], start: Start
) -> None:
    _, client = env
    worker = await start()
    assert worker.pool is not None
    assert len(worker.pool.pids) == 2
    assert os.getpid() not in worker.pool.pids

    handle = await client.enqueue("in_process", args=[1, "a"], kwargs={"k": [2], "progress": [0.5]})
    outcome = await handle.result(timeout=30)
    assert outcome.status is TaskStatus.SUCCEEDED
    result = outcome.result
    assert result["args"] == [1, "a"]
    assert result["kwargs"] == {"k": [2]}
    assert result["kept"] == [True]  # the progress report reached the task, its lease held
    assert result["pid"] in worker.pool.pids
    record = await client.get(handle.id)
    assert record is not None
    assert record.progress is not None
    assert record.progress.value == 0.5

    async def fails(kind: str) -> Any:
        h = await client.enqueue("in_process", kwargs={"raise_": kind}, max_attempts=1)
        o = await h.result(timeout=30)
        assert o.status is TaskStatus.DEAD, kind
        return o.error

    error = await fails("value")
    assert (error.type, error.reason) == ("ValueError", "exception")
    assert "raised in a handler process" in (error.traceback or "")
    assert (await fails("retry")).reason == "retry_requested"
    permanent = await fails("permanent")
    assert (permanent.type, permanent.reason) == ("PermanentError", "permanent")
    assert (await fails("unencodable")).type == "ResultNotSerializable"

    before = worker.pool.pids
    died = await fails("exit")  # os._exit(3) in the handler
    assert died.type == "HandlerProcessDied"
    assert "exit status 3" in died.message
    await wait_until(lambda: len(worker.pool.pids) == 2, timeout=60, message="replaced")
    assert worker.pool.pids != before
    assert _replaced(worker, "died") == 1
    again = await client.enqueue("in_process", args=[3])
    assert (await again.result(timeout=30)).result["args"] == [3]


async def test_a_timeout_and_a_cancel_kill_the_handler_and_its_late_effect_never_happens(
    env: tuple[Settings, Client], start: Start, side: aioredis.Redis
) -> None:
    _, client = env
    worker = await start()
    assert worker.pool is not None

    # Spins 1.5 s before its side effect; its timeout is 0.3 s.
    timed = await client.enqueue(
        "spin_in_process", args=[3.0], kwargs={"effect_after_s": 1.5}, timeout_s=0.3, max_attempts=1
    )
    outcome = await timed.result(timeout=30)
    assert outcome.status is TaskStatus.DEAD
    assert outcome.error is not None
    assert outcome.error.type == "TimeoutError"
    ((_, _, pid, started),) = await _entries(side, "exec_start")
    assert _gone(int(pid))  # gone before the outcome was recorded
    # A handler that lived on would record its effect 1.5 s after its start (its own clock):
    # watch until well past that.
    while time.time() < float(started) + 1.5 + 1.0:
        assert await side.llen("effect") == 0
        await asyncio.sleep(0.1)
    assert await side.llen("effect") == 0

    cancelled = await client.enqueue(
        "spin_in_process", args=[30.0], kwargs={"effect_after_s": 1.5}, max_attempts=1
    )
    await wait_until(lambda: _count(side, "exec_start", 2), timeout=30)
    pid2 = int((await _entries(side, "exec_start"))[1][2])
    await cancelled.cancel()
    outcome = await cancelled.result(timeout=30)
    assert outcome.status is TaskStatus.CANCELLED
    assert _gone(pid2)
    assert await side.llen("effect") == 0
    assert _replaced(worker, "timeout") == 1
    assert _replaced(worker, "cancel") == 1
    await wait_until(lambda: len(worker.pool.pids) == 2, timeout=60, message="replaced")
    ok = await client.enqueue("spin_in_process", args=[0.01])
    assert (await ok.result(timeout=30)).status is TaskStatus.SUCCEEDED


async def _count(side: aioredis.Redis, kind: str, n: int) -> bool:
    return int(await side.llen(kind)) >= n


async def test_a_drain_that_runs_out_hands_the_task_back_and_kills_its_process(
    env: tuple[Settings, Client], start: Start, side: aioredis.Redis
) -> None:
    settings, client = env
    s = settings.with_overrides(worker_process_pool=1, drain_timeout_s=0.5)
    worker = Worker(s, cpu, ["default"], concurrency=2)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    handle = await client.enqueue("spin_in_process", args=[30.0], kwargs={"effect_after_s": 5.0})
    await wait_until(lambda: side.llen("exec_start"), timeout=60)
    pid = int((await _entries(side, "exec_start"))[0][2])
    stop.set()
    await asyncio.wait_for(task, 30)
    assert _gone(pid)
    record = await client.get(handle.id)
    assert record is not None
    assert record.status is TaskStatus.QUEUED  # handed back at once, for a peer
    assert _replaced(worker, "drain") == 1
    assert await side.llen("effect") == 0


def not_importable(ctx: TaskContext) -> None: ...


not_importable.__module__ = "dtq_no_such_module"


async def test_a_handler_the_processes_cannot_import_stops_the_worker_at_start(
    settings: Settings,
) -> None:
    registry = TaskRegistry()
    registry.task(name="t.lost", executor="process")(not_importable)
    worker = Worker(settings.with_overrides(worker_process_pool=1), registry, ["default"])
    with pytest.raises(HandlerPoolError, match=r"t\.lost.*cannot import dtq_no_such_module"):
        await worker.run(asyncio.Event())
    assert worker.state == "starting"  # nothing was claimed


def test_a_handler_defined_in_a_script_is_refused() -> None:
    def script_handler(ctx: TaskContext) -> None: ...

    script_handler.__module__ = "__main__"
    script_handler.__qualname__ = "script_handler"
    registry = TaskRegistry()
    registry.task(name="t.script", executor="process")(script_handler)
    settings = load_settings({})
    with pytest.raises(HandlerPoolError, match="defined in a script"):
        Worker(settings, registry, ["default"])
