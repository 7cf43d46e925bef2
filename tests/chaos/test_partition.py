"""B11: one worker cut off from Redis, the others not.

The worker talks to Redis through a fault proxy of its own (``dtq_devtools.testing.proxy``),
which drops everything without closing anything, as a firewall rule that drops does:

- a partition of half the visibility timeout changes nothing: no reclaim, no second run;
- a partition longer than the visibility timeout, then healed: a peer reclaims each of the
  cut-off worker's tasks once and runs it; when the link heals, what the cut-off worker sent
  in the meantime arrives late and is refused (a finish: ``dtq_stale_finish_total``; a lease
  extension of a handler still running: ``dtq_lease_lost_total``, the handler is cancelled),
  and the worker works on in the same process;
- a half-open link (every open connection silent for good, no FIN and no RST): the worker
  notices within the socket timeout, reconnects by itself and runs new work.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from dtq_core import Client, TaskStatus
from dtq_core.infra.connection import SOCKET_TIMEOUT_S, connect
from dtq_devtools.testing import RedisServer, free_port, wait_until
from dtq_devtools.testing.history import check_history, queue_events, settle
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess, services, worker_process
from dtq_devtools.testing.proxy import FaultProxy
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

VT_S = float(FAST_ENV["DTQ_VISIBILITY_TIMEOUT_S"])
PARTITION_S = 3 * VT_S
"""Longer than the visibility timeout, shorter than the socket timeout: the cut-off worker's
calls are still waiting when the link heals, so they arrive late instead of timing out."""
LONG_S = PARTITION_S + 2
"""A handler still running when the link heals (its lease extension is refused)."""
SHORT_S = VT_S
"""A handler that ends during the partition (its finish is refused)."""


def consumer_of(proc: ServiceProcess) -> str | None:
    """The consumer name a worker registered under (its ``worker_started`` line)."""
    for line in proc.log().splitlines():
        if '"worker_started"' in line:
            return str(json.loads(line)["worker"])
    return None


async def redis_ms(client: Client) -> int:
    seconds, micros = await client.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def beat_since(client: Client, consumer: str, since_ms: int) -> bool:
    """Whether the worker's heartbeat landed in the registry after ``since_ms`` (Redis time)."""
    score = await client.redis.zscore(client.keys.workers, consumer)
    return score is not None and score > since_ms


async def running_on(client: Client, ids: list[str], consumer: str) -> bool:
    for task_id in ids:
        record = await client.get(task_id)
        if record is None or record.status is not TaskStatus.RUNNING or record.worker != consumer:
            return False
    return True


