"""Resuming by cursor: exactly the missed events, an explicit gap beyond retention, and
refusal of cursors the gateway did not issue; over WS and SSE."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from structlog.testing import capture_logs

from dtq_core import Client
from dtq_core.messages import EVENT_TYPES
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.processes import services, worker_process

if TYPE_CHECKING:
    from conftest import Kit

TRANSPORTS = ["ws", "sse"]


def keys(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["type"], f["task_id"]) for f in frames]


async def force_disconnect(stream: Any) -> None:
    """Drop the connection without a goodbye (WS: abort the TCP connection)."""
    if stream.transport == "ws":
        stream.conn.transport.abort()
    else:
        await stream.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_reconnect_with_last_cursor_gets_exactly_the_missed_events(
    transport: str, kit: Kit, client: Client, redis_url: str, tmp_path: Path
) -> None:
    await kit.redis.sadd(kit.keys.queues, "default")
    run = await kit.gateway()
    observer = await kit.subscribed("ws", run.http)
    subject = await kit.subscribed(transport, run.http)
    with (
        capture_logs() as logs,
        services(worker_process(redis_url, tmp_path / "worker.log")),
    ):
        # One submit of five tasks is one stream entry holding five task.queued events.
        first = await client.enqueue_many([{"task": "noop"}] * 5)
        before = await kit.collect(subject, 2)
        assert keys(before) == [("task.queued", h.id) for h in first[:2]]  # type: ignore[union-attr]
        await force_disconnect(subject)  # inside that entry, between its 2nd and 3rd event
        handles = [*first, *await client.enqueue_many([{"task": "noop"}] * 10)]
        handles.append(await client.enqueue("echo", args=[1]))
        for h in handles:
            await h.result(timeout=20)  # type: ignore[union-attr]
        resumed = await kit.subscribed(transport, run.http, cursor=before[-1]["cursor"])
        last = await client.enqueue("noop")  # live again
        await last.result(timeout=20)
        gone = await wait_until(
            lambda: [e for e in logs if e["event"] == "client_disconnected"],
            message="the first connection's end noticed",
        )
    total = 3 * (len(handles) + 1)
    await wait_until(lambda: kit.settled(run), message="all events handed to the sockets")
    seen = await kit.collect(observer, total)
    after = await kit.collect(resumed, total - len(before))
    assert keys(before + after) == keys(seen)  # nothing missing, nothing twice, same order
    # Frames sent: the observer's, the first connection's (some unread when it dropped), and
    # the resumed connection's, which are exactly the ones read above.
    assert run.gateway.metrics.sent_total == total + gone[0]["sent"] + len(after)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_replay_hands_over_to_live_without_hole_or_duplicate(
    transport: str, kit: Kit
) -> None:
    await kit.redis.sadd(kit.keys.queues, "flow")
    # A small buffer: live events overflow it while the replay runs, which must cost nothing.
    run = await kit.gateway(client_buffer=150)
    subject = await kit.subscribed(transport, run.http, queue="flow")
    produced: list[str] = []

    async def produce() -> None:
        while len(produced) < 3000:
            produced.extend(await kit.publish("flow", 30, batch=3))
            await asyncio.sleep(0.005)  # pacing the producer, not synchronisation

    with capture_logs() as logs:
        producer = asyncio.create_task(produce())
        before = await kit.collect(subject, 200)  # 200 = 66 entries and 2 events of the 67th
        await force_disconnect(subject)
        await wait_until(lambda: len(produced) >= 1500, message="events missed while away")
        resumed = await kit.subscribed(
            transport, run.http, queue="flow", cursor=before[-1]["cursor"]
        )
        during = await kit.collect(resumed, 500)  # the producer is still writing
        await producer
        rest = await kit.collect(resumed, len(produced) - 200 - 500)
        gone = await wait_until(
            lambda: [e for e in logs if e["event"] == "client_disconnected"],
            message="the first connection's end noticed",
        )
    assert [f["task_id"] for f in before + during + rest] == produced
    await wait_until(lambda: kit.settled(run), message="all events handed to the sockets")
    # The resumed connection was sent exactly what it read: no duplicate.
    assert run.gateway.metrics.sent_total == gone[0]["sent"] + len(during) + len(rest)
    assert run.gaps("slow_consumer") == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cursor_older_than_retention_gets_an_explicit_gap(transport: str, kit: Kit) -> None:
    await kit.redis.sadd(kit.keys.queues, "r")
    run = await kit.gateway()
    subject = await kit.subscribed(transport, run.http, queue="r")
    await kit.publish("r", 1, maxlen=100)
    (first,) = await kit.collect(subject, 1)
    await subject.close()
    await wait_until(lambda: run.gateway.clients == 0, message="the first connection gone")
    # DTQ_EVENTS_MAXLEN has a floor of 100; the scripts trim with MAXLEN ~ like this.
    await kit.publish("r", 600, maxlen=100)
    retained = [
        f"r:{fields['ids']}" for _, fields in await kit.redis.xrange(kit.keys.queue("r").events)
    ]
    assert 100 <= len(retained) < 600

    resumed = await kit.subscribed(transport, run.http, queue="r", cursor=first["cursor"])
    gap = await resumed.next()
    assert (gap["type"], gap["reason"], gap["queue"]) == ("gap", "retention", "r")
    frames = await kit.collect(resumed, len(retained))
    assert [f["task_id"] for f in frames] == retained

    # The gap's cursor resumes at the first retained event, without a second gap.
    again = await kit.subscribed(transport, run.http, queue="r", cursor=gap["cursor"])
    frames = await kit.collect(again, len(retained))
    assert [f["task_id"] for f in frames] == retained
    assert [f["type"] for f in again.frames].count("gap") == 0
    assert run.gaps("retention") == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_live_client_gets_a_gap_when_the_reader_falls_behind_retention(
    transport: str, kit: Kit
) -> None:
    await kit.redis.sadd(kit.keys.queues, "r")
    run = await kit.gateway()
    subject = await kit.subscribed(transport, run.http, queue="r")
    await kit.publish("r", 1, maxlen=100)
    await kit.collect(subject, 1)
    # 600 entries in one MULTI: trimmed to about 100 before the reader can read any of them.
    await kit.publish("r", 600, maxlen=100, atomic=True)
    retained = [
        f"r:{fields['ids']}" for _, fields in await kit.redis.xrange(kit.keys.queue("r").events)
    ]
    gap = await subject.next()
    assert (gap["type"], gap["reason"], gap["queue"]) == ("gap", "retention", "r")
    frames = await kit.collect(subject, len(retained))
    assert [f["task_id"] for f in frames] == retained


async def test_sse_last_event_id_wins_over_the_original_cursor(kit: Kit) -> None:
    await kit.redis.sadd(kit.keys.queues, "s")
    run = await kit.gateway()
    first = await kit.subscribed("sse", run.http, queue="s")
    ids = await kit.publish("s", 3)
    one, two, _ = await kit.collect(first, 3)
    # What a browser's EventSource sends when it reconnects: its URL, its newest id.
    again = await kit.subscribed(
        "sse", run.http, queue="s", cursor=one["cursor"], headers={"Last-Event-ID": two["cursor"]}
    )
    (frame,) = await kit.collect(again, 1)
    assert frame["task_id"] == ids[2]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("params", "word"),
    [
        ({"cursor": "this-is-not-a-cursor"}, "cursor"),
        ({"queue": "no{such}queue"}, "queue"),
        ({"task_id": "nope"}, "task_id"),
        ({"types": "task.succeded"}, "types: 'task.succeded' is not an event type"),
        ({"types": "task.queued,bogus"}, "types: 'bogus' is not an event type"),
        ({"types": "tsk.*"}, "types: 'tsk.*'"),
        ({"since_s": "0"}, "since_s"),
        ({"since_s": "1.5"}, "since_s"),
        ({"since_s": "3601"}, "since_s"),
    ],
)
async def test_malformed_cursor_or_filter_is_refused_with_a_reason(
    transport: str, params: dict[str, str], word: str, kit: Kit
) -> None:
    run = await kit.gateway()
    if transport == "ws":
        stream = await kit.open("ws", run.http, **params)
        with pytest.raises(kit.Closed) as closed:
            await stream.next()
        assert closed.value.code == 1008
        assert closed.value.reason.startswith(word)
    else:
        with pytest.raises(kit.Refused) as refused:
            await kit.open("sse", run.http, **params)
        assert refused.value.status == 400
        assert f'"detail":"{word}' in refused.value.body
    assert run.gateway.clients == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_unknown_event_type_is_refused_with_the_valid_ones(
    transport: str, kit: Kit
) -> None:
    """A typo in ``types`` is refused (it would otherwise subscribe to nothing, silently):
    SSE lists every valid type; a WebSocket close reason (123 bytes) suggests the closest."""
    run = await kit.gateway()
    if transport == "ws":
        stream = await kit.open("ws", run.http, types="task.succeded")
        with pytest.raises(kit.Closed) as closed:
            await stream.next()
        assert closed.value.code == 1008
        assert "did you mean 'task.succeeded'?" in closed.value.reason
    else:
        with pytest.raises(kit.Refused) as refused:
            await kit.open("sse", run.http, types="task.succeded")
        assert refused.value.status == 400
        detail = msgspec.json.decode(refused.value.body)["detail"]
        assert all(t in detail for t in EVENT_TYPES)
        assert "did you mean 'task.succeeded'?" in detail


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_since_s_starts_that_far_back_then_goes_live(transport: str, kit: Kit) -> None:
    """A dashboard opened now sees the last minutes too (``?since_s=``): replayed from Redis
    like a cursor from then, then live, nothing twice."""
    await kit.redis.sadd(kit.keys.queues, "look")
    old = f"{int(time.time() * 1000) - 120_000}-0"  # two minutes ago
    fields = {"type": "task.dead", "ids": "a" * 32, "tasks": "t", "att": "1"}
    await kit.redis.xadd(kit.keys.queue("look").events, fields, id=old)
    recent = await kit.publish("look", 3)
    run = await kit.gateway()
    await wait_until(lambda: kit.settled(run), message="the reader is past every entry")

    minute = await kit.subscribed(transport, run.http, queue="look", since_s=60)
    assert [f["task_id"] for f in await kit.collect(minute, 3)] == recent
    live = await kit.subscribed(transport, run.http, queue="look")
    later = await kit.publish("look", 1)
    assert [f["task_id"] for f in await kit.collect(minute, 1)] == later
    assert [f["task_id"] for f in await kit.collect(live, 1)] == later  # no look back

    five = await kit.subscribed(transport, run.http, queue="look", since_s=300)
    frames = await kit.collect(five, 5)
    assert [f["task_id"] for f in frames] == ["look:" + "a" * 32, *recent, *later]
    assert frames[0]["type"] == "task.dead"
    # A cursor wins over since_s (a reconnect to the original URL continues where it was).
    again = await kit.subscribed(
        transport, run.http, queue="look", since_s=300, cursor=frames[-1]["cursor"]
    )
    last = await kit.publish("look", 1)
    assert [f["task_id"] for f in await kit.collect(again, 1)] == last
