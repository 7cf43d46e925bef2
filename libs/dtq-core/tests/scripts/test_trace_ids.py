"""Trace ids on the lifecycle events: the submit, start and finish of a traced task carry the
trace of its headers (field ``tr``); a batch without a traced task writes no such field, and
a mixed batch keeps each id in its task's place. The record's ``trace_id`` comes from the same
headers (no field of its own).

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test (:mod:`dtq_devtools.testing.transitions`).
"""

from __future__ import annotations

from dtq_core.client import Client
from dtq_core.messages import EventField
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Finish
from dtq_devtools.testing.transitions import Harness, err, held

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"


def traceparent(trace_id: str) -> str:
    return '{"traceparent":"00-' + trace_id + '-00f067aa0ba902b7-01","tracestate":"k=v"}'


async def raw_fields(h: Harness) -> list[dict[str, str]]:
    return [fields for _, fields in await h.r.xrange(h.qk.events)]


async def test_an_untraced_batch_writes_no_trace_field(h: Harness) -> None:
    await h.submit(h.req(), h.req(delay_s=60))
    (c,) = await h.claim()
    await h.ok(c)
    entries = await raw_fields(h)
    assert [f[EventField.TYPE] for f in entries] == [
        "task.queued",
        "task.scheduled",
        "task.started",
        "task.succeeded",
    ]
    assert not any(EventField.TRACES in f for f in entries)
    assert all(e.trace_id is None for e in await h.events())


async def test_traced_tasks_carry_their_trace_on_every_event(h: Harness) -> None:
    # untraced, A, untraced, B: each id stays in its task's place.
    out = await h.submit(
        h.req(),
        h.req(),
        h.req(),
        h.req(),
        h.req(delay_s=60),
        headers=("", traceparent(TRACE_A), "", traceparent(TRACE_B), traceparent(TRACE_A)),
    )
    rands = [rand for _, rand, _ in out]
    claimed = await h.claim()
    assert len(claimed) == 4
    by_rand = {c.rand: c for c in claimed}
    await h.finish(
        Finish(held(by_rand[rands[0]]), FinishOutcome.OK, "", ""),
        Finish(held(by_rand[rands[1]]), FinishOutcome.OK, "", ""),
        Finish(held(by_rand[rands[2]]), FinishOutcome.RETRY, err(1), "60000"),
        Finish(held(by_rand[rands[3]]), FinishOutcome.DEAD, err(1), ""),
    )
    seen: dict[str, set[tuple[str, str | None]]] = {}
    for e in await h.events():
        assert e.task_id is not None
        seen.setdefault(e.task_id.partition(":")[2], set()).add((e.type, e.trace_id))
    assert seen[rands[0]] == {
        ("task.queued", None),
        ("task.started", None),
        ("task.succeeded", None),
    }
    assert seen[rands[1]] == {
        ("task.queued", TRACE_A),
        ("task.started", TRACE_A),
        ("task.succeeded", TRACE_A),
    }
    assert seen[rands[2]] == {
        ("task.queued", None),
        ("task.started", None),
        ("task.retrying", None),
    }
    assert seen[rands[3]] == {
        ("task.queued", TRACE_B),
        ("task.started", TRACE_B),
        ("task.dead", TRACE_B),
    }
    assert seen[rands[4]] == {("task.scheduled", TRACE_A)}
    # A trailing untraced task has no place in the list at all (the queued event: A, "", B).
    queued = next(f for f in await raw_fields(h) if f[EventField.TYPE] == "task.queued")
    assert queued[EventField.TRACES] == f",{TRACE_A},,{TRACE_B}"


async def test_the_record_gives_the_trace_of_its_headers(h: Harness, client: Client) -> None:
    out = await h.submit(h.req(), h.req(), headers=(traceparent(TRACE_A),))
    traced = await client.get(f"q:{out[0][1]}")
    plain = await client.get(f"q:{out[1][1]}")
    assert traced is not None
    assert plain is not None
    assert traced.trace_id == TRACE_A
    assert plain.trace_id is None
    assert traced.trace_url is None  # no DTQ_TRACE_URL here


async def test_a_record_links_its_trace_with_the_template(h: Harness, client: Client) -> None:
    ((_, rand, _),) = await h.submit(h.req(), headers=(traceparent(TRACE_B),))
    template = "http://127.0.0.1:16686/trace/{trace_id}"
    linked = Client(client.redis, client.settings.with_overrides(trace_url=template))
    record = await linked.get(f"q:{rand}")
    assert record is not None
    assert record.trace_url == f"http://127.0.0.1:16686/trace/{TRACE_B}"
