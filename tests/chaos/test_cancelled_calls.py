"""F19: SDK calls cancelled mid-flight while tasks flow.

Callers give up on their calls with tiny client-side deadlines (``asyncio.wait_for``): a
submit, a read of a task, a wait for its outcome. A cancelled call must never leave its
connection one reply behind, handing that reply to the next caller (redis-py's
CVE-2023-28858/-28859). The client reaches Redis through a proxy that holds each chunk a
moment, so many cancellations land between a command's write and its reply.

Every answer is checked against its own request: a submit's task carries the submit's own
argument, a read returns the record of the task asked for, an outcome is that task's own.
A submit that timed out is sent again with its idempotency key, so nothing is lost and
nothing made twice.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from dtq_core import Client, TaskHandle, TaskStatus
from dtq_core.errors import RedisUnavailableError
from dtq_core.infra.connection import BoundedPool, connect
from dtq_devtools.testing import RedisServer, run_seed, wait_until
from dtq_devtools.testing.history import check_history, settle
from dtq_devtools.testing.processes import services, worker_process
from dtq_devtools.testing.proxy import FaultProxy
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

TASKS = 300
PRODUCERS = 20
DEADLINES_S = (0.0002, 0.0005, 0.001, 0.002, 0.004, 0.008)
"""Around the proxied round trip (about 2 ms each way): before the write, between the write
and the reply, and after."""


class Calls:
    """What the callers saw: answers checked against their own request."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cancelled: dict[str, int] = {"submit": 0, "get": 0, "result": 0}
        self.answered: dict[str, int] = {"submit": 0, "get": 0, "result": 0}
        self.crossed: list[tuple[str, Any, Any]] = []
        self.unavailable = 0

    def deadline(self, tries: int) -> float | None:
        """A tiny deadline, and none after a few tries so that every call ends."""
        return self.rng.choice(DEADLINES_S) if tries < 8 else None

    async def call(self, kind: str, make: Any, tries: int) -> Any:
        try:
            value = await asyncio.wait_for(make(), self.deadline(tries))
        except TimeoutError:
            self.cancelled[kind] += 1
            raise
        self.answered[kind] += 1
        return value


async def _submit(client: Client, calls: Calls, i: int) -> TaskHandle:
    tries = 0
    while True:
        try:
            return await calls.call(  # type: ignore[no-any-return]
                "submit",
                lambda: client.enqueue("echo", args=[i], idempotency_key=f"f19-{i}"),
                tries,
            )
        except TimeoutError:
            pass  # may or may not have been written: the key makes the next one safe
        except RedisUnavailableError:
            calls.unavailable += 1
        tries += 1


async def _check_get(client: Client, calls: Calls, handle: TaskHandle, i: int) -> None:
    tries = 0
    while True:
        try:
            record = await calls.call("get", lambda: client.get(handle.id), tries)
            break
        except TimeoutError:
            tries += 1
    if record is None or record.args != [i]:
        calls.crossed.append(("get", (handle.id, i), record))


async def _check_result(calls: Calls, handle: TaskHandle, i: int) -> None:
    tries = 0
    while True:
        try:
            outcome = await calls.call("result", lambda: handle.result(timeout=30), tries)
            break
        except TimeoutError:
            tries += 1
    if outcome.id != handle.id or (outcome.result or {}).get("args") != [i]:
        calls.crossed.append(("result", (handle.id, i), outcome))


async def test_calls_cancelled_mid_flight_never_get_another_callers_reply(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    side_url = url.replace("/0", "/1")
    admin = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(side_url)
    await admin.redis.flushall()
    proxy = FaultProxy(redis_server.port, delay_s=0.002)
    await proxy.start()
    client = Client.from_url(proxy.url, max_queue_depth=0, reject_unknown_queues=False)
    env = {"DTQTEST_SIDE_URL": side_url}
    workers = (
        worker_process(url, tmp_path / "w1.log", concurrency=8, env=env),
        worker_process(url, tmp_path / "w2.log", concurrency=8, env=env),
    )
    calls = Calls(random.Random(run_seed()))
    accepted: dict[str, int] = {}
    todo = list(range(TASKS))

    async def producer() -> None:
        while todo:
            i = todo.pop()
            handle = await _submit(client, calls, i)
            if handle.id in accepted:
                calls.crossed.append(("submit", i, (handle.id, accepted[handle.id])))
            accepted[handle.id] = i
            await _check_get(client, calls, handle, i)
            await _check_result(calls, handle, i)

    try:
        with services(*workers):
            await wait_until(lambda: admin.redis.zcard(admin.keys.workers), timeout=30)
            await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
            settle_s = await settle(admin.redis, accepted, timeout=60)
            # Every cancelled call gave its connection back: none is left checked out.
            pool = client.redis.connection_pool
            assert isinstance(pool, BoundedPool)
            in_use = pool.checked_out
        check = await check_history(admin.redis, accepted, side=side)
        records = {t: await admin.get(t) for t in accepted}
        wrong = [
            (t, i, r)
            for t, i in accepted.items()
            if (r := records[t]) is None
            or r.status is not TaskStatus.SUCCEEDED
            or (r.result or {}).get("args") != [i]
        ]
        faults.record(
            "F19 calls cancelled mid-flight (client deadlines under load)",
            check,
            cancelled=calls.cancelled,
            answered=calls.answered,
            crossed_replies=len(calls.crossed),
            wrong_results=len(wrong),
            refused=calls.unavailable,
            connections_made=proxy.connections,
            connections_in_use_after=in_use,
            settle_s=round(settle_s, 2),
        )
        check.assert_clean()
        assert calls.crossed == []
        assert wrong == []
        assert len(accepted) == TASKS  # one task per submit, retried or not
        assert sorted(accepted.values()) == list(range(TASKS))
        assert in_use == 0
        # The fault did hit every kind of call.
        assert all(n > 0 for n in calls.cancelled.values()), calls.cancelled
    finally:
        await client.aclose()
        await proxy.stop()
        await side.aclose()
        await admin.aclose()
