"""Pure parts: the cursor codec, the retention decision, filters and frame splicing."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest

from dtq_core.messages import EVENT_TYPES, Event, expand_events
from dtq_event_gateway import cursor, frames, replay
from dtq_event_gateway.cursor import COMPLETE, START, CursorError, Position
from dtq_event_gateway.filters import SHORT_MAX, FilterError, parse_filter
from dtq_event_gateway.replay import Gap, StreamInfo


def test_cursor_round_trip_is_url_safe() -> None:
    positions = {
        "_": START,
        "emails": Position(1700000000123, 4),
        "q-1.x_y": Position(1700000000123, 0, 2),
        "hot~3": Position(5, 1),  # a partition: its name holds the separator
        "12": Position(7, 0),  # a queue named like a partition number
    }
    text = cursor.encode(positions)
    assert text == ("1~_~0-0~emails~1700000000123-4~q-1.x_y~1700000000123-0.2~hot~3~5-1~12~7-0")
    assert quote(text, safe="") == text  # unreserved characters only
    assert cursor.decode(text) == positions
    assert cursor.decode(cursor.encode({})) == {}


@pytest.mark.parametrize(
    "token",
    [
        "not a cursor!",
        "2~q~1-0",  # unknown version
        "1~q~1-0~q~2-0",  # stream twice
        "1~{bad}~1-0",  # not a queue name
        "1~q~1-x",  # not an id
        "1~q~99999999999999999999-0",  # above 2**64
        "1~q",  # incomplete
        "1~hot~3",  # a partition without a position
        "1~hot~64~1-0",  # no such partition
        "",
        "1~q~" + "1" * (cursor.MAX_CURSOR_CHARS),
    ],
)
def test_malformed_cursors_are_refused_with_a_reason(token: str) -> None:
    with pytest.raises(CursorError) as info:
        cursor.decode(token)
    assert str(info.value).startswith("cursor")


def test_positions_order_like_the_stream() -> None:
    entry = "1700000000123-4"
    first, second, last = (Position.after_event(entry, i, 3) for i in range(3))
    assert (first.delivered, second.delivered, last.delivered) == (1, 2, COMPLETE)
    assert START < Position(1, 0, 0) < first < second < last == Position.of_entry(entry)
    assert last < Position(1700000000123, 5, 0)
    assert str(second) == "1700000000123-4.2"
    assert str(last) == entry


def info(first: str | None, last: str, deleted: int | None) -> StreamInfo:
    return StreamInfo(
        first=None if first is None else Position.of_entry(first),
        last=Position.of_entry(last),
        deleted=deleted,
    )


@pytest.mark.parametrize(
    ("position", "stream", "expected"),
    [
        # Nothing ever deleted: nothing lost, from the start or from the middle.
        (START, info("1-0", "9-0", 0), None),
        (Position(5, 0), info("1-0", "9-0", 0), None),
        # Trimmed up to the entry before 4-0: positions before 4-0 may have lost events.
        (Position(4, 0, 0), info("4-0", "9-0", 3), None),
        (Position(5, 0, 1), info("4-0", "9-0", 3), None),
        (Position(3, 0, 1), info("4-0", "9-0", 3), Gap("retention", Position(4, 0, 0))),
        (Position(2, 0), info("4-0", "9-0", 3), Gap("retention", Position(4, 0, 0))),
        (START, info("4-0", "9-0", 3), Gap("retention", Position(4, 0, 0))),
        # Everything trimmed.
        (Position(2, 0), info(None, "9-0", 9), Gap("retention", Position(9, 0))),
        (Position(9, 0), info(None, "9-0", 9), None),
        # The stream is gone, or was recreated behind the client's position.
        (Position(2, 0), None, Gap("reset", START)),
        (START, None, None),
        (Position(12, 0), info("1-0", "9-0", 0), Gap("reset", START)),
        # Redis < 7 (no entries-added): judged by the first entry alone.
        (Position(3, 0), info("4-0", "9-0", None), Gap("retention", Position(4, 0, 0))),
        (Position(4, 0, 0), info("4-0", "9-0", None), None),
    ],
)
def test_retention_check(position: Position, stream: StreamInfo | None, expected: Gap) -> None:
    assert replay.check(position, stream) == expected
    if expected is not None and expected.reason == "retention":
        assert replay.check(expected.resume, stream) is None  # resuming never repeats a gap


def test_filters_parse_and_match() -> None:
    flt = parse_filter({"queue": ["a,b", "c"], "types": ["task.started,queue."]})
    assert flt.queues == {"a", "b", "c"}
    assert flt.follows("a")
    assert not flt.follows("d")
    assert not flt.follows("_")
    assert flt.matches("task.started", "a:" + "0" * 32)
    assert flt.matches("queue.paused", None)
    assert not flt.matches("task.succeeded", "a:" + "0" * 32)
    tid = "b:" + "1" * 32
    by_task = parse_filter({"task_id": [tid], "types": ["task.*"]})
    assert by_task.queues == {"b"}
    assert by_task.matches("task.queued", tid)
    assert not by_task.matches("task.queued", "b:" + "2" * 32)
    assert not by_task.matches("queue.paused", None)
    everything = parse_filter({})
    assert everything.queues is None
    assert everything.follows("_")
    assert everything.matches("worker.stale", None)


@pytest.mark.parametrize(
    ("params", "word"),
    [
        ({"queue": ["{bad}"]}, "queue"),
        ({"task_id": ["nope"]}, "task_id"),
        ({"task_id": ["a:" + "0" * 32], "queue": ["b"]}, "task_id"),
        ({"types": ["Task Started"]}, "types"),
        ({"queue": [",".join(f"q{i}" for i in range(101))]}, "queue"),
    ],
)
def test_bad_filters_name_the_parameter(params: dict[str, list[str]], word: str) -> None:
    with pytest.raises(FilterError) as exc:
        parse_filter(params)
    assert str(exc.value).startswith(word)


def test_every_event_type_and_prefix_that_exists_is_accepted() -> None:
    for t in EVENT_TYPES:
        assert parse_filter({"types": [t]}).matches(t, None)
    for prefix in ("task.", "task.*", "queue.*", "worker."):
        assert parse_filter({"types": [prefix]}).type_prefixes


@pytest.mark.parametrize("value", ["bogus", "task.succeded", "gap", "tsk.*", "task.x.", "queue"])
def test_an_unknown_event_type_or_empty_prefix_is_refused(value: str) -> None:
    with pytest.raises(FilterError) as exc:
        parse_filter({"types": ["task.queued", value]})
    assert str(exc.value).startswith(f"types: {value!r} is not an event type")
    assert all(t in str(exc.value) for t in EVENT_TYPES)
    assert len(exc.value.short) <= SHORT_MAX
    assert "docs/events.md" in exc.value.short


def test_every_event_type_written_is_known_and_documented() -> None:
    """The list the gateway checks filters against covers what the scripts and services
    write, so a real type is never refused; docs/events.md's table lists each one."""
    root = Path(__file__).resolve().parents[3]
    lua = root / "libs/dtq-core/src/dtq_core/protocol/lua"
    written = {
        m.group(1)
        for path in lua.glob("*.lua")
        for m in re.finditer(r"emit\([^,]+, *[^,]+, *'([a-z]+\.[a-z_]+)'", path.read_text())
    }
    # finish.lua emits 'task.' .. status for the outcomes of an attempt.
    written |= {f"task.{s}" for s in ("succeeded", "retrying", "dead", "failed", "cancelled")}
    # The events written from Python, by their builders (admin's pause/resume, the leader's
    # stale-worker sweep; audit actions such as "queue.pause" are not events).
    python = {
        "libs/dtq-core/src/dtq_core/protocol/events.py": (
            "queue.paused",
            "queue.resumed",
            "worker.stale",
        ),
    }
    # A workflow's events wait in its hash (field `ev`) until the leader publishes them:
    # wf_create.lua's workflow.started, and _lib.lua's wf_over 'workflow.' .. status.
    assert "'workflow.started'" in (lua / "wf_create.lua").read_text()
    assert "'workflow.' .. status" in (lua / "_lib.lua").read_text()
    written |= {f"workflow.{s}" for s in ("started", "succeeded", "failed", "cancelled")}
    for path, types in python.items():
        text = (root / path).read_text()
        assert all(f'"{t}"' in text for t in types)
        written |= set(types)
    assert len(written) == len(EVENT_TYPES)
    assert written == set(EVENT_TYPES)
    docs = (root / "docs/events.md").read_text()
    assert all(f"`{t}`" in docs for t in EVENT_TYPES)


def test_frames_splice_the_cursor_into_the_events_json() -> None:
    fields = {"type": "task.started", "ids": "a" * 32 + "," + "b" * 32, "tasks": "x,y"}
    fields |= {"att": "1,2", "w": "w1", "tr": "," + "c" * 32}  # only the second is traced
    events = expand_events("q", "1700000000123-0", fields)
    assert events[0].trace_id is None
    head, tail = frames.split(events[1])
    decoded = msgspec.json.decode(head + "CUR" + tail)
    assert decoded == {
        "type": "task.started",
        "cursor": "CUR",
        "ts": 1700000000.123,
        "queue": "q",
        "task_id": "q:" + "b" * 32,
        "task": "y",
        "attempt": 2,
        "worker": "w1",
        "reason": None,
        "data": None,
        "trace_id": "c" * 32,
    }
    tricky = Event(type='x"cursor":"', cursor="", ts=1.0, reason='"cursor":""')
    head, tail = frames.split(tricky)
    assert msgspec.json.decode(head + "C" + tail)["cursor"] == "C"
    assert frames.sse("gap", "C", "{}") == "id: C\nevent: gap\ndata: {}\n\n"