async def test_a_partition_longer_than_the_visibility_timeout_is_reclaimed_once_and_healed(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    side_url = url.replace("/0", "/1")  # the handlers' side effects never cross the proxy
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(side_url)
    await client.redis.flushall()
    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    env = {"DTQTEST_SIDE_URL": side_url}
    cut = worker_process(
        proxy.url,
        tmp_path / "cut.log",
        concurrency=2,
        env={**env, "DTQ_WORKER_METRICS_PORT": str(free_port())},
    )
    peer = worker_process(url, tmp_path / "peer.log", concurrency=2, env=env)
    refused = ("dtq_lease_lost_total", "dtq_stale_finish_total")
    try:
        with services(cut):
            consumer = await wait_until(lambda: consumer_of(cut), timeout=20, message="started")
            await wait_until(cut.metrics_port, timeout=20, message="the worker's metrics")
            long = await client.enqueue("sleep", args=[LONG_S])
            short = await client.enqueue("sleep", args=[SHORT_S])
            ids = [long.id, short.id]
            await wait_until(lambda: running_on(client, ids, consumer), timeout=20)
            pid = cut.pid

            proxy.partition()
            cut_at = time.monotonic()
            peer.start()
            peer_pid = peer.pid
            # The peer takes both attempts back after the visibility timeout, with the
            # partition still on.
            await wait_until(
                lambda: _reclaimed(client, len(ids)), timeout=30, message="both reclaimed"
            )
            await asyncio.sleep(max(0.0, cut_at + PARTITION_S - time.monotonic()))
            healed_ms = await redis_ms(client)
            proxy.heal()
            healed_at = time.monotonic()
            partition_s = healed_at - cut_at

            def noticed() -> float:
                return sum(cut.metric(name) for name in refused)

            await wait_until(
                lambda: asyncio.to_thread(lambda: noticed() >= len(ids)),
                timeout=20,
                message="the late calls refused",
            )
            await wait_until(
                lambda: beat_since(client, consumer, healed_ms), timeout=20, message="rejoined"
            )
            rejoin_s = time.monotonic() - healed_at
            counted = {name: cut.metric(name) for name in (*refused, "dtq_stream_entry_lost_total")}
            settle_s = await settle(client.redis, ids, timeout=30)
            peer.stop()

            # Only the healed worker is left: new work runs there.
            probes = [await client.enqueue("echo", args=[i]) for i in range(6)]
            probe_ids = [p.id for p in probes]
            await settle(client.redis, probe_ids, timeout=30)
            assert cut.alive()
            assert cut.pid == pid
        check = await check_history(client.redis, ids + probe_ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        requeued = [e for e in events if e.type == "task.requeued" and e.reason == "lease_expired"]
        starts = [s.split("|") for s in await side.lrange("exec_start", 0, -1)]
        probe_pids = {s[2] for s in starts if s[0] in probe_ids}
        runs = {t: [s[2] for s in starts if s[0] == t] for t in ids}
        faults.record(
            "B11 partition of one worker past the visibility timeout, healed",
            check,
            partition_s=round(partition_s, 2),
            reclaimed=len(requeued),
            rejoin_s=round(rejoin_s, 2),
            proxy_connections=proxy.connections,
            settle_s=round(settle_s, 2),
            **counted,
        )
        check.assert_clean(max_dup_exec=len(ids))
        assert check.dup_exec == len(ids)  # each run twice: cut off, then by the peer
        assert sorted(e.task_id for e in requeued) == sorted(ids)  # reclaimed once each
        # Run where it was claimed, then once more by the peer.
        assert all(pids == [str(pid), str(peer_pid)] for pids in runs.values()), runs
        assert counted["dtq_lease_lost_total"] + counted["dtq_stale_finish_total"] == len(ids)
        assert counted["dtq_stale_finish_total"] >= 1  # the short one's late finish
        assert counted["dtq_stream_entry_lost_total"] == 0
        for task_id in ids:
            record = await client.get(task_id)
            assert record is not None
            assert (record.status, record.attempts) == (TaskStatus.SUCCEEDED, 2)
            assert [e.reason for e in record.errors] == ["lease_expired"]
        assert probe_pids == {str(pid)}
        for probe in probes:
            record = await client.get(probe.id)
            assert record is not None
            assert record.status is TaskStatus.SUCCEEDED
    finally:
        peer.stop()
        await proxy.stop()
        await side.aclose()
        await client.aclose()


async def test_a_partition_shorter_than_the_visibility_timeout_changes_nothing(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    """Half a visibility timeout cut off, with a peer ready to reclaim: nothing is reclaimed
    and nothing runs twice; the cut-off worker's held extensions and finishes cross when the
    link heals, and its tasks end at attempt 1 where they ran."""
    url = redis_server.url
    side_url = url.replace("/0", "/1")
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(side_url)
    await client.redis.flushall()
    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    env = {"DTQTEST_SIDE_URL": side_url}
    cut = worker_process(
        proxy.url,
        tmp_path / "cut.log",
        concurrency=2,
        env={**env, "DTQ_WORKER_METRICS_PORT": str(free_port())},
    )
    peer = worker_process(url, tmp_path / "peer.log", concurrency=2, env=env)
    try:
        with services(cut):
            consumer = await wait_until(lambda: consumer_of(cut), timeout=20, message="started")
            await wait_until(cut.metrics_port, timeout=20, message="the worker's metrics")
            held = [await client.enqueue("sleep", args=[VT_S]) for _ in range(2)]
            ids = [h.id for h in held]
            await wait_until(lambda: running_on(client, ids, consumer), timeout=20)
            peer.start()  # ready to reclaim, with room to run what it takes
            await wait_until(lambda: _workers(client, 2), timeout=20, message="the peer up")
            proxy.partition()
            await asyncio.sleep(VT_S / 2)  # the fault's length
            proxy.heal()
            settle_s = await settle(client.redis, ids, timeout=30)
            counted = {
                name: cut.metric(name)
                for name in ("dtq_lease_lost_total", "dtq_stale_finish_total")
            }
        check = await check_history(client.redis, ids, side=side)
        events = await queue_events(client.redis, client.queue_keys("default"))
        requeued = [e for e in events if e.type == "task.requeued"]
        faults.record(
            "B11 partition of one worker for half the visibility timeout",
            check,
            partition_s=VT_S / 2,
            reclaimed=len(requeued),
            settle_s=round(settle_s, 2),
            **counted,
        )
        check.assert_clean(max_dup_exec=0)
        assert requeued == []
        assert counted == {"dtq_lease_lost_total": 0, "dtq_stale_finish_total": 0}
        for h in held:
            record = await client.get(h.id)
            assert record is not None
            assert (record.status, record.attempts, record.worker) == (
                TaskStatus.SUCCEEDED,
                1,
                consumer,
            )
    finally:
        peer.stop()
        await proxy.stop()
        await side.aclose()
        await client.aclose()


async def _workers(client: Client, n: int) -> bool:
    return int(await client.redis.zcard(client.keys.workers)) >= n


async def _reclaimed(client: Client, n: int) -> bool:
    events = await queue_events(client.redis, client.queue_keys("default"))
    return sum(1 for e in events if e.type == "task.requeued" and e.reason == "lease_expired") >= n


def _failures(proc: ServiceProcess) -> list[str]:
    """The events of the worker's log lines that report a failed Redis call."""
    out = []
    for line in proc.log().splitlines():
        if line.startswith("{") and '_failed"' in line:
            out.append(str(json.loads(line).get("event")))
    return out


async def test_a_half_open_link_is_noticed_within_the_socket_timeout(
    redis_server: RedisServer, tmp_path: Path, faults: FaultFigures
) -> None:
    url = redis_server.url
    side_url = url.replace("/0", "/1")
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    side = connect(side_url)
    await client.redis.flushall()
    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    worker = worker_process(
        proxy.url, tmp_path / "w.log", concurrency=2, env={"DTQTEST_SIDE_URL": side_url}
    )
    try:
        with services(worker):
            consumer = await wait_until(lambda: consumer_of(worker), timeout=20, message="up")
            warm = [await client.enqueue("echo", args=["warm"])]
            await settle(client.redis, [w.id for w in warm], timeout=20)
            pid = worker.pid

            cut_ms = await redis_ms(client)
            severed = proxy.sever()
            cut_at = time.monotonic()
            await wait_until(
                lambda: _failures(worker), timeout=3 * SOCKET_TIMEOUT_S, message="noticed"
            )
            noticed_s = time.monotonic() - cut_at
            await wait_until(
                lambda: beat_since(client, consumer, cut_ms),
                timeout=3 * SOCKET_TIMEOUT_S,
                message="a heartbeat on a new connection",
            )
            recovered_s = time.monotonic() - cut_at
            handles = [await client.enqueue("echo", args=[i]) for i in range(20)]
            ids = [w.id for w in warm] + [h.id for h in handles]
            settle_s = await settle(client.redis, ids, timeout=60)
            assert worker.alive()
            assert worker.pid == pid
        check = await check_history(client.redis, ids, side=side)
        failures = _failures(worker)
        faults.record(
            "B11 half-open link (connections silent, no FIN or RST)",
            check,
            severed_connections=severed,
            noticed_s=round(noticed_s, 2),
            recovered_s=round(recovered_s, 2),
            socket_timeout_s=SOCKET_TIMEOUT_S,
            failed_calls=len(failures),
            failed_kinds=sorted(set(failures)),
            settle_s=round(settle_s, 2),
        )
        check.assert_clean()
        assert severed > 0
        # Every call waits at most the socket timeout (from when it was sent): a dead link is
        # noticed then, not never. The bound leaves room for a loaded machine.
        assert noticed_s < SOCKET_TIMEOUT_S + 5
        assert recovered_s < 2 * SOCKET_TIMEOUT_S + 5
        for h in handles:
            record = await client.get(h.id)
            assert record is not None
            assert record.status is TaskStatus.SUCCEEDED
    finally:
        await proxy.stop()
        await side.aclose()
        await client.aclose()
