"""A parent whose worker dies (or freezes) after it spawned its children: no child twice
(``TaskContext.spawn``; tests/integration/test_children.py has the in-process cases). The
parent spawns 50 children and a continuation on one of three worker processes, which is killed
with -9 (or stopped with SIGSTOP) while the parent holds before its finish; the parent is
reclaimed after the visibility timeout, runs again on another worker and spawns again. Only
the attempt that finished makes the children: each runs once, the continuation once, with
every result in order; a frozen attempt that resumes after that makes nothing more (its lease
is gone: it is cancelled, or its finish refused)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dtq_core import Client, WorkflowStatus
from dtq_core.infra.connection import connect
from dtq_core.protocol.workflows import children_id
from dtq_devtools.testing import RedisServer, free_ports, wait_until
from dtq_devtools.testing.processes import (
    ServiceProcess,
    scheduler_process,
    services,
    worker_process,
)
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

CHILDREN = 50
WORKERS = 3
HOLD_S = 2.0


async def test_a_parent_killed_after_spawning_makes_each_child_once(
    tmp_path: Path, faults: FaultFigures
) -> None:
    await _parent_loses_its_worker(tmp_path, faults, freeze=False)


async def test_a_frozen_parent_that_resumes_after_its_retry_makes_nothing_more(
    tmp_path: Path, faults: FaultFigures
) -> None:
    await _parent_loses_its_worker(tmp_path, faults, freeze=True)


async def _parent_loses_its_worker(tmp_path: Path, faults: FaultFigures, *, freeze: bool) -> None:
    """Kill -9 (``freeze``: SIGSTOP, then SIGCONT once the retry's children ended) the worker
    running the parent after its first attempt spawned. ``recovered_s`` runs from the fault to
    the parent's success: the visibility timeout (2 s) and the retry's own hold (2 s)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    workers = [
        worker_process(
            server.url,
            tmp_path / f"w{i}.log",
            concurrency=4,
            env={"DTQTEST_SIDE_URL": side_url, "DTQ_WORKER_METRICS_PORT": str(port)},
        )
        for i, port in enumerate(free_ports(WORKERS))
    ]
    scheduler = scheduler_process(server.url, tmp_path / "scheduler.log")
    refused: dict[str, float] = {}
    try:
        with services(scheduler, *workers), _resumed_on_exit(workers):
            await wait_until(
                lambda: client.redis.zcard(client.keys.workers), timeout=30, message="workers"
            )
            await wait_until(
                lambda: client.redis.exists(client.keys.leader), timeout=30, message="a leader"
            )
            parent = await client.enqueue("spawner", [CHILDREN, HOLD_S])

            # Its first attempt has spawned and holds before its finish: stop its worker.
            await wait_until(lambda: side.llen("spawned"), timeout=30, message="the parent spawned")
            (first,) = list(await side.lrange("spawned", 0, -1))
            task_id, attempt, pid = first.split("|")[:3]
            assert (task_id, attempt) == (parent.id, "1")
            running = await client.get(parent.id)
            assert running is not None
            assert running.worker is not None
            # The task record names the same worker (consumer ``<host>-<pid>:<suffix>``).
            assert running.worker.split(":")[0].rsplit("-", 1)[1] == pid
            victim = next(w for w in workers if w.pid == int(pid))
            if freeze:
                await wait_until(victim.metrics_port, timeout=10, message="victim's metrics")
                victim.signal(signal.SIGSTOP)
            else:
                victim.signal(signal.SIGKILL)
                victim.wait(10)
            lost_at = time.monotonic()
            # The attempt that spawned and did not finish recorded nothing of its children.
            assert await client.workflows.get(children_id(parent.id)) is None
            assert await client.redis.zcard(client.queue_keys("default").workflow_outbox) == 0
            if not freeze:
                victim.start()

            outcome = await client.wait(parent.id, timeout=60)
            recovered_s = time.monotonic() - lost_at
            assert outcome.status == "succeeded", outcome
            record = await client.get(parent.id)
            assert record is not None
            assert record.attempts >= 2
            assert record.result == CHILDREN
            assert record.children_workflow_id == children_id(parent.id)

            handle = client.workflow(record.children_workflow_id)
            result = await handle.result(timeout=60)
            assert result == list(range(CHILDREN))

            if freeze:
                # The frozen attempt resumes, its hold long over: its lease is gone, so its
                # heartbeat cancels it (a lost lease) or its finish is refused (stale).
                victim.signal(signal.SIGCONT)
                names = ("dtq_lease_lost_total", "dtq_stale_finish_total")

                def noticed() -> float:
                    return sum(victim.metric(name) for name in names)

                await wait_until(
                    lambda: asyncio.to_thread(noticed), timeout=20, message="victim noticed"
                )
                refused = {name: victim.metric(name) for name in names}
                assert sum(refused.values()) == 1
                assert victim.alive()
                again = await client.get(parent.id)
                assert again is not None
                assert (again.status, again.attempts) == (record.status, record.attempts)

            workflow = await handle.get()
            assert workflow.status is WorkflowStatus.SUCCEEDED
            assert workflow.parent_task_id == parent.id
            assert len(workflow.steps) == CHILDREN + 1  # the children and the continuation
            assert all(s.status == "succeeded" for s in workflow.steps)

            spawned = [e.split("|") for e in await side.lrange("spawned", 0, -1)]
            assert len(spawned) >= 2
            assert {e[0] for e in spawned} == {parent.id}
            assert [int(e[1]) for e in spawned] == list(range(1, len(spawned) + 1))
            assert int(spawned[-1][2]) != int(pid)  # the retry ran on another worker
            runs = Counter(int(v) for v in await side.lrange("child_runs", 0, -1))
            assert runs == Counter(range(CHILDREN))  # every child once, none twice
            continuations = await side.lrange("continuation_runs", 0, -1)
            assert continuations == [repr(list(range(CHILDREN)))]
            # Made once, from the finish; nothing is left to drain.
            queue, rand = parent.id.split(":", 1)
            assert await client.redis.hget(client.keys.queue(queue).task(rand), "kids") is None
            assert await client.redis.zcard(client.queue_keys("default").workflow_outbox) == 0
            faults.record(
                "parent_sigstop_after_spawn" if freeze else "parent_kill_9_after_spawn",
                parent_attempts=record.attempts,
                attempts_that_spawned=len(spawned),
                children_made=len(workflow.steps) - 1,
                child_runs=sum(runs.values()),
                duplicate_child_runs=sum(n - 1 for n in runs.values() if n > 1),
                continuation_runs=len(continuations),
                recovered_s=round(recovered_s, 2),
                **refused,
            )
    finally:
        await client.aclose()
        await side.aclose()
        server.stop()


@contextmanager
def _resumed_on_exit(workers: list[ServiceProcess]) -> Iterator[None]:
    """A stopped worker cannot act on SIGTERM: continue each before they are stopped."""
    try:
        yield
    finally:
        for w in workers:
            w.signal(signal.SIGCONT)
