"""Schedules in time zones (DST rules), misfire plans and jitter: pure tick math and rules."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from dtq_core.errors import ValidationError
from dtq_core.ops.schedules import (
    ScheduleSpec,
    due_ticks,
    fire_plan,
    jitter_delay,
    next_fire,
    next_fires,
    validate,
)
from dtq_core.tasks import TaskRegistry

PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


def cron(expr: str, tz: str, **fields: object) -> ScheduleSpec:
    return validate(ScheduleSpec(name="s", task="t.run", cron=expr, timezone=tz, **fields))  # type: ignore[arg-type]


def at(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


def local(ticks: list[float], tz: str) -> list[str]:
    return [datetime.fromtimestamp(t, ZoneInfo(tz)).isoformat() for t in ticks]


def test_a_cron_in_a_zone_fires_on_its_local_clock() -> None:
    s = cron("0 9 * * *", PARIS)
    assert local(next_fires(s, at(2027, 1, 10, 12), 2), PARIS) == [
        "2027-01-11T09:00:00+01:00",
        "2027-01-12T09:00:00+01:00",
    ]
    assert local(next_fires(s, at(2027, 7, 10, 12), 1), PARIS) == ["2027-07-11T09:00:00+02:00"]


def test_paris_spring_forward_a_missing_time_fires_once_at_the_end_of_the_gap() -> None:
    """2027-03-28: 02:00 CET jumps to 03:00 CEST. 02:30 fires at 03:00 CEST (01:00 UTC)."""
    daily = cron("30 2 * * *", PARIS)
    assert local(next_fires(daily, at(2027, 3, 26, 12), 3), PARIS) == [
        "2027-03-27T02:30:00+01:00",
        "2027-03-28T03:00:00+02:00",
        "2027-03-29T02:30:00+02:00",
    ]
    # Every time in the gap (02:00, 02:30) and 03:00 itself are one tick at 03:00.
    half_hourly = cron("*/30 * * * *", PARIS)
    assert local(due_ticks(half_hourly, at(2027, 3, 28, 0, 20), at(2027, 3, 28, 2, 0)), PARIS) == [
        "2027-03-28T01:30:00+01:00",
        "2027-03-28T03:00:00+02:00",
        "2027-03-28T03:30:00+02:00",
        "2027-03-28T04:00:00+02:00",
    ]
    assert next_fire(half_hourly, at(2027, 3, 28, 1, 0)) == at(2027, 3, 28, 1, 30)


def test_paris_fall_back_a_repeated_time_fires_once_at_its_first_occurrence() -> None:
    """2027-10-31: 03:00 CEST goes back to 02:00 CET; 02:00-03:00 happens twice."""
    daily = cron("30 2 * * *", PARIS)
    assert local(next_fires(daily, at(2027, 10, 30, 12), 2), PARIS) == [
        "2027-10-31T02:30:00+02:00",
        "2027-11-01T02:30:00+01:00",
    ]
    half_hourly = cron("*/30 * * * *", PARIS)
    expected = ["2027-10-31T02:00:00+02:00", "2027-10-31T02:30:00+02:00"]
    expected += ["2027-10-31T03:00:00+01:00"]
    assert local(next_fires(half_hourly, at(2027, 10, 30, 23, 40), 3), PARIS) == expected
    # Now in the second pass (02:10 CET): the first 02:30 was due already, the second is not.
    assert (
        local(due_ticks(half_hourly, at(2027, 10, 30, 23, 40), at(2027, 10, 31, 1, 10)), PARIS)
        == (expected[:2])
    )
    assert next_fire(half_hourly, at(2027, 10, 31, 1, 10)) == at(2027, 10, 31, 2, 0)


def test_new_york_both_changes() -> None:
    """2027-03-14 02:00 EST -> 03:00 EDT; 2027-11-07 02:00 EDT -> 01:00 EST."""
    assert local(next_fires(cron("30 2 * * *", NEW_YORK), at(2027, 3, 13, 12), 2), NEW_YORK) == [
        "2027-03-14T03:00:00-04:00",
        "2027-03-15T02:30:00-04:00",
    ]
    assert local(next_fires(cron("30 1 * * *", NEW_YORK), at(2027, 11, 6, 12), 2), NEW_YORK) == [
        "2027-11-07T01:30:00-04:00",
        "2027-11-08T01:30:00-05:00",
    ]
    hourly = cron("0 * * * *", NEW_YORK)
    day = due_ticks(hourly, at(2027, 11, 7, 4, 0), at(2027, 11, 8, 5, 0))
    assert len(day) == 24  # a 25-hour day, 24 local hours: 01:00 fires once


def test_utc_and_an_explicit_zone_agree_off_dst() -> None:
    utc = validate(ScheduleSpec(name="s", task="t", cron="0 8 * * 1-5"))
    zoned = cron("0 8 * * 1-5", "Etc/UTC")
    assert next_fires(utc, at(2027, 1, 1), 10) == next_fires(zoned, at(2027, 1, 1), 10)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "@daily", "timezone": "Mars/Olympus"}, "timezone", "not a known IANA time zone"),
        ({"cron": "@daily", "timezone": "../etc/passwd"}, "timezone", "not a known IANA"),
        ({"every_s": 60, "timezone": PARIS}, "timezone", "applies to cron schedules only"),
        ({"every_s": 60, "misfire": "sometimes"}, "misfire", "'skip', 'latest' or 'all'"),
        ({"every_s": 60, "misfire_cap": 0}, "misfire_cap", "from 1 to 1000"),
        ({"every_s": 60, "misfire_cap": 1001}, "misfire_cap", "from 1 to 1000"),
        ({"every_s": 7200, "jitter_s": 3601}, "jitter_s", "from 0 to 3600"),
        ({"every_s": 60, "jitter_s": -1}, "jitter_s", "from 0 to 3600"),
        ({"every_s": 60, "jitter_s": 60}, "jitter_s", r"less than the schedule's period \(60 s\)"),
        ({"cron": "*/5 * * * *", "jitter_s": 300}, "jitter_s", r"period \(300 s\)"),
    ],
)
def test_bad_zones_misfires_and_jitters_are_refused_naming_the_field(
    fields: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as exc:
        validate(ScheduleSpec(name="s", task="t.run", **fields))  # type: ignore[arg-type]
    assert exc.value.field == field


def test_jitter_is_fixed_per_tick_and_within_bounds() -> None:
    s = validate(ScheduleSpec(name="s", task="t", every_s=60, jitter_s=30))
    ticks = [at(2027, 1, 1) + 60 * k for k in range(500)]
    delays = [jitter_delay(s, t) for t in ticks]
    assert all(0 <= d < 30 for d in delays)
    assert delays == [jitter_delay(s, t) for t in ticks]  # the same on every replica
    assert min(delays) < 3  # spread over the range
    assert max(delays) > 27
    assert all(abs(d * 1000 - round(d * 1000)) < 1e-6 for d in delays)  # whole ms
    assert jitter_delay(validate(ScheduleSpec(name="s", task="t", every_s=60)), ticks[0]) == 0


def test_the_misfire_plan_after_a_downtime() -> None:
    now = at(2027, 1, 1, 12, 0, 40)
    due = [at(2027, 1, 1, 11, m) for m in range(57, 60)] + [at(2027, 1, 1, 12)]
    kind = {"name": "s", "task": "t", "cron": "* * * * *"}
    plans = {
        m: fire_plan(ScheduleSpec(**kind, misfire=m), due, now, grace_s=60)  # type: ignore[arg-type]
        for m in ("latest", "skip", "all")
    }
    assert plans == {"latest": [due[-1]], "skip": [due[-1]], "all": due}
    skip = ScheduleSpec(**kind, misfire="skip")  # type: ignore[arg-type]
    assert fire_plan(skip, due, now, grace_s=30) == []  # the latest is 40 s late: missed too
    assert fire_plan(skip, [], now, grace_s=30) == []


def test_the_sdk_declares_the_new_options() -> None:
    registry = TaskRegistry()
    registry.schedule(
        "nightly", task="t.run", cron="30 2 * * *", timezone=PARIS, misfire="all",
        misfire_cap=5, jitter_s=120,
    )  # fmt: skip
    (declared,) = registry.schedules
    converted = validate(ScheduleSpec.from_schedule(declared))
    assert (converted.timezone, converted.misfire, converted.misfire_cap, converted.jitter_s) == (
        PARIS, "all", 5, 120,
    )  # fmt: skip


@pytest.mark.parametrize("expr", ["*/30 * * * *", "30 2 * * *", "0 * * * *", "15 1-3 * * *"])
@pytest.mark.parametrize(
    ("tz", "day"),
    [
        (PARIS, (2027, 3, 28)),
        (PARIS, (2027, 10, 31)),
        (NEW_YORK, (2027, 3, 14)),
        (NEW_YORK, (2027, 11, 7)),
    ],
)
def test_next_fire_and_due_ticks_agree_around_a_change(
    expr: str, tz: str, day: tuple[int, int, int]
) -> None:
    """What the API shows next is what the leader fires: from every start, the first due tick
    is ``next_fire``; due ticks are strictly increasing (one tick per instant)."""
    s = cron(expr, tz)
    start = at(*day) - 3 * 3600
    for k in range(0, 30 * 60, 11):
        after = start + k * 60 + 0.5
        due = due_ticks(s, after, after + 2 * 86400, limit=100)
        assert due[0] == next_fire(s, after)
        assert all(a < b for a, b in itertools.pairwise(due))
