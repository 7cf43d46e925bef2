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

With ``DTQ_REDIS_WAIT_REPLICAS=1`` on every service and on the test's own SDK client, a submit,
claim or finish is acknowledged only once a replica confirmed it, and the same failover loses
no acknowledged task. Those runs give every master **two** replicas, the set-up an operator
needs for ``WAIT 1``: with one, the promoted replica is a master without a replica, so every
transition is refused (``redis_not_replicated``) from the failover until someone brings the
dead node back as its replica, and the gap would measure the operator, not dtq. With two, the
other replica follows the promoted one (Sentinel reconfigures it; a cluster replica of the
same master migrates by itself), the killed node stays dead, and the gap runs from the kill to
the first submit that replica confirmed. Refusals are counted by cause: ``unavailable``
(no master answers yet) and ``not_replicated`` (written, not confirmed in time).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis as sync_redis
from redis.asyncio.cluster import RedisCluster

from dtq_core import Client
from dtq_core.infra.cluster import after_failure
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
NODE_TIMEOUT_MS = 2000
"""``cluster-node-timeout`` of the cluster tests."""


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


@dataclass(frozen=True)
class Acks:
    """What an acknowledgement waits for, and the replicas each master has to give it."""

    wait_replicas: int
    """``DTQ_REDIS_WAIT_REPLICAS`` of every service and of the test's client."""
    replicas: int
    """Replicas per master."""

    @property
    def settings(self) -> dict[str, Any]:
        """The settings by flat name (empty without ``WAIT``: the services' own defaults)."""
        if not self.wait_replicas:
            return {}
        return {
            "redis_wait_replicas": self.wait_replicas,
            "redis_wait_timeout_ms": WAIT_TIMEOUT_MS,
            # The fast knobs' 1 s leader TTL is below 3 x the wait, which the settings refuse
            # (a renewal waiting for a replica would miss its own deadline).
            "leader_ttl_s": 2.0,
        }

    @property
    def env(self) -> dict[str, str]:
        return {f"DTQ_{name.upper()}": str(value) for name, value in self.settings.items()}

    @property
    def lossless(self) -> bool:
        return self.wait_replicas > 0


ASYNC = Acks(wait_replicas=0, replicas=1)
"""Acknowledged by the master alone; one replica per master."""
WAIT_1 = Acks(wait_replicas=1, replicas=2)
"""Acknowledged once a replica confirmed; two per master, so one remains after a failover."""
WAIT_TIMEOUT_MS = 500
"""``DTQ_REDIS_WAIT_TIMEOUT_MS``, the default."""


@dataclass(frozen=True)
class LostTask:
    """An acknowledged task the history checker found missing."""

    id: str
    producer: str
    acked_before_kill_s: float
    """How long before the kill its submit was acknowledged (negative: after it)."""


@dataclass
class Outcome:
    """What one failover under load gave."""

    acks: Acks
    check: Check
    submits: list[Submits]
    killed_at: float
    gaps: dict[str, float | None]
    """Kill to the first acknowledged submit, by producer."""
    restarted: list[str]
    """Service processes that did not ride it out (died or were replaced)."""
    unexpected: list[dict[str, str]]
    """The records of tasks no producer was told were accepted (to tell why they exist)."""

    @property
    def lost(self) -> list[LostTask]:
        """Each lost task, with its producer and acknowledgement time."""
        lost = set(self.check.lost)
        return sorted(
            (
                LostTask(task_id, s.name, round(self.killed_at - at, 3))
                for s in self.submits
                for _, at, task_id in s.acked
                if task_id in lost
            ),
            key=lambda t: t.id,
        )

    def figures(self, affected: Iterable[str] | None = None) -> dict[str, object]:
        """The figures to record; ``max_gap_s`` over the ``affected`` producers (all)."""
        wanted = set(affected) if affected is not None else set(self.gaps)
        gaps = [g for n, g in self.gaps.items() if n in wanted]
        known = [g for g in gaps if g is not None]
        refusals: Counter[str] = Counter()
        for s in self.submits:
            refusals.update(s.refusals)
        return {
            "wait_replicas": self.acks.wait_replicas,
            "replicas_per_master": self.acks.replicas,
            "gap_s": {n: None if g is None else round(g, 3) for n, g in self.gaps.items()},
            "max_gap_s": round(max(known), 3) if known and len(known) == len(gaps) else None,
            "refused": refusals.total(),
            "refused_by_cause": dict(sorted(refusals.items())),
            "restarted": self.restarted,
            "lost_tasks": [asdict(t) for t in self.lost],
            "unexpected_records": [
                {k: v for k, v in r.items() if k in ("args", "idem", "ct", "st")}
                for r in self.unexpected
            ],
        }


