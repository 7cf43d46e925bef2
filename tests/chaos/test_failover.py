"""A Redis master killed (kill -9) under load, through Sentinel and on a Redis Cluster.

Producers submit one task after another through the SDK and through the REST API while two
workers drain; the master is killed and its replica promoted (Sentinel: down-after 1000 ms;
cluster: node timeout 2000 ms). Every process rides it out without a restart. Measured: the
gap from the kill to the first acknowledged submit of each producer (docs/performance.md,
"Failover gap"; the issue's bound is 5 s), and the history checker's counts.

Without ``DTQ_REDIS_WAIT_REPLICAS`` replication is asynchronous: a submit acknowledged by the
master in the moment before the kill may not have reached the replica, and the promoted
replica does not have it (docs/scaling.md, "Replication and acknowledgements"). The tests
record that loss and check it is only that: tasks acknowledged just before the kill, never one
acknowledged earlier or after the failover. Nothing is stuck and nothing ends twice.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dtq_core import Client
from dtq_core.infra.connection import connect
from dtq_core.names import split_task_id
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.failover import (
    REFUSED,
    Producer,
    Stack,
    Submits,
    rest_submit,
    sdk_submit,
    service_stack,
    settled_history,
)
from dtq_devtools.testing.history import Check
from dtq_devtools.testing.topologies import RedisClusterSet, SentinelSet
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

GAP_BOUND_S = 5.0
"""Kill to the first acknowledged submit (issue 9): Sentinel down-after 1000 ms and cluster
node timeout 2000 ms leave the rest of it to detection, election and reconnection."""
REPLICATION_WINDOW_S = 1.0
"""How far before the kill an acknowledged submit may be missing after the failover: what the
master acknowledged but had not yet streamed to its replica (a local replica trails by
milliseconds; the bound is generous for a loaded machine)."""
LOAD_BEFORE = 60
"""Submits each producer has acknowledged before the kill."""
LOAD_AFTER = 60
"""Submits each producer has acknowledged after the failover before the load stops."""
WORKERS = 2
CONCURRENCY = 8


@pytest.fixture
def side(tmp_path: Path) -> Iterator[RedisServer]:
    """The side Redis the handlers record their executions in."""
    server = RedisServer(tmp_path / "side")
    server.start()
    yield server
    server.stop()


@asynccontextmanager
async def producing(
    client: Client, stack: Stack, queues: list[str]
) -> AsyncIterator[list[Producer]]:
    """One SDK and one REST producer of ``echo`` tasks per queue, running until the block ends."""
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=15) as http:
        producers = [
            Producer(f"{kind}-{queue}", make(queue)).start()
            for queue in queues
            for kind, make in (
                ("sdk", lambda q: sdk_submit(client, "echo", q)),
                ("rest", lambda q: rest_submit(http, "echo", q)),
            )
        ]
        try:
            yield producers
        finally:
            for p in producers:
                await p.stop()


async def acked_after(producers: list[Producer], moment: float, n: int) -> bool:
    return all(p.submits.acked_between(moment, time.monotonic()) >= n for p in producers)


async def records_of(url: str, task_ids: list[str]) -> list[dict[str, str]]:
    """The records of ``task_ids`` (args, idempotency key, created at, status)."""
    redis = connect(url)
    try:
        out = []
        for task_id in task_ids[:5]:
            queue, rand = split_task_id(task_id) or ("", "")
            out.append(await redis.hgetall(Keys().queue(queue).task(rand)))
        return out
    finally:
        await redis.aclose()


def loss_explained(check: Check, submits: list[Submits], killed_at: float) -> dict[str, object]:
    """The lost tasks' acknowledgement ages at the kill; asserts each was acknowledged within
    :data:`REPLICATION_WINDOW_S` before it (what asynchronous replication may lose)."""
    ages = sorted(round(killed_at - at, 3) for s in submits for at in s.acked_at(check.lost))
    assert len(ages) == len(check.lost)
    assert all(0 <= age <= REPLICATION_WINDOW_S for age in ages), ages
    return {"lost_acked_before_kill_s": ages[-5:]}


@dataclass
class Outcome:
    """What one failover under load gave."""

    check: Check
    submits: list[Submits]
    killed_at: float
    gaps: dict[str, float | None]
    """Kill to the first acknowledged submit, by producer."""
    restarted: list[str]
    """Service processes that did not ride it out (died or were replaced)."""
    unexpected: list[dict[str, str]]
    """The records of tasks no producer was told were accepted (to tell why they exist)."""

    def figures(self, names: Iterable[str] | None = None) -> dict[str, object]:
        wanted = set(names) if names is not None else set(self.gaps)
        gaps = [g for n, g in self.gaps.items() if n in wanted]
        return {
            "gap_s": {n: None if g is None else round(g, 3) for n, g in self.gaps.items()},
            "max_gap_s": None if None in gaps else round(max(gaps), 3),  # type: ignore[type-var]
            "refused": sum(s.refused for s in self.submits),
            "restarted": self.restarted,
            "unexpected_records": [
                {k: v for k, v in r.items() if k in ("args", "idem", "ct", "st")}
                for r in self.unexpected
            ],
            **loss_explained(self.check, self.submits, self.killed_at),
        }


async def failover_under_load(
    url: str, folder: Path, side: RedisServer, queues: list[str], kill: Callable[[], object]
) -> Outcome:
    """Run the stack and the producers on ``url``, ``kill`` a master once each producer has
    :data:`LOAD_BEFORE` submits acknowledged, go on until each has :data:`LOAD_AFTER` more,
    and check the history once everything settled."""
    with service_stack(
        url,
        folder,
        queues=",".join(queues),
        side_url=side.url,
        workers=WORKERS,
        concurrency=CONCURRENCY,
    ) as stack:
        await stack.ready()
        pids = stack.pids()
        client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
        try:
            async with producing(client, stack, queues) as producers:
                started = time.monotonic()
                await wait_until(
                    lambda: acked_after(producers, started, LOAD_BEFORE),
                    timeout=60,
                    message="load before the kill",
                )
                kill()
                killed_at = time.monotonic()
                gaps = {p.submits.name: await p.first_ack_after(killed_at, 30) for p in producers}
                await wait_until(
                    lambda: acked_after(producers, killed_at, LOAD_AFTER),
                    timeout=60,
                    message="load after the failover",
                )
            submits = [p.submits for p in producers]
            check = await settled_history(
                url, side.url, [task_id for s in submits for task_id in s.ids]
            )
            unexpected = await records_of(url, check.unexpected)
        finally:
            await client.aclose()
        restarted = stack.restarted(pids)
    return Outcome(check, submits, killed_at, gaps, restarted, unexpected)


def assert_rode_through(out: Outcome, affected: Iterable[str] | None = None) -> None:
    """Everything but the loss asynchronous replication allows (see the module docstring)."""
    problems = [
        p
        for p in out.check.problems(max_dup_exec=WORKERS * CONCURRENCY * 2)
        if not p.startswith(f"{len(out.check.lost)} lost")
    ]
    assert not problems, problems
    assert not out.restarted, out.restarted
    wanted = set(affected) if affected is not None else set(out.gaps)
    gaps = {n: g for n, g in out.gaps.items() if n in wanted}
    assert all(g is not None and g <= GAP_BOUND_S for g in gaps.values()), gaps


async def test_a_sentinel_failover_under_load_loses_only_the_replication_window(
    tmp_path: Path, side: RedisServer, faults: FaultFigures
) -> None:
    sentinel = SentinelSet(tmp_path / "redis", replicas=1, down_after_ms=1000)
    sentinel.start()
    try:
        old = sentinel.current_master()
        out = await failover_under_load(sentinel.url, tmp_path, side, ["failover"], old.kill)
        new = sentinel.current_master()
    finally:
        sentinel.stop()
    faults.record("Sentinel failover: kill -9 of the master under load", out.check, **out.figures())
    assert new is not old
    assert_rode_through(out)


def queues_on_every_master(cluster: RedisClusterSet) -> list[str]:
    """One queue name per master, the first served by the first master."""
    keys = Keys()
    by_master: dict[int, str] = {}
    n = 0
    while len(by_master) < cluster.masters:
        name = f"fo{n}"
        by_master.setdefault(cluster.master_of(keys.queue(name).meta).port, name)
        n += 1
    return sorted(by_master.values(), key=lambda q: q != "fo0")


async def test_a_cluster_master_killed_under_load_loses_only_the_replication_window(
    tmp_path: Path, side: RedisServer, faults: FaultFigures
) -> None:
    cluster = RedisClusterSet(tmp_path / "redis", replicas=1, node_timeout_ms=2000)
    cluster.start()
    try:
        queues = queues_on_every_master(cluster)
        victim = cluster.master_of(Keys().queue(queues[0]).meta)
        out = await failover_under_load(cluster.url, tmp_path, side, queues, victim.kill)
        promoted = cluster.master_of(Keys().queue(queues[0]).meta)
    finally:
        cluster.stop()
    affected = [name for name in out.gaps if name.endswith(f"-{queues[0]}")]
    faults.record(
        "Cluster: kill -9 of a master under load", out.check, affected=affected, **out.figures()
    )
    assert promoted is not victim
    assert_rode_through(out, affected)


async def test_a_cluster_clients_pipelines_follow_a_failover(tmp_path: Path) -> None:
    """A pipeline that failed on a dead master makes the client read the slot map again, so
    the next one reaches the promoted replica (without it, redis-py's cluster client, which
    dtq never lets retry, kept the dead master's address for good)."""
    cluster = RedisClusterSet(tmp_path / "redis", replicas=1, node_timeout_ms=2000)
    cluster.start()
    redis = connect(cluster.url)
    try:
        key = Keys().queue("pipes").meta
        await redis.hset(key, "v", "1")
        victim = cluster.master_of(key)
        victim.kill()

        async def pipeline_answers() -> bool:
            try:
                async with redis.pipeline(transaction=False) as pipe:
                    await pipe.hget(key, "v")
                    await pipe.execute()
            except REFUSED:
                return False
            return True

        await wait_until(pipeline_answers, timeout=30, interval=0.1, message="a pipeline")
        assert cluster.master_of(key) is not victim
    finally:
        await redis.aclose()
        cluster.stop()
