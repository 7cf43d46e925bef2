"""The fenced leader lease: acquire, renew, release, takeover and fencing of a deposed leader."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from structlog.testing import capture_logs

from dtq_core.client import Client
from dtq_core.errors import StaleLeaderError
from dtq_core.infra.cluster import execute_on
from dtq_core.infra.settings import Settings
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Scripts
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.servers import master_of
from dtq_scheduler_leader.loops import run_while_leader

from .conftest import MakeReplica, Replica


def counter(replica: Replica, name: str) -> float:
    value = replica.scheduler.metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def test_acquire_renew_release(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    a = (await make_replica("a", start=False)).scheduler.leadership
    b = (await make_replica("b", start=False)).scheduler.leadership

    await a.try_acquire()
    assert a.is_leader
    assert a.epoch == 1
    assert await redis.get(keys.leader) == "1:a"
    assert a.token == await redis.get(keys.leader)
    assert 0 < await redis.pttl(keys.leader) <= settings.scheduler.leader_ttl_s * 1000

    # The follower neither takes the lock nor burns an epoch while it is held.
    wait_s = await b.try_acquire()
    assert not b.is_leader
    assert 0 < wait_s <= settings.scheduler.tick_s
    assert await redis.get(keys.leader_epoch) == "1"

    await redis.pexpire(keys.leader, 100)
    await a.renew()
    assert await redis.pttl(keys.leader) > 100

    await a.release()
    assert not a.is_leader
    assert await redis.exists(keys.leader) == 0
    await b.try_acquire()
    assert b.is_leader
    assert await redis.get(keys.leader) == "2:b"


async def test_renewal_that_finds_another_token_steps_down(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    replica = await make_replica("a", start=False)
    lead = replica.scheduler.leadership
    await lead.try_acquire()
    assert counter(replica, "dtq_scheduler_is_leader") == 1
    await redis.set(keys.leader, "99:intruder", px=5000)

    await lead.renew()

    assert not lead.is_leader
    assert counter(replica, "dtq_scheduler_is_leader") == 0
    assert await redis.get(keys.leader) == "99:intruder"


async def test_renewal_works_when_redis_is_out_of_memory(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    lead = (await make_replica("a", start=False)).scheduler.leadership
    await lead.try_acquire()
    await redis.pexpire(keys.leader, 200)
    await redis.config_set("maxmemory", 1)
    try:
        with pytest.raises(ResponseError, match="maxmemory"):
            await redis.set("probe", "x")  # plain writes are refused now
        await lead.renew()
        ttl = await redis.pttl(keys.leader)
    finally:
        await redis.config_set("maxmemory", 0)
    assert lead.is_leader
    assert ttl > 200


async def test_promote_from_a_deposed_epoch_is_refused(
    redis: aioredis.Redis, settings: Settings
) -> None:
    qk = Keys(settings.namespace).queue("fenced")
    scripts = Scripts(redis)
    common = {"limit": 100, "events_maxlen": 1000, "retention_ms": 60_000}
    assert await scripts.promote(qk, epoch=5, **common) == (0, -1)
    assert await scripts.promote(qk, epoch=5, **common) == (0, -1)
    with pytest.raises(StaleLeaderError):
        await scripts.promote(qk, epoch=4, **common)


async def test_deposed_leader_steps_down_when_its_promotion_is_refused(
    redis: aioredis.Redis, settings: Settings, client: Client, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    await client.enqueue("t.noop", queue="fenced", delay_s=60)
    old = await make_replica("old", start=False)
    new = await make_replica("new", start=False)
    await old.scheduler.leadership.try_acquire()
    # The old leader's lease vanishes behind its back (say it was paused past its TTL) and
    # the new leader promotes with a larger epoch before the old one renews.
    await redis.delete(keys.leader)
    await new.scheduler.leadership.try_acquire()
    assert new.scheduler.leadership.epoch == old.scheduler.leadership.epoch + 1
    # The new leader's first promotion in the queue (a pass calls it once something is due).
    await new.scheduler.promoter.promote_queue("fenced")

    async def promotion_in_flight() -> float:
        # Skips the pass's lock check, like a promotion sent just before the takeover.
        await old.scheduler.promoter.promote_queue("fenced")
        return 0.0

    stop = asyncio.Event()
    with capture_logs() as logs:
        duty = asyncio.create_task(
            run_while_leader("promoter", old.scheduler.leadership, stop, promotion_in_flight)
        )
        try:
            await wait_until(lambda: not old.scheduler.leadership.is_leader, timeout=5)
        finally:
            stop.set()
            await duty

    assert counter(old, "dtq_scheduler_stale_leader_total") == 1
    assert any(e["event"] == "leader_deposed" and e["queue"] == "fenced" for e in logs)
    assert new.scheduler.leadership.is_leader


async def test_exactly_one_of_two_leads_and_the_other_takes_over_after_a_crash(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    a = await make_replica("a")
    b = await make_replica("b")
    leader = await wait_until(lambda: a if a.is_leader else b if b.is_leader else None)
    follower = b if leader is a else a
    assert not follower.is_leader
    first_epoch = leader.scheduler.leadership.epoch
    assert await redis.get(keys.leader) == f"{first_epoch}:{leader.name}"

    await leader.crash()
    crashed_at = time.monotonic()
    await wait_until(lambda: follower.is_leader, timeout=settings.scheduler.leader_ttl_s + 3)
    gap = time.monotonic() - crashed_at

    # Both may have drawn an epoch at start (only one won the lock), so "larger", not "+1".
    new_epoch = follower.scheduler.leadership.epoch
    assert new_epoch > first_epoch
    assert await redis.get(keys.leader) == f"{new_epoch}:{follower.name}"
    print(f"leaderless gap after a crash: {gap:.3f} s (lease {settings.scheduler.leader_ttl_s} s)")
    # The wait above bounds the gap generously (lease + 3 s): the takeover needs no restart.
    assert counter(follower, "dtq_scheduler_leader_changes_total") == 1


async def test_a_stopping_leader_hands_over_without_waiting_for_the_ttl(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    a = await make_replica("a")
    await wait_until(lambda: a.is_leader)
    b = await make_replica("b")

    lease_left_s = await redis.pttl(keys.leader) / 1000
    await a.stop()
    stopped_at = time.monotonic()
    await wait_until(lambda: b.is_leader, timeout=settings.scheduler.leader_ttl_s)
    handover = time.monotonic() - stopped_at
    print(f"handover after a stop: {handover:.3f} s (a's lease had {lease_left_s:.3f} s left)")

    assert await redis.get(keys.leader) == "2:b"
    # b led before a's lease could have run out: a released it, b did not wait for the TTL.
    assert handover < lease_left_s
    assert counter(a, "dtq_scheduler_is_leader") == 0


async def test_a_leader_whose_lock_is_deleted_stops_within_a_few_ticks(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    a = await make_replica("a")
    await wait_until(lambda: a.is_leader)
    b = await make_replica("b")
    both: list[float] = []

    def b_alone_leads() -> bool:
        if a.is_leader and b.is_leader:
            both.append(time.monotonic())
        return b.is_leader and not a.is_leader

    await redis.delete(keys.leader)
    await wait_until(b_alone_leads, interval=0.002, timeout=settings.scheduler.leader_ttl_s)

    overlap = both[-1] - both[0] if both else 0.0
    print(f"two leaders for {overlap:.3f} s after the lock was deleted")
    # a found out from Redis, not from its own lease running out: a generous bound, well
    # below the lease a still believed it held.
    assert overlap < settings.scheduler.leader_ttl_s
    assert await redis.get(keys.leader) == f"{b.scheduler.leadership.epoch}:b"


async def test_a_leader_whose_renewals_hang_steps_down_when_its_ttl_runs_out(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    ttl_s = 1.0
    a = await make_replica("a", leader_ttl_s=ttl_s)
    await wait_until(lambda: a.is_leader)

    with capture_logs() as logs:
        # Writes (the renewal script) hang while reads go on, on the lock's master.
        lock_master = await master_of(redis, keys.leader)
        await execute_on(redis, lock_master, "CLIENT", "PAUSE", int(ttl_s * 1500), "WRITE")
        paused_at = time.monotonic()
        try:
            await wait_until(lambda: not a.is_leader, interval=0.005, timeout=ttl_s * 1.4)
            stepped_down_after = time.monotonic() - paused_at
        finally:
            await execute_on(redis, lock_master, "CLIENT", "UNPAUSE")
        await wait_until(lambda: a.is_leader, timeout=5)

    # It stepped down while the writes were still paused (1.5 x its lease): on its own
    # lease deadline, not on a renewal's reply (the wait above is that ordering).
    print(f"stepped down {stepped_down_after:.3f} s after the pause (lease {ttl_s} s)")
    assert any(e["event"] == "leader_stepped_down" and e["reason"] == "lease_expired" for e in logs)
    assert a.scheduler.leadership.token == await redis.get(keys.leader)


async def test_a_replica_whose_lock_survived_a_lost_reply_resumes_its_epoch(
    redis: aioredis.Redis, settings: Settings, make_replica: MakeReplica
) -> None:
    keys = Keys(settings.namespace)
    lead = (await make_replica("a", start=False)).scheduler.leadership
    await lead.try_acquire()
    # Its lease ran out by its own clock (say renewal replies were lost) but the key lives.
    lead.step_down("lease_expired")
    assert not lead.is_leader

    await lead.try_acquire()

    assert lead.is_leader
    assert lead.epoch == 1
    assert await redis.get(keys.leader_epoch) == "1"  # nobody else can have led meanwhile
    assert await redis.get(keys.leader) == "1:a"
