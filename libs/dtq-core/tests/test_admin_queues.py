"""Steering queues (``dtq_core.ops.admin.queues``) against a real redis-server: pause, resume,
purge, and queues that are unknown or badly named."""

from __future__ import annotations

import pytest

from dtq_core.client import Client
from dtq_core.errors import (
    InvalidNameError,
    QueueNotFoundError,
)
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id
from dtq_core.ops.admin import Admin
from dtq_devtools.testing.lifecycle import audit_entries as audit
from dtq_devtools.testing.lifecycle import claim, finish, status


async def test_unknown_and_invalid_queues_are_refused(client: Client) -> None:
    admin = Admin(client)
    await client.enqueue("t.a", queue="known")
    with pytest.raises(InvalidNameError):
        await admin.queue("bad queue")
    with pytest.raises(QueueNotFoundError) as info:
        await admin.pause("ghost")
    assert info.value.code == "queue_not_found"
    with pytest.raises(QueueNotFoundError):
        await admin.purge("ghost")
    with pytest.raises(InvalidNameError):
        await admin.dlq_list("{slot}")
    assert await client.redis.exists(client.queue_keys("ghost").meta) == 0
    assert await audit(client) == []


async def test_pause_makes_claims_report_paused_until_resume(client: Client) -> None:
    admin = Admin(client)
    handle = await client.enqueue("t.a", queue="q")
    qk = client.queue_keys("q")

    await admin.pause("q", actor="alice")
    assert await client.redis.hget(qk.meta, "paused") == "1"
    assert (await admin.queue("q")).paused
    paused, got = await client.scripts.claim(
        qk, consumer="w1", count=10, events_maxlen=1000, retention_ms=600_000
    )
    assert (paused, got) == (True, [])
    assert await status(client, handle.id) is TaskStatus.QUEUED

    await admin.resume("q", actor="alice")
    assert await client.redis.hget(qk.meta, "paused") == "0"
    assert not (await admin.queue("q")).paused
    (started,) = await claim(client, "q", 10)
    assert make_task_id("q", started.rand) == handle.id

    events = [f for _, f in await client.redis.xrange(qk.events) if f["type"].startswith("queue")]
    assert events == [
        {"type": "queue.paused", "actor": "alice"},
        {"type": "queue.resumed", "actor": "alice"},
    ]
    entries = await audit(client)
    assert [(e["action"], e["queue"], e["actor"], e["count"]) for e in entries] == [
        ("queue.pause", "q", "alice", "0"),
        ("queue.resume", "q", "alice", "0"),
    ]


async def test_purge_cancels_waiting_tasks_but_not_running_ones(client: Client) -> None:
    admin = Admin(client)
    handles = await client.enqueue_many([{"task": "t.a", "queue": "q"} for _ in range(250)])
    delayed = await client.enqueue("t.later", queue="q", delay_s=300)
    (running,) = await claim(client, "q", 1)
    running_id = make_task_id("q", running.rand)

    assert await admin.purge("q", actor="ops") == 250

    assert await status(client, running_id) is TaskStatus.RUNNING
    assert await status(client, delayed.id) is TaskStatus.CANCELLED
    waiting = [h.id for h in handles if not isinstance(h, Exception) and h.id != running_id]
    assert len(waiting) == 249
    for task_id in waiting:
        assert await status(client, task_id) is TaskStatus.CANCELLED
    stats = await admin.queue("q")
    assert (stats.depth, stats.delayed, stats.in_flight) == (0, 0, 1)
    assert await finish(client, "q", [running], "ok") == ["succeeded"]
    assert (await audit(client))[-1] | {"ts": ""} == {
        "action": "queue.purge",
        "queue": "q",
        "actor": "ops",
        "count": "250",
        "ts": "",
    }
    assert await admin.purge("q") == 0
