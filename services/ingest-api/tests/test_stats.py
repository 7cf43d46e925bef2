"""``GET /api/v1/stats/history`` through a real socket: the per-minute figures the transitions
counted and the depth noted, one queue (its partitions added up) or every queue, each range's
length, and bad input refused with a problem (422, 404)."""

from __future__ import annotations

from typing import Any

from dtq_core.client import Client
from dtq_core.ops.admin import Admin
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Claimed, Finish, Held, RunTimes

from .test_operations import API, check, submit


def finish(c: Claimed, outcome: str) -> Finish:
    error = '{"attempt":1,"type":"E","message":"m"}' if outcome == "dead" else ""
    return Finish(Held(c.rand, c.priority, c.entry_id, c.lease), FinishOutcome(outcome), error)


def last_noted(values: list[int | None]) -> int | None:
    return next((v for v in reversed(values) if v is not None), None)


async def test_the_history_has_what_was_counted_and_noted(
    api: Any, worker: Any, sdk: Client
) -> None:
    await Admin(sdk).create_queue("emails")
    await Admin(sdk).configure("emails", partitions=2)
    await submit(api, "emails", 6)
    await submit(api, "other", 2)
    finished = 0
    for stored in ("emails", "emails~1"):  # the tasks went round-robin to both partitions
        got = await worker.claim(stored, 3)
        outcomes = [finish(c, "ok") for c in got[:-1]] + [finish(got[-1], "dead")]
        statuses = await sdk.scripts.finish(
            sdk.queue_keys(stored),
            outcomes,
            events_maxlen=1000,
            result_retention_ms=60_000,
            retention_ms=600_000,
            dlq_enabled=True,
            dlq_maxlen=100,
            run_times=RunTimes.of([0.5] * (len(got) - 1) + [2.0]),
        )
        assert statuses == ["succeeded"] * (len(got) - 1) + ["dead"]
        finished += len(got)
    assert finished == 6
    assert await Admin(sdk).note_depths() == 3

    r = await api.http.get(f"{API}/stats/history", params={"range": "1h", "queue": "emails"})
    assert r.status_code == 200, r.text
    h = r.json()
    assert (h["range"], h["queue"], h["queues"], h["step_s"]) == ("1h", "emails", ["emails"], 60)
    series = ("submitted", "succeeded", "retried", "failed", "expired", "run_count")
    for name in (*series, "run_total_s", "run_max_s", "waiting", "in_flight", "delayed"):
        assert len(h[name]) == 60, name
    assert [sum(h[name]) for name in series] == [6, 4, 0, 2, 0, 6]
    assert h["start_ms"] % 60_000 == 0
    assert h["start_ms"] + 59 * 60_000 <= h["as_of_ms"] < h["start_ms"] + 60 * 60_000
    assert sum(h["run_total_s"]) == 2 * 0.5 * 2 + 2 * 2.0
    assert max(v for v in h["run_max_s"] if v is not None) == 2.0
    assert last_noted(h["waiting"]) == 0  # everything submitted has run

    everything = (await api.http.get(f"{API}/stats/history")).json()
    assert (everything["range"], everything["queue"]) == ("1h", None)
    assert everything["queues"] == ["emails", "other"]
    assert sum(everything["submitted"]) == 8
    assert last_noted(everything["waiting"]) == 2


async def test_each_range_has_one_value_per_minute(api: Any, keys: Any) -> None:
    reader = api.client(keys.header("read"))  # a read key is enough
    for span, minutes in (("1h", 60), ("6h", 360), ("24h", 1440)):
        r = await reader.get(f"{API}/stats/history", params={"range": span})
        assert r.status_code == 200, r.text
        h = r.json()
        assert h["queues"] == []
        assert len(h["succeeded"]) == len(h["waiting"]) == minutes
        assert set(h["succeeded"]) == {0}
        assert set(h["waiting"]) == {None}


async def test_bad_input_is_refused_with_a_problem(api: Any) -> None:
    url = f"{API}/stats/history"
    for bad in ("2h", "", "1H", "24"):
        problem = check(await api.http.get(url, params={"range": bad}), 422, "validation_error")
        assert "range" in str(problem), problem
    check(await api.http.get(url, params={"queue": "a:b"}), 422, "invalid_name")
    check(await api.http.get(url, params={"queue": "nobody"}), 404, "queue_not_found")
