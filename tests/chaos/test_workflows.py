"""A chord of 200 whose members run on three worker processes, one of them killed with -9
while members run and again while the callback runs: the callback's outcome is recorded once,
with every member's result in order, and no step is submitted twice (docs/workflows.md,
"Guarantees")."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from dtq_core import Client, WorkflowStatus, chord, step
from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.processes import (
    ServiceProcess,
    scheduler_process,
    services,
    worker_process,
)
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

MEMBERS = 200
WORKERS = 3


async def test_a_chord_survives_kill_9_of_its_workers_and_calls_back_once(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    workers = [
        worker_process(
            server.url, tmp_path / f"w{i}.log", concurrency=8, env={"DTQTEST_SIDE_URL": side_url}
        )
        for i in range(WORKERS)
    ]
    scheduler = scheduler_process(server.url, tmp_path / "scheduler.log")
    try:
        with services(scheduler, *workers):
            await wait_until(
                lambda: client.redis.zcard(client.keys.workers), timeout=30, message="workers"
            )
            await wait_until(
                lambda: client.redis.exists(client.keys.leader), timeout=30, message="a leader"
            )
            members = [step("member", args=[i, 0.1]) for i in range(MEMBERS)]
            handle = await client.enqueue_workflow(chord(members, step("collect", args=[2.0])))

            # Kill the worker running the most members once a third of them ended.
            async def a_third_ended() -> bool:
                return await side.llen("exec_end") >= MEMBERS // 3

            await wait_until(a_third_ended, timeout=60, message="a third of the members ended")
            victim = _busiest(workers, list(await side.lrange("exec_start", 0, -1)))
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            victim.start()

            # Then the one running the callback, mid-run.
            await wait_until(
                lambda: side.llen("callback_start"), timeout=120, message="the callback started"
            )
            (first,) = list(await side.lrange("callback_start", 0, -1))
            pid = int(first.split("|")[2])
            runner = next(w for w in workers if w.pid == pid)
            runner.signal(signal.SIGKILL)
            runner.wait(10)
            runner.start()

            result = await handle.result(timeout=120)
            assert result == list(range(MEMBERS))
            record = await handle.get()
            assert record.status is WorkflowStatus.SUCCEEDED
            callback = record.steps[-1]
            assert callback.status == "succeeded"
            assert callback.attempts == 2  # killed once, retried once

            starts = [e.split("|")[0] for e in await side.lrange("callback_start", 0, -1)]
            ends = await side.lrange("callback_end", 0, -1)
            assert set(starts) == {callback.task_id}  # one callback task, never a second
            assert len(ends) == 1  # its one completed run
            assert await side.lrange("callback_values", 0, -1) == [repr(list(range(MEMBERS)))]
            member_ids = {s.task_id for s in record.steps[:-1]}
            started = {e.split("|")[0] for e in await side.lrange("exec_start", 0, -1)}
            assert started == member_ids  # no member submitted twice
            assert all(s.status == "succeeded" for s in record.steps)
            outbox = [await client.redis.zcard(client.queue_keys("default").workflow_outbox)]
            assert outbox == [0]
            faults.record(
                "workflow_chord_kill_9",
                members=MEMBERS,
                callback_runs_completed=len(ends),
                callback_attempts=callback.attempts,
                member_runs=len(await side.lrange("exec_start", 0, -1)),
            )
    finally:
        await client.aclose()
        await side.aclose()
        server.stop()


def _busiest(workers: list[ServiceProcess], starts: list[str]) -> ServiceProcess:
    pids = [int(s.split("|")[2]) for s in starts]
    return max(workers, key=lambda w: pids.count(w.pid))