async def failover_under_load(
    url: str,
    folder: Path,
    side: RedisServer,
    queues: list[str],
    kill: Callable[[], object],
    *,
    acks: Acks,
) -> Outcome:
    """Run the stack and the producers on ``url`` (both acknowledging as ``acks`` says),
    ``kill`` a master once each producer has :data:`LOAD_BEFORE` submits acknowledged, go on
    until each has :data:`LOAD_AFTER` more, and check the history once everything settled."""
    with service_stack(
        url,
        folder,
        queues=",".join(queues),
        side_url=side.url,
        workers=WORKERS,
        concurrency=CONCURRENCY,
        env=acks.env,
    ) as stack:
        await stack.ready()
        pids = stack.pids()
        client = Client.from_url(
            url, max_queue_depth=0, reject_unknown_queues=False, **acks.settings
        )
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
    return Outcome(acks, check, submits, killed_at, gaps, restarted, unexpected)


def waits_confirmed(masters: Iterable[RedisServer]) -> int:
    """``WAIT`` commands the masters ran (``INFO commandstats``): the proof that the stack
    waited for replicas at all."""
    total = 0
    for master in masters:
        with sync_redis.Redis(port=master.port, decode_responses=True, socket_timeout=2) as r:
            total += int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
    return total


def assert_rode_through(out: Outcome, affected: Iterable[str] | None = None) -> None:
    """With ``WAIT``: nothing lost. Without: only the loss asynchronous replication allows,
    tasks acknowledged within :data:`REPLICATION_WINDOW_S` before the kill. Either way
    nothing else wrong, no process restarted, and the gap of ``affected`` within the bound."""
    problems = out.check.problems(max_dup_exec=WORKERS * CONCURRENCY * 2)
    if not out.acks.lossless:
        problems = [p for p in problems if not p.startswith(f"{len(out.check.lost)} lost")]
        # A submit the master wrote just before the kill and never acknowledged (its reply
        # was lost with the connection) may have run and then vanished with the writes the
        # replica never got: its record is gone, its producer's retry made the acknowledged
        # task. That is the same replication window, so allowed here, never under WAIT.
        if out.unexpected and all(not record for record in out.unexpected):
            problems = [p for p in problems if "unexpected" not in p]
        assert len(out.lost) == len(out.check.lost), out.lost
        assert all(0 <= t.acked_before_kill_s <= REPLICATION_WINDOW_S for t in out.lost), out.lost
    assert not problems, problems
    assert not out.restarted, out.restarted
    wanted = set(affected) if affected is not None else set(out.gaps)
    gaps = {n: g for n, g in out.gaps.items() if n in wanted}
    assert all(g is not None and g <= GAP_BOUND_S for g in gaps.values()), gaps


async def sentinel_failover(
    tmp_path: Path, side: RedisServer, faults: FaultFigures, acks: Acks
) -> None:
    """Kill the master of a Sentinel set under load; record and check what it gave."""
    sentinel = SentinelSet(tmp_path / "redis", replicas=acks.replicas, down_after_ms=1000)
    sentinel.start()
    try:
        old = sentinel.current_master()
        out = await failover_under_load(
            sentinel.url, tmp_path, side, ["failover"], old.kill, acks=acks
        )
        new = sentinel.current_master()
        waits = waits_confirmed([new])
    finally:
        sentinel.stop()
    faults.record(
        "Sentinel failover: kill -9 of the master under load",
        out.check,
        waits_on_promoted=waits,
        **out.figures(),
    )
    assert new is not old
    assert (waits > 0) == out.acks.lossless, waits
    assert_rode_through(out)


