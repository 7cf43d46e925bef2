"""Live delivery: lifecycle events of a real worker, and filters, over WS and SSE."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dtq_core import Client
from dtq_core.infra import tracing
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.processes import scheduler_process, services, worker_process

if TYPE_CHECKING:
    from conftest import Kit

TRANSPORTS = ["ws", "sse"]


def by_task(frames: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for f in frames:
        out[f["task_id"]].append(f["type"])
    return dict(out)


def per_stream(frames: list[dict[str, Any]]) -> dict[str | None, list[tuple[str, str | None]]]:
    """Order holds within a queue's stream; across streams the reader's order may differ."""
    out: dict[str | None, list[tuple[str, str | None]]] = defaultdict(list)
    for f in frames:
        out[f["queue"]].append((f["type"], f["task_id"]))
    return dict(out)


async def test_ws_and_sse_see_every_lifecycle_event_of_a_real_worker(
    kit: Kit, client: Client, redis_url: str, tmp_path: Path
) -> None:
    run = await kit.gateway()
    ws = await kit.subscribed("ws", run.http)
    sse = await kit.subscribed("sse", run.http)
    with services(
        worker_process(redis_url, tmp_path / "worker.log"),
        scheduler_process(redis_url, tmp_path / "scheduler.log"),  # promotes the retry
    ):
        noop = await client.enqueue("noop")
        progress = await client.enqueue("progress", kwargs={"steps": 2})
        fail = await client.enqueue("fail", max_attempts=2)
        for handle in (noop, progress, fail):
            await handle.result(timeout=20)
    expected = {
        noop.id: ["task.queued", "task.started", "task.succeeded"],
        progress.id: ["task.queued", "task.started", *["task.progress"] * 2, "task.succeeded"],
        fail.id: [
            *["task.queued", "task.started", "task.retrying"],
            *["task.queued", "task.started", "task.dead"],
        ],
    }
    total = sum(len(v) for v in expected.values())
    await wait_until(lambda: kit.settled(run), message="all events handed to the sockets")
    ws_frames = await kit.collect(ws, total)
    sse_frames = await kit.collect(sse, total)

    assert by_task(ws_frames) == expected
    assert [(f["type"], f["task_id"]) for f in sse_frames] == [
        (f["type"], f["task_id"]) for f in ws_frames
    ]
    assert run.gateway.metrics.sent_total == 2 * total  # and nothing else was sent
    now = time.time()
    for frame in ws_frames:
        assert frame["queue"] == "default"
        assert now - 60 < frame["ts"] <= now
        assert frame["task"] in {"noop", "progress", "fail"}
    started = [f for f in ws_frames if f["type"] == "task.started"]
    assert [f["attempt"] for f in started if f["task_id"] == fail.id] == [1, 2]
    assert all(f["worker"] for f in started)
    steps = [f["data"]["progress"] for f in ws_frames if f["type"] == "task.progress"]
    assert [s["value"] for s in steps] == [0.5, 1.0]
    cursors = [f["cursor"] for f in ws_frames]
    assert len(set(cursors)) == total


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_filters_by_queue_task_id_and_types(transport: str, kit: Kit, client: Client) -> None:
    run = await kit.gateway()
    everything = await kit.subscribed(transport, run.http)
    by_queue = await kit.subscribed(transport, run.http, queue="q1")
    by_type = await kit.subscribed(transport, run.http, types="task.cancelled,queue.")
    q2_tasks = await kit.subscribed(transport, run.http, queue="q2", types="task.*")
    # q1 and q2 appear after the clients connected: the reader finds them in the registry.
    t1 = await client.enqueue("noop", queue="q1")
    t2 = await client.enqueue("noop", queue="q2")
    # A task filter, joined late: it resumes from a cursor taken before t1 existed.
    by_task = await kit.subscribed(
        transport, run.http, task_id=t1.id, cursor=everything.frames[0]["cursor"]
    )
    admin = Admin(client)
    await admin.pause("q1")
    await client.cancel(t1.id)
    await admin.resume("q1")
    await kit.redis.xadd(kit.keys.events, {"type": "worker.stale", "worker": "w-gone"})
    await client.cancel(t2.id)

    q1 = [
        ("task.queued", t1.id),
        ("queue.paused", None),
        ("task.cancelled", t1.id),
        ("queue.resumed", None),
    ]
    q2 = [("task.queued", t2.id), ("task.cancelled", t2.id)]
    stale = [("worker.stale", None)]
    await wait_until(lambda: kit.settled(run), message="all events handed to the sockets")
    expect = [
        (everything, {"q1": q1, "q2": q2, None: stale}),
        (by_queue, {"q1": q1}),
        (by_type, {"q1": q1[1:], "q2": q2[1:]}),
        (q2_tasks, {"q2": q2}),
        (by_task, {"q1": [q1[0], q1[2]]}),
    ]
    for stream, streams in expect:
        count = sum(len(v) for v in streams.values())
        assert per_stream(await kit.collect(stream, count)) == streams
    assert run.gateway.metrics.sent_total == 7 + 4 + 4 + 2 + 2  # no frame beyond these
    (stale_frame,) = [f for f in everything.frames if f["type"] == "worker.stale"]
    assert stale_frame["worker"] == "w-gone"
    assert stale_frame["queue"] is None


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_partitioned_queue_is_followed_whole(
    transport: str, kit: Kit, client: Client
) -> None:
    """A client following ``hot`` gets the events of every partition, those of a partition
    added after it subscribed too, each naming the queue; the task ids name the partition."""
    admin = Admin(client)
    await admin.create_queue("hot")
    await admin.configure("hot", partitions=2)
    run = await kit.gateway()
    followed = await kit.subscribed(transport, run.http, queue="hot")
    first = [h.id for h in await client.enqueue_many([{"task": "noop", "queue": "hot"}] * 2)]
    await admin.configure("hot", partitions=3)
    client.submitter.layouts.forget("hot")
    grown = [h.id for h in await client.enqueue_many([{"task": "noop", "queue": "hot"}] * 3)]
    assert {i.split(":")[0] for i in grown} == {"hot", "hot~1", "hot~2"}
    by_task_id = await kit.subscribed(transport, run.http, task_id=grown[2], queue="hot")
    await client.cancel(grown[2])
    await wait_until(lambda: kit.settled(run), message="all events handed to the sockets")
    frames = await kit.collect(followed, 6)
    assert {f["queue"] for f in frames} == {"hot"}
    # A cursor names the partitions' streams (``hot~1``) and resumes them all.
    resumed = await kit.subscribed(transport, run.http, queue="hot", cursor=frames[0]["cursor"])
    again = await kit.collect(resumed, 5)
    # Order holds within a partition's stream, not across them.
    assert sorted((f["type"], f["task_id"]) for f in again) == sorted(
        (f["type"], f["task_id"]) for f in frames[1:]
    )
    assert sorted(f["task_id"] for f in frames if f["type"] == "task.queued") == sorted(
        first + grown
    )
    # It joined live, right after the submit: the reader may not have read the submit yet.
    frames = await kit.collect(by_task_id, 1)
    if frames[0]["type"] == "task.queued":
        frames += await kit.collect(by_task_id, 1)
    assert [(f["type"], f["task_id"]) for f in frames][-1] == ("task.cancelled", grown[2])
    assert {f["task_id"] for f in frames} == {grown[2]}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_traced_tasks_frames_carry_its_trace_id(
    transport: str, kit: Kit, client: Client
) -> None:
    run = await kit.gateway()
    stream = await kit.subscribed(transport, run.http)
    plain = await client.enqueue("noop")
    tracing.configure_tracing("dtq-test", exporter=InMemorySpanExporter(), env={})
    try:
        traced = await client.enqueue("noop")
    finally:
        tracing.shutdown()
    assert traced.trace_id is not None
    await wait_until(lambda: kit.settled(run), message="both events handed to the sockets")
    frames = await kit.collect(stream, 2)
    assert [(f["task_id"], f["trace_id"]) for f in frames] == [
        (plain.id, None),  # every frame has the field: null when the task is not traced
        (traced.id, traced.trace_id),
    ]
