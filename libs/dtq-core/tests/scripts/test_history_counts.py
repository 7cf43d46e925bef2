"""The per-minute history the transitions count into (lua/_lib.lua, "Per-minute history";
:mod:`dtq_core.protocol.history`): a finish batch of mixed outcomes, run times, replays and
stale finishes, submits, reclaimed and expired tasks, the leader's depth note, the bound of
every history key, and a cost per call that does not grow with the batch.

Against a real redis-server; the ``h`` fixture (conftest.py) checks the invariants at rest
after each test. A test may straddle a minute: the figures are added up over every minute.
"""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

from dtq_core.infra.connection import server_ms
from dtq_core.protocol.history import TTL_S, WINDOW_S, Metric
from dtq_core.protocol.library import lua_sources
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Claimed, Finish, RunTimes
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.transitions import Harness, err, held, later_than


async def history_keys(h: Harness) -> list[str]:
    return sorted([k async for k in h.r.scan_iter(match=f"{h.qk.prefix}hist:*", count=1000)])


async def totals(h: Harness) -> dict[str, int]:
    """Each metric over every minute of the queue's history (the longest run time: the
    largest)."""
    out: dict[str, int] = {}
    for key in await history_keys(h):
        fields = cast(dict[str, str], await h.r.hgetall(key))
        for name, value in fields.items():
            metric = name[0]
            if metric == Metric.RUN_MAX_US:
                out[metric] = max(out.get(metric, 0), int(value))
            else:
                out[metric] = out.get(metric, 0) + int(value)
    return out


def finish_ok(c: Claimed) -> Finish:
    return Finish(held(c), FinishOutcome.OK, '"r"', "")


def counts(t: dict[str, int], *metrics: Metric) -> tuple[int, ...]:
    return tuple(t.get(m.value, 0) for m in metrics)


COUNTED = (Metric.SUBMITTED, Metric.SUCCEEDED, Metric.RETRIED, Metric.FAILED, Metric.RUN_COUNT)


async def test_a_finish_batch_of_mixed_outcomes_counts_each_once(h: Harness) -> None:
    for _ in range(7):
        await h.new(max_attempts=3)
    claimed = await h.claim()
    assert len(claimed) == 7
    assert counts(await totals(h), *COUNTED) == (7, 0, 0, 0, 0)  # submitted only
    a = [held(c) for c in claimed]
    statuses = await h.finish(
        Finish(a[0], "ok", '"r"', ""),
        Finish(a[1], "ok", "", ""),
        Finish(a[2], "ok", '"r"', ""),
        Finish(a[3], "retry", err(1), "60000"),
        Finish(a[4], "dead", err(1), ""),
        Finish(a[5], "dead", err(1), ""),
        Finish(a[6], "cancel", "", ""),
        # As the worker measures them: the six that ended by themselves.
        run_times=RunTimes.of([0.5, 0.25, 0.25, 1.0, 2.0, 0.0]),
    )
    assert statuses == ["succeeded"] * 3 + ["retrying", "dead", "dead", "cancelled"]
    t = await totals(h)
    # A cancelled attempt is not an outcome of its handler: no count.
    assert counts(t, *COUNTED) == (7, 3, 1, 2, 6)
    assert (t[Metric.RUN_TOTAL_US], t[Metric.RUN_MAX_US]) == (4_000_000, 2_000_000)


async def test_failed_without_a_dlq_counts_as_failed(h: Harness) -> None:
    await h.new()
    (c,) = await h.claim()
    failed = Finish(held(c), "dead", err(), "")
    assert await h.finish(failed, dlq_enabled=False, run_times=RunTimes.of([0.1])) == ["failed"]
    assert counts(await totals(h), Metric.FAILED, Metric.RUN_COUNT) == (1, 1)


async def test_run_times_are_summed_and_the_longest_kept_across_calls(h: Harness) -> None:
    for _ in range(4):
        await h.new()
    c = await h.claim()
    await h.finish(*(finish_ok(x) for x in c[:2]), run_times=RunTimes.of([2.0, 0.5]))
    await h.finish(*(finish_ok(x) for x in c[2:]), run_times=RunTimes.of([5.0, 1.0]))
    t = await totals(h)
    assert t[Metric.RUN_COUNT] == 4
    assert t[Metric.RUN_TOTAL_US] == 8_500_000
    # The longest of each minute: 5 s, unless the two calls fell in two minutes.
    assert t[Metric.RUN_MAX_US] == 5_000_000
    assert (await h.finish(run_times=RunTimes.of([9.0]))) == []  # an empty call counts nothing
    assert await totals(h) == t


async def test_a_finish_sent_again_or_stale_counts_nothing(h: Harness) -> None:
    await h.new()
    await h.new()
    c1, c2 = await h.claim()
    assert await h.finish(finish_ok(c1), run_times=RunTimes.of([1.0])) == ["succeeded"]
    before = await totals(h)
    assert counts(before, Metric.SUCCEEDED, Metric.RUN_COUNT) == (1, 1)
    # Its reply was lost: sent again, alone, then with another attempt's outcome.
    assert await h.finish(finish_ok(c1), run_times=RunTimes.of([1.0])) == ["succeeded"]
    assert await totals(h) == before
    reclaimed = await h.reclaim()  # c2's worker is presumed dead: the attempt is taken back
    assert reclaimed.requeued == 1
    assert await h.finish(finish_ok(c2), run_times=RunTimes.of([1.0])) == ["stale"]
    assert await totals(h) == before
    (c3,) = await h.claim()
    both = await h.finish(finish_ok(c1), finish_ok(c3), run_times=RunTimes.of([1.0, 3.0]))
    assert both == ["succeeded", "succeeded"]
    # The new outcome counts; the run times of a call that carried a replay are left out.
    assert counts(await totals(h), Metric.SUCCEEDED, Metric.RUN_COUNT) == (2, 1)


