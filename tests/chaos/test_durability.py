"""B2 and B3: what a crash of Redis loses under each ``appendfsync`` policy.

A ``kill -9`` of redis-server loses no acknowledged submit when the disk keeps up: Redis
writes the AOF buffer to the kernel before it sends the replies, and the kernel keeps what
was written. What ``everysec`` risks is the slow disk: while a background fsync takes longer
than a second, Redis postpones its writes for up to two more seconds (``aof_delayed_fsync``
counts it) and still acknowledges submits, so a crash then loses about two seconds of them.
``always`` writes and syncs before the reply, at a cost in throughput measured here.
docs/operations.md ("Durability") states these windows; ``/ready`` reports the policy.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dtq_core import Client
from dtq_devtools.testing import RedisServer
from dtq_devtools.testing.cgroups import Cgroup, write_limit
from dtq_devtools.testing.history import check_history
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

LOAD_S = 2.0
"""How long each policy's load runs before the kill."""
PRESSURE_WAIT_S = 8.0
"""How long B3 waits for Redis to report a delayed fsync on its slow disk (the figures say
whether the window was reached)."""
SLOW_DISK_BPS = 256 * 1024
"""B3's disk for Redis: 256 KiB/s of writes, a quarter of what one client's submits append a
second, so each background fsync takes seconds."""


@dataclass
class Run:
    policy: str
    acked: list[str] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    killed_at: float = 0.0
    delayed_fsyncs: int = 0

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        span = self.acked_at[-1] - self.acked_at[0] if len(self.acked_at) > 1 else 0.0
        return {
            "policy": self.policy,
            "acked": len(self.acked),
            "submits_per_s": round(len(self.acked) / span, 1) if span else None,
            "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 2) if ordered else None,
            "aof_delayed_fsync": self.delayed_fsyncs,
        }


async def _delayed_fsyncs(client: Client) -> int:
    info = await client.redis.info("persistence")
    return int(info.get("aof_delayed_fsync", 0))


async def _load_then_kill(
    server: RedisServer,
    policy: str,
    *,
    until_delayed: bool = False,
    slow_disk: Cgroup | None = None,
) -> tuple[Run, Client]:
    """Submit one task at a time for LOAD_S (or, with ``until_delayed``, until Redis reports
    a delayed fsync, at most PRESSURE_WAIT_S), then ``kill -9`` Redis right after an ack."""
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.config_set("appendfsync", policy)
    run = Run(policy)
    started = time.monotonic()
    limit = PRESSURE_WAIT_S if until_delayed else LOAD_S
    while time.monotonic() - started < limit:
        t0 = time.monotonic()
        handle = await client.enqueue("noop", queue="q")
        run.latencies.append(time.monotonic() - t0)
        run.acked.append(handle.id)
        run.acked_at.append(time.monotonic())
        if until_delayed and len(run.acked) % 25 == 0:
            run.delayed_fsyncs = await _delayed_fsyncs(client)
            if run.delayed_fsyncs > 0:
                break
    if not until_delayed:
        run.delayed_fsyncs = await _delayed_fsyncs(client)
    if slow_disk is None:
        server.kill()
    else:
        # SIGKILL first, then the limit off: a process blocked on a throttled write exits
        # only once that write is through, and what it had not written stays lost.
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)
        slow_disk.lift()
        server.proc.wait(60)
    run.killed_at = time.monotonic()
    return run, client


async def _restarted_and_checked(
    server: RedisServer, client: Client, run: Run
) -> tuple[Any, dict[str, Any]]:
    server.start()
    await client.redis.connection_pool.disconnect()
    check = await check_history(client.redis, run.acked, settled={"queued"})
    lost = set(check.lost)
    lost_at = [at for task_id, at in zip(run.acked, run.acked_at, strict=True) if task_id in lost]
    window = round(run.killed_at - min(lost_at), 3) if lost_at else 0.0
    return check, {**run.figures(), "acked_missing": len(lost), "missing_span_s": window}


async def test_a_crash_loses_no_acknowledged_submit_with_either_policy_on_a_calm_disk(
    tmp_path: Path, faults: FaultFigures
) -> None:
    """B2: the same load under ``everysec`` and ``always``, each ended by ``kill -9``: nothing
    acknowledged is lost, and the throughput cost of ``always`` is measured in the same run."""
    measured: dict[str, dict[str, Any]] = {}
    for policy in ("everysec", "always"):
        server = RedisServer(tmp_path / policy)
        server.start()
        try:
            run, client = await _load_then_kill(server, policy)
            check, figures = await _restarted_and_checked(server, client, run)
            await client.aclose()
        finally:
            server.stop()
        measured[policy] = figures
        faults.record(f"B2 kill -9 under appendfsync {policy}", check, **figures)
        assert run.acked, "the load submitted nothing"
        check.assert_clean()
    ratio = measured["always"]["submits_per_s"] / measured["everysec"]["submits_per_s"]
    faults.record("B2 throughput of always against everysec", None, ratio=round(ratio, 3))
    print(f"always/everysec submit throughput: {ratio:.2f}", measured)


async def test_a_crash_inside_a_slow_fsync_loses_at_most_the_documented_window(
    tmp_path: Path, faults: FaultFigures
) -> None:
    """B3: Redis's writes to its disk held to :data:`SLOW_DISK_BPS` (a cgroup write limit:
    its background fsync of a second's appends takes seconds); under ``everysec`` a ``kill
    -9`` after Redis reported a delayed fsync may lose the last couple of seconds of
    acknowledged submits (measured, and bounded), and under ``always`` nothing."""
    for policy in ("everysec", "always"):
        data = tmp_path / policy
        server = RedisServer(data)
        server.start()
        assert server.proc is not None
        try:
            with write_limit(data, SLOW_DISK_BPS) as slow_disk:
                slow_disk.add(server.proc.pid)
                try:
                    run, client = await _load_then_kill(
                        server, policy, until_delayed=True, slow_disk=slow_disk
                    )
                finally:
                    if server.proc.poll() is None:  # failed before the kill
                        slow_disk.release(server.proc.pid)
            check, figures = await _restarted_and_checked(server, client, run)
            await client.aclose()
        finally:
            server.stop()
        figures["delayed_fsync_reached"] = run.delayed_fsyncs > 0
        faults.record(f"B3 kill -9 inside a slow fsync, appendfsync {policy}", check, **figures)
        assert run.acked, "the load submitted nothing"
        if policy == "always":
            check.assert_clean()
        else:
            assert run.delayed_fsyncs > 0, "the slow disk never delayed an fsync"
            # Only the tail may be missing: what was acknowledged in the last seconds before
            # the kill (the postponed writes, and a write the slow disk held up), never an
            # older submit.
            assert figures["missing_span_s"] <= 6.0, figures
            assert not check.dup_terminal
            assert not check.stuck
            assert not check.orphans
