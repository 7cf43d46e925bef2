"""Queue gauges: the leader exports every queue's depth per priority, delayed, in flight, dead,
oldest age and paused flag, plus the worker registry by state; followers export none of them."""

from __future__ import annotations

import time
from collections import Counter

import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.errors import UnknownQueueError
from dtq_core.infra.settings import Settings
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import GROUP, Keys
from dtq_devtools.testing import free_port, wait_until
from dtq_scheduler_leader.metrics import WAITING_REASONS, QueueGauges, QueueSnapshot

from .conftest import MakeReplica, Replica

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

KNOBS = {"queue_metrics_interval_s": 0.1, "visibility_timeout_s": 30.0}
"""Fast refreshes; a long visibility timeout keeps the sweeper away from the stale worker."""


def samples(replica: Replica) -> Samples:
    out: Samples = {}
    for family in replica.scheduler.metrics.registry.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def queue_series(replica: Replica) -> set[str]:
    names = {"dtq_queue_", "dtq_workers_registered"}
    return {name for name, _ in samples(replica) if any(name.startswith(n) for n in names)}


async def test_leader_exports_every_queue_gauge(
    redis: aioredis.Redis, settings: Settings, client: Client, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    mail = keys.queue("mail")
    for _ in range(3):
        await client.enqueue("t.send", queue="mail", priority=7)
    await client.enqueue("t.send", queue="mail", priority=2)
    await client.enqueue("t.send", queue="mail", delay_s=600)
    await client.enqueue("t.other", queue="other")
    for _ in range(3):
        await client.enqueue("t.other", queue="other", group="tenant")
    await Admin(client).pause("other", actor="test")
    await Admin(client).configure("other", group_concurrency=4)
    await Admin(client).configure("mail", concurrency=2, rate="120/m", partitions=2)
    # One task claimed (pending in the consumer group) and one dead-letter entry.
    await redis.xreadgroup(GROUP, "probe", {mail.streams[7]: ">"}, count=1)
    await redis.xadd(mail.dlq, {"t": "0" * 32, "task": "t.send"})
    now_ms = int(time.time() * 1000)
    await redis.zadd(keys.workers, {"w-live": now_ms, "w-gone": now_ms - 5_000})
    await redis.hset(keys.worker("w-live"), mapping={"state": "running", "concurrency": "4"})
    await redis.hset(keys.worker("w-gone"), mapping={"state": "running", "concurrency": "4"})

    leader = await make_replica("a", **KNOBS)
    await wait_until(lambda: leader.is_leader, timeout=5, message="leadership")
    follower = await make_replica("b", **KNOBS)
    got = await wait_until(
        lambda: (s := samples(leader)).get(("dtq_queue_delayed", (("queue", "mail"),))) and s,
        timeout=5,
        message="queue gauges exported",
    )

    def g(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert g("dtq_queue_depth", queue="mail", priority="7") == 2
    assert g("dtq_queue_depth", queue="mail", priority="2") == 1
    assert g("dtq_queue_depth", queue="mail", priority="9") == 0
    assert g("dtq_queue_depth", queue="other", priority="5") == 2
    assert g("dtq_queue_delayed", queue="mail") == 1
    assert g("dtq_queue_inflight", queue="mail") == 1
    assert g("dtq_queue_dead", queue="mail") == 1
    assert g("dtq_queue_paused", queue="mail") == 0
    assert g("dtq_queue_paused", queue="other") == 1
    assert g("dtq_queue_oldest_age_seconds", queue="mail") >= 0
    assert g("dtq_queue_concurrency_limit", queue="mail") == 2
    assert g("dtq_queue_rate_limit_per_second", queue="mail") == 2.0
    assert g("dtq_queue_partitions", queue="mail") == 2
    assert ("dtq_queue_concurrency_limit", (("queue", "other"),)) not in got
    # Runnable: 3 ready, 1 of the limit's 2 slots taken; nothing of a paused queue.
    assert g("dtq_queue_runnable", queue="mail") == 1
    assert g("dtq_queue_runnable", queue="other") == 0
    # Why tasks wait, each counted once.
    assert {r: g("dtq_queue_waiting", queue="mail", reason=r) for r in WAITING_REASONS} == {
        "ready": 1, "scheduled": 1, "queue_paused": 0, "queue_concurrency_full": 2, "group": 0,
    }  # fmt: skip
    assert {r: g("dtq_queue_waiting", queue="other", reason=r) for r in WAITING_REASONS} == {
        "ready": 0, "scheduled": 0, "queue_paused": 2, "queue_concurrency_full": 0, "group": 2,
    }  # fmt: skip
    assert g("dtq_queue_groups", queue="other") == 1
    assert g("dtq_queue_groups", queue="mail") == 0
    assert g("dtq_queue_group_concurrency_limit", queue="other") == 4
    assert g("dtq_workers_registered", state="running") == 1
    assert g("dtq_workers_registered", state="stale") == 1
    assert g("dtq_workers_registered", state="draining") == 0
    # Ten priorities for each of the two queues, nothing else labelled by priority.
    assert sum(1 for name, _ in got if name == "dtq_queue_depth") == 20
    assert g("dtq_scheduler_is_leader") == 1

    assert not follower.is_leader
    assert queue_series(follower) == set()
    assert samples(follower)[("dtq_scheduler_is_leader", ())] == 0


async def test_queue_series_are_bounded_by_the_queue_registry(
    redis: aioredis.Redis, settings: Settings, client: Client, make_replica: MakeReplica
) -> None:
    """Issue 18.2: refused submits into new queues add no series; a deleted queue's go."""
    strict = Client(redis, settings.with_overrides(reject_unknown_queues=True))
    admin = Admin(strict)
    await admin.create_queue("kept")
    await admin.create_queue("gone")
    refused = await strict.enqueue_many(
        [{"task": "t", "queue": f"junk-{i}"} for i in range(100)], return_exceptions=True
    )
    assert all(isinstance(r, UnknownQueueError) for r in refused)
    leader = await make_replica("a", **KNOBS)

    def labelled() -> set[str]:
        return {
            dict(labels)["queue"] for name, labels in samples(leader) if name == "dtq_queue_delayed"
        }

    await wait_until(lambda: labelled() == {"kept", "gone"}, timeout=5, message="two queues")
    await admin.delete_queue("gone")
    await wait_until(lambda: labelled() == {"kept"}, timeout=5, message="the series went")


async def test_oldest_age_grows_while_a_task_waits(
    redis: aioredis.Redis, settings: Settings, client: Client, make_replica: MakeReplica
) -> None:
    await client.enqueue("t.send", queue="slow")
    leader = await make_replica("a", **KNOBS)
    key = ("dtq_queue_oldest_age_seconds", (("queue", "slow"),))
    await wait_until(lambda: samples(leader).get(key, 0) >= 0.3, timeout=5, message="age >= 0.3")
    await redis.xreadgroup(GROUP, "probe", {Keys(settings.namespace).queue("slow").streams[5]: ">"})
    await wait_until(lambda: samples(leader).get(key) == 0, timeout=5, message="age back to 0")


async def test_gauges_move_to_the_new_leader(
    redis: aioredis.Redis, client: Client, make_replica: MakeReplica
) -> None:
    await client.enqueue("t.send", queue="mail")
    first = await make_replica("a", **KNOBS)
    await wait_until(lambda: queue_series(first), timeout=5, message="first leader exports")
    second = await make_replica("b", **KNOBS)

    await first.stop()

    await wait_until(lambda: queue_series(second), timeout=5, message="second leader exports")
    assert queue_series(first) == set()


def test_outdated_or_missing_snapshots_are_not_exported() -> None:
    gauges = QueueGauges()
    assert list(gauges.collect()) == []  # not leading yet, nothing refreshed
    gauges.watch(lambda: True, max_age_s=10.0)
    assert list(gauges.collect()) == []
    gauges.snapshot = QueueSnapshot(queues=[], workers=Counter(running=2))
    families = {f.name: f for f in gauges.collect()}
    assert [s.value for s in families["dtq_workers_registered"].samples] == [2, 0, 0]
    gauges.snapshot = QueueSnapshot(queues=[], taken=time.monotonic() - 11)
    assert list(gauges.collect()) == []


async def test_redis_errors_are_counted_by_duty(make_replica: MakeReplica) -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    replica = await make_replica("a", redis_url=nobody)
    registry = replica.scheduler.metrics.registry

    def errors(duty: str) -> float | None:
        return registry.get_sample_value("dtq_scheduler_redis_errors_total", {"duty": duty})

    await wait_until(lambda: (errors("lease") or 0) >= 2, timeout=5, message="lease errors")
    assert errors("queue_stats") == 0  # every duty has its series from the start
