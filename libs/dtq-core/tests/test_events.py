"""Event fields are spelled once: EventField on the Python side, the ``emit`` helper and its
``EV_*`` names in ``lua/_lib.lua``; the builders write the entries readers decode, as before."""

from __future__ import annotations

import re

import pytest

from dtq_core.messages import EventField, expand_events
from dtq_core.protocol.events import queue_state_event, worker_stale_event
from dtq_core.protocol.library import SCRIPT_NAMES, lua_sources


def _code(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _emit() -> str:
    lib = _code(lua_sources()["_lib"])
    return lib[
        lib.index("local function emit(") : lib.index("\nend\n", lib.index("local function emit("))
    ]


def _detail_names() -> dict[str, str]:
    lib = _code(lua_sources()["_lib"])
    m = re.search(r"^local (EV_\w+(?:, EV_\w+)*) = (.*)$", lib, re.M)
    assert m, "lua/_lib.lua names the detail fields in EV_* locals"
    values = [v.strip().strip("'") for v in m.group(2).split(",")]
    return dict(zip(m.group(1).split(", "), values, strict=True))


def test_lua_writes_only_event_fields_and_python_the_rest() -> None:
    lua = set(
        re.findall(r"'(\w+)'(?:, |; args\[#args \+ 1\] = )(?:etype|table\.concat)", _emit())
    ) | set(_detail_names().values())
    python = {
        *queue_state_event(paused=True, actor="a"),
        *worker_stale_event("w1"),
    }
    assert lua == {
        EventField.TYPE,
        EventField.IDS,
        EventField.TASKS,
        EventField.ATTEMPTS,
        EventField.WORKER,
        EventField.REASON,
        EventField.PROGRESS,
        EventField.TRACES,
    }
    assert lua | python == set(EventField)


@pytest.mark.parametrize("name", ["_lib", *SCRIPT_NAMES])
def test_every_emit_names_its_detail_field_by_an_ev_local(name: str) -> None:
    code = _code(lua_sources()[name])
    calls = re.findall(r"^\s*emit\((.*)\)$", code, re.M)
    for call in calls:
        assert not re.search(r"\{\s*\w+ =", call), call  # no {field = value} extras
        args = [a.strip() for a in call.split(",")]
        # events_key, maxlen, etype, ids, names, attempts, detail, value, traces
        if len(args) > 6 and args[6] != "nil":
            assert args[6] in _detail_names(), call


def test_the_builders_write_the_entries_as_before() -> None:
    """Field order and spelling are the wire format (docs/events.md)."""
    assert list(queue_state_event(paused=True, actor="alice").items()) == [
        ("type", "queue.paused"),
        ("actor", "alice"),
    ]
    assert list(queue_state_event(paused=False, actor="bob").items()) == [
        ("type", "queue.resumed"),
        ("actor", "bob"),
    ]
    assert list(worker_stale_event("w-1").items()) == [("type", "worker.stale"), ("worker", "w-1")]


def test_the_readers_decode_what_the_builders_write() -> None:
    entry = {str(k): str(v) for k, v in queue_state_event(paused=True, actor="alice").items()}
    (paused,) = expand_events("q", "1-0", entry)
    assert (paused.type, paused.queue, paused.data) == ("queue.paused", "q", {"actor": "alice"})
    stale_entry = {str(k): str(v) for k, v in worker_stale_event("w-1").items()}
    (stale,) = expand_events(None, "2-0", stale_entry)
    assert (stale.type, stale.worker) == ("worker.stale", "w-1")