async def test_a_sentinel_failover_under_load_loses_only_the_replication_window(
    tmp_path: Path, side: RedisServer, faults: FaultFigures
) -> None:
    await sentinel_failover(tmp_path, side, faults, ASYNC)


async def test_a_sentinel_failover_under_load_with_wait_loses_no_acknowledged_task(
    tmp_path: Path, side: RedisServer, faults: FaultFigures
) -> None:
    await sentinel_failover(tmp_path, side, faults, WAIT_1)


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


async def cluster_failover(
    tmp_path: Path, side: RedisServer, faults: FaultFigures, acks: Acks
) -> None:
    """Kill the master of one queue of a 3-master cluster under load (the others' queues go
    on); record and check what it gave, the gap bound on that queue's producers only."""
    cluster = RedisClusterSet(
        tmp_path / "redis", replicas=acks.replicas, node_timeout_ms=NODE_TIMEOUT_MS
    )
    cluster.start()
    try:
        queues = queues_on_every_master(cluster)
        victim = cluster.master_of(Keys().queue(queues[0]).meta)
        out = await failover_under_load(cluster.url, tmp_path, side, queues, victim.kill, acks=acks)
        promoted = cluster.master_of(Keys().queue(queues[0]).meta)
        waits = waits_confirmed([promoted])
    finally:
        cluster.stop()
    affected = [name for name in out.gaps if name.endswith(f"-{queues[0]}")]
    faults.record(
        "Cluster: kill -9 of a master under load",
        out.check,
        affected=affected,
        waits_on_promoted=waits,
        **out.figures(affected),
    )
    assert promoted is not victim
    assert (waits > 0) == out.acks.lossless, waits
    assert_rode_through(out, affected)


async def test_a_cluster_master_killed_under_load_loses_only_the_replication_window(
    tmp_path: Path, side: RedisServer, faults: FaultFigures
) -> None:
    await cluster_failover(tmp_path, side, faults, ASYNC)


async def test_a_cluster_master_killed_under_load_with_wait_loses_no_acknowledged_task(
    tmp_path: Path, side: RedisServer, faults: FaultFigures
) -> None:
    await cluster_failover(tmp_path, side, faults, WAIT_1)


async def test_a_cluster_clients_pipelines_follow_a_failover(tmp_path: Path) -> None:
    """A pipeline that failed on a dead master makes the client read the slot map again, so
    the next one reaches the promoted replica (without it, redis-py's cluster client, which
    dtq never lets retry, kept the dead master's address for good)."""
    cluster = RedisClusterSet(tmp_path / "redis", replicas=1, node_timeout_ms=NODE_TIMEOUT_MS)
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


async def test_a_cluster_client_serves_the_live_masters_while_its_first_master_fails_over(
    tmp_path: Path,
) -> None:
    """A client that reads the cluster's map again while the master it lists first is dead
    and not yet replaced (what a worker's cancellation listener does after its subscription
    failed) goes on serving the other masters' slots. redis-py read its table of commands
    again from that master at each read of the map, so every command of the client failed,
    whatever its slot, until the election; the listener's read raised out of its error
    handler and ended the worker (``dtq_core.infra.cluster.CommandTableOnce``)."""
    cluster = RedisClusterSet(tmp_path / "redis", replicas=1, node_timeout_ms=NODE_TIMEOUT_MS)
    cluster.start()
    redis = connect(cluster.url)
    try:
        keys = Keys()
        await redis.hset(keys.queue("warm").meta, "v", "1")
        first = cast(RedisCluster, redis).get_default_node()
        assert first is not None
        other = next(
            key
            for key in (keys.queue(f"q{n}").meta for n in range(100))
            if cluster.master_of(key).port != first.port
        )
        await redis.hset(other, "v", "1")
        victim = next(n for n in cluster.nodes if n.port == first.port)
        victim.kill()
        killed_at = time.monotonic()
        after_failure(redis)
        assert await redis.hget(other, "v") == "1"
        assert time.monotonic() - killed_at < NODE_TIMEOUT_MS / 1000  # before any election
    finally:
        await redis.aclose()
        cluster.stop()