async def test_a_task_buried_by_the_reclaim_counts_as_failed(h: Harness) -> None:
    await h.new(max_attempts=1)
    await h.claim()
    result = await h.reclaim()
    assert result.buried == 1
    assert counts(await totals(h), Metric.FAILED, Metric.RUN_COUNT) == (1, 0)


async def test_expired_tasks_are_counted_by_the_claim_and_the_promotion(h: Harness) -> None:
    rands = [await h.new(ttl_s=0.05), await h.new(ttl_s=0.05, delay_s=0.01)]
    exp_ms = max([int((await h.task(r))["exp"]) // 1000 for r in rands])
    await wait_until(lambda: later_than(h, exp_ms), timeout=5, message="ttls passed")
    assert await h.claim() == []
    await h.promote()
    assert [await h.status(r) for r in rands] == ["expired", "expired"]
    assert counts(await totals(h), Metric.SUBMITTED, Metric.EXPIRED) == (2, 2)


async def test_the_leaders_depth_note_replaces_that_minutes_note(h: Harness) -> None:
    assert await h.scripts.history_depth(h.qk, waiting=5, in_flight=2, delayed=1) == 1
    assert await h.scripts.history_depth(h.qk, waiting=7, in_flight=3, delayed=0) == 1
    keys = await history_keys(h)
    fields = {k: v for key in keys for k, v in (await h.r.hgetall(key)).items()}
    waiting = {k: v for k, v in fields.items() if k.startswith(Metric.WAITING)}
    # Two notes: in one minute the second replaces the first; across a minute both stay.
    assert list(waiting.values()) in (["7"], ["5", "7"])
    assert sorted(v for k, v in fields.items() if k.startswith(Metric.IN_FLIGHT))[-1] == "3"


async def test_every_history_key_is_bounded_by_a_day_and_a_window(h: Harness) -> None:
    await h.new()
    (c,) = await h.claim()
    await h.ok(c)
    await h.scripts.history_depth(h.qk, waiting=0, in_flight=0, delayed=0)
    keys = await history_keys(h)
    assert keys
    for key in keys:
        ttl = await h.r.ttl(key)
        assert 86_400 + WINDOW_S <= ttl <= TTL_S, (key, ttl)
        window = int(key.rsplit(":", 1)[1])
        now_s = await server_ms(h.r) // 1000
        assert window in (now_s // WINDOW_S, now_s // WINDOW_S - 1)
        fields = await h.r.hgetall(key)
        assert all(re.fullmatch(r"[qsrfxntmdiy][0-9]", f) for f in fields), fields


def test_the_lua_ttl_and_window_are_the_python_ones() -> None:
    lib = lua_sources()["_lib"]
    m = re.search(r"local HIST_WINDOW_S, HIST_TTL_S = (\d+), (\d+)", lib)
    assert m is not None
    assert (int(m.group(1)), int(m.group(2))) == (WINDOW_S, TTL_S)
    listed = re.search(r"local HIST_COUNTS = \{(.*)\}", lib)
    assert listed is not None
    assert set(re.findall(r"'(\w)'", listed.group(1))) == {
        Metric.SUBMITTED,
        Metric.SUCCEEDED,
        Metric.RETRIED,
        Metric.FAILED,
        Metric.EXPIRED,
        Metric.RUN_COUNT,
        Metric.RUN_TOTAL_US,
    }


def _calls(stats: dict[str, Any], command: str) -> int:
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.standalone_only
@pytest.mark.parametrize("batch", [1, 50])
async def test_the_history_costs_a_few_commands_per_finish_call_whatever_its_size(
    h: Harness, batch: int
) -> None:
    for _ in range(batch):
        await h.new(max_attempts=3)
    claimed = await h.claim()
    kinds = [("ok", "", ""), ("retry", err(1), "60000"), ("dead", err(1), "")]
    outcomes = [Finish(held(c), *kinds[i % 3]) for i, c in enumerate(claimed)]
    await h.r.config_resetstat()
    await h.finish(*outcomes, run_times=RunTimes.of([0.001 * (i + 1) for i in range(batch)]))
    stats = await h.r.info("commandstats")
    # One HINCRBY per counted metric, one HGET (and HSET) for the longest run time, and the
    # EXPIRE of the first call of the minute (a new hash); the task hashes' own writes are
    # HGETs and HSETs too, so only what is the history's alone is counted here.
    assert _calls(stats, "hincrby") == (3 if batch == 1 else 5)  # s, n, t; then r, f too
    assert _calls(stats, "expire") <= 1
    assert _calls(stats, "hget") <= 1 + sum(1 for o in outcomes if o.outcome != "ok")
