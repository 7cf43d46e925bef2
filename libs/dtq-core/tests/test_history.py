"""The fault tests' history checker on hand-made Redis states: it must see a lost task, a
duplicate terminal event, a stuck task, orphaned entries and keys without a bound, and see
nothing wrong in a clean run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.infra.settings import Settings
from dtq_core.names import make_task_id
from dtq_core.protocol.scripts import Finish, Held, Scripts, task_defaults
from dtq_devtools.testing import wait_until_sync
from dtq_devtools.testing.figures import append, figures_path, slope_per_minute, table
from dtq_devtools.testing.history import Check, check_history
from dtq_devtools.testing.processes import ServiceProcess, services

QUEUE = "default"


async def run_to_success(client: Client, settings: Settings, n: int) -> list[str]:
    """Submit ``n`` tasks, claim and finish them the way a worker does."""
    handles = [await client.enqueue("t.x", queue=QUEUE) for _ in range(n)]
    scripts = Scripts(client.redis)
    qk = client.queue_keys(QUEUE)
    _, claimed = await scripts.claim(
        qk,
        consumer="w1",
        count=n,
        events_maxlen=settings.queues.events_maxlen,
        retention_ms=settings.tasks.retention_s * 1000,
        defaults=task_defaults(settings.retries.max_attempts, settings.tasks.timeout_ms),
    )
    await scripts.finish(
        qk,
        [Finish(Held(c.rand, c.priority, c.entry_id, c.lease), "ok", "null") for c in claimed],
        events_maxlen=settings.queues.events_maxlen,
        result_retention_ms=settings.tasks.result_retention_s * 1000,
        retention_ms=settings.tasks.retention_s * 1000,
        dlq_enabled=True,
        dlq_maxlen=settings.queues.dlq_maxlen,
    )
    return [h.id for h in handles]


async def test_a_clean_run_is_clean(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 5)
    check = await check_history(redis, ids)
    assert check.problems() == []
    assert check.statuses["succeeded"] == 5
    assert check.keys > 0


async def test_a_task_without_record_or_event_is_lost(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 2)
    ghost = make_task_id(QUEUE, "0" * 32)
    check = await check_history(redis, [*ids, ghost])
    assert check.lost == [ghost]
    assert any(p.startswith("1 lost") for p in check.problems())


async def test_an_expired_record_with_a_terminal_event_is_not_lost(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 2)
    await redis.delete(client.queue_keys(QUEUE).task(ids[0].split(":")[1]))
    check = await check_history(redis, ids)
    assert (check.lost, check.expired_after_end) == ([], 1)


async def test_two_terminal_events_of_one_task_are_a_duplicate(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 2)
    rand = ids[1].split(":")[1]
    await redis.xadd(
        client.queue_keys(QUEUE).events, {"type": "task.dead", "ids": rand, "tasks": "t.x"}
    )
    check = await check_history(redis, ids)
    assert check.dup_terminal == [ids[1]]


async def test_a_task_not_terminal_is_stuck_and_its_entry_no_orphan(
    redis: aioredis.Redis, client: Client
) -> None:
    handle = await client.enqueue("t.x", queue=QUEUE)
    check = await check_history(redis, [handle.id])
    assert check.stuck == [f"{handle.id} (queued)"]
    assert check.orphans == []


async def test_entries_of_terminal_tasks_are_orphans(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    """An undelivered entry and a pending one whose tasks ended anyway (a finish that forgot
    its ack, a cancel that left the entry behind), and a delayed member of an ended task."""
    queued = await client.enqueue("t.x", queue=QUEUE)
    delayed = await client.enqueue("t.x", queue=QUEUE, delay_s=60)
    qk = client.queue_keys(QUEUE)
    for handle in (queued, delayed):
        await redis.hset(qk.task(handle.id.split(":")[1]), "st", "succeeded")
    check = await check_history(redis, [queued.id, delayed.id])
    assert len(check.orphans) == 2, check.orphans
    assert "undelivered" in check.orphans[0]
    assert qk.delayed in check.orphans[1]

    pending = await client.enqueue("t.x", queue=QUEUE, priority=9)
    await redis.xreadgroup("workers", "w1", {qk.streams[9]: ">"}, count=1)
    await redis.hset(qk.task(pending.id.split(":")[1]), "st", "dead")
    check = await check_history(redis, [queued.id, delayed.id, pending.id])
    assert any("pending" in o for o in check.orphans), check.orphans


async def test_acked_entries_past_one_stream_node_are_orphans(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    await redis.config_set("stream-node-max-entries", 4)
    try:
        ids = await run_to_success(client, settings, 3)
        assert (await check_history(redis, ids)).orphans == []
        stream = client.queue_keys(QUEUE).streams[5]
        for _ in range(6):  # delivered and acked, never trimmed
            eid = await redis.xadd(stream, {"t": "f" * 32})
            await redis.xreadgroup("workers", "w1", {stream: ">"})
            await redis.xack(stream, "workers", eid)
        check = await check_history(redis, ids)
        assert check.acked_untrimmed > 4
        assert any("acked entries left" in o for o in check.orphans), check.orphans
    finally:
        await redis.config_set("stream-node-max-entries", 100)


async def test_keys_without_a_ttl_are_unbounded(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 1)
    qk = client.queue_keys(QUEUE)
    await redis.persist(qk.task(ids[0].split(":")[1]))
    await redis.set(qk.idem("ab" * 32), "x")
    await redis.set("dtq:something:new", "1")
    check = await check_history(redis, ids)
    assert sorted(check.unbounded) == sorted(
        [qk.task(ids[0].split(":")[1]), qk.idem("ab" * 32), "dtq:something:new"]
    )


async def test_records_of_tasks_not_accepted_are_unexpected(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 3)
    check = await check_history(redis, ids[:2])
    assert check.unexpected == [ids[2]]
    assert check.problems(allow_unexpected=True) == []


async def test_executions_come_from_the_handlers_side_effects(
    redis: aioredis.Redis, client: Client, settings: Settings
) -> None:
    ids = await run_to_success(client, settings, 2)
    side = redis  # the side effects may live anywhere: here, in the same database
    await side.rpush("exec_start", f"{ids[0]}|1|1|0", f"{ids[0]}|2|2|0", f"{ids[1]}|1|1|0")
    check = await check_history(redis, ids, side=side)
    assert check.executions[ids[0]] == 2
    assert check.dup_exec == 1
    assert check.problems(max_dup_exec=1, allow_unexpected=True) == []
    assert any("duplicate executions" in p for p in check.problems(allow_unexpected=True))


def test_figures_are_json_lines_and_a_table(tmp_path: Path) -> None:
    path = tmp_path / "a" / "faults.jsonl"
    check = Check(accepted=3, lost=["q:x"])
    append(path, {"test": "tests/chaos/x.py::test_y", "fault": "A1", **check.figures()})
    append(path, {"test": "t::z", "fault": "B1", "seconds": 1.5})
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["lost"] == 1
    rendered = table([*lines, "not json"])
    assert "test_y" in rendered
    assert "1.50" in rendered
    assert "(unreadable line)" in rendered


def test_the_figures_file_is_at_the_root_unless_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DTQTEST_FAULTS_JSONL", raising=False)
    assert figures_path(tmp_path) == tmp_path / ".artifacts" / "faults.jsonl"
    monkeypatch.setenv("DTQTEST_FAULTS_JSONL", str(tmp_path / "elsewhere.jsonl"))
    assert figures_path(tmp_path) == tmp_path / "elsewhere.jsonl"


def test_the_slope_is_least_squares_per_minute() -> None:
    # 1 MiB per 30 s, with one outlier at the end that a first-to-last difference would follow.
    samples = [(t, t / 30) for t in range(0, 60, 2)] + [(60.0, 0.0)]
    assert 1.0 < slope_per_minute(samples) < 2.0
    assert slope_per_minute([(t, 5.0) for t in range(10)]) == 0
    assert slope_per_minute([(1.0, 3.0)]) == slope_per_minute([(1.0, 3.0), (1.0, 9.0)]) == 0
    assert slope_per_minute([(0, 0), (30, 1)]) == pytest.approx(2.0)


def test_a_process_reports_its_resident_set_size(tmp_path: Path) -> None:
    proc = ServiceProcess("http.server", ["0", "--bind", "127.0.0.1"], {}, tmp_path / "log")
    with services(proc):
        assert wait_until_sync(lambda: proc.rss_bytes() > 1_000_000, timeout=30)
    assert proc.rss_bytes() == 0  # gone
