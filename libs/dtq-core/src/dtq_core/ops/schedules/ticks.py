"""Tick math (pure): when a schedule ticks, in its time zone; which ticks are due and which of
them fire (the misfire policy); a tick's jitter and its identity (see
:mod:`dtq_core.ops.schedules`)."""

from __future__ import annotations

import functools
import hashlib
import math
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import (  # type: ignore[import-untyped]  # croniter ships no type hints
    croniter,
)

from dtq_core.ops.schedules.spec import ScheduleSpec

DUE_TICKS_LIMIT = 100
"""At most this many missed ticks are listed by default (cron ticks are found one by one)."""

_LOCAL_STEPS = 100_000
"""Bound of the local times tried for one tick (those a DST change folds away are skipped)."""


def tick_ms(tick: float) -> int:
    """A tick as whole milliseconds since the epoch (its identity in keys and state)."""
    return round(tick * 1000)


def idempotency_key(name: str, tick: float) -> str:
    """The idempotency key of one tick: the same on every replica."""
    return f"schedule:{name}:{tick_ms(tick)}"


@functools.lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises:
        ValueError: no such zone in this host's tz database.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def _every_ms(spec: ScheduleSpec) -> int:
    if spec.every_s is None:
        raise ValueError(f"schedule {spec.name!r} has neither cron nor every_s")
    return max(1, round(spec.every_s * 1000))


def local_instant(wall: datetime, tz: ZoneInfo) -> float:
    """The instant (seconds since the epoch) a naive local time ``wall`` fires at in ``tz``.

    A time the clock shows twice (a fall-back day) fires at its first occurrence. A time it
    never shows (in a spring-forward gap) fires at the first instant after the gap, the
    instant of the change (02:30 in Europe/Paris on 2027-03-28 fires at 03:00 CEST,
    01:00 UTC), once: every time in the gap fires there, as one tick.
    """
    first = wall.replace(tzinfo=tz)  # fold=0: the earlier of two occurrences
    ts = first.timestamp()
    if datetime.fromtimestamp(ts, tz).replace(tzinfo=None) == wall:
        return ts
    # In a gap: fold=1 reads it with the offset after the change (an instant before it),
    # fold=0 with the offset before (an instant after it). The change lies between.
    lo, hi = math.floor(wall.replace(tzinfo=tz, fold=1).timestamp()), math.ceil(ts)
    after = datetime.fromtimestamp(hi, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return float(hi)


def _past_fold(local: datetime) -> timedelta:
    """How far past ``local``'s local time the local times that first occurred before it can
    reach: the shift of a repeated hour when ``local`` is in its second pass, else 0 (an upper
    bound: the times past the repeated hour are filtered by the caller)."""
    if not local.fold:
        return timedelta(0)
    first, second = local.replace(fold=0).utcoffset(), local.utcoffset()
    return first - second if first is not None and second is not None else timedelta(0)


def _local_next(expr: str, tz: ZoneInfo, after_ts: float) -> float:
    # From ``after_ts``'s own local time: in the second pass of a repeated hour, the local
    # times up to its end first occurred before ``after_ts`` and are skipped one by one.
    it = croniter(expr, datetime.fromtimestamp(after_ts, tz).replace(tzinfo=None))
    for _ in range(_LOCAL_STEPS):
        tick = local_instant(it.get_next(datetime), tz)
        if tick > after_ts:  # a time repeated or folded into a gap may map at or before it
            return tick
    raise ValueError(f"cron {expr!r} has no tick after {after_ts} in {tz.key}")


def _local_due(expr: str, tz: ZoneInfo, after_ts: float, now_ts: float, limit: int) -> list[float]:
    now = datetime.fromtimestamp(now_ts, tz)
    # Start the backward walk after the local times that first occurred before now.
    start = now.replace(tzinfo=None) + _past_fold(now) + timedelta(milliseconds=1)
    it = croniter(expr, start)
    out: list[float] = []
    for _ in range(_LOCAL_STEPS):
        if len(out) >= limit:
            break
        tick = local_instant(it.get_prev(datetime), tz)
        if tick <= after_ts:
            break
        if tick > now_ts or (out and out[-1] == tick):  # not yet due, or one gap's tick again
            continue
        out.append(tick)
    out.reverse()
    return out


def next_fire(spec: ScheduleSpec, after_ts: float) -> float:
    """The first tick strictly after ``after_ts`` (seconds since the epoch): what the leader
    fires and what the API shows.

    Raises:
        ValueError: the cron expression never fires (validation refuses those), or the time
            zone is unknown to this host.
    """
    if spec.cron is not None:
        if spec.timezone == "UTC":
            return float(croniter(spec.cron.strip(), after_ts).get_next(float))
        return _local_next(spec.cron.strip(), zone(spec.timezone), after_ts)
    every = _every_ms(spec)
    return (math.floor(after_ts * 1000) // every + 1) * every / 1000


def next_fires(spec: ScheduleSpec, after_ts: float, count: int) -> list[float]:
    """The first ``count`` ticks strictly after ``after_ts`` (:func:`next_fire`, repeated)."""
    out: list[float] = []
    tick = after_ts
    for _ in range(count):
        tick = next_fire(spec, tick)
        out.append(tick)
    return out


def next_fire_at(spec: ScheduleSpec, now_ts: float) -> datetime | None:
    """When ``spec`` fires next after ``now_ts``: :func:`next_fire` as a UTC datetime; None
    while it is paused (it fires nothing) or when its cron expression never fires."""
    if spec.paused:
        return None
    try:
        return datetime.fromtimestamp(next_fire(spec, now_ts), tz=UTC)
    except ValueError:
        return None


def due_ticks(
    spec: ScheduleSpec, after_ts: float, now_ts: float, *, limit: int = DUE_TICKS_LIMIT
) -> list[float]:
    """Ticks ``t`` with ``after_ts < t <= now_ts``: the latest ``limit`` of them, oldest first.

    :func:`fire_plan` picks the ones that fire; the length tells how many were missed, up to
    ``limit``.
    """
    if now_ts <= after_ts or limit <= 0:
        return []
    if spec.cron is not None:
        if spec.timezone != "UTC":
            return _local_due(spec.cron.strip(), zone(spec.timezone), after_ts, now_ts, limit)
        # croniter's get_prev is strictly before its start; start 1 ms late to include now.
        it = croniter(spec.cron.strip(), now_ts + 0.001)
        out: list[float] = []
        while len(out) < limit:
            tick = float(it.get_prev(float))
            if tick <= after_ts:
                break
            out.append(tick)
        out.reverse()
        return out
    every = _every_ms(spec)
    after_ms, now_ms = math.floor(after_ts * 1000), math.floor(now_ts * 1000)
    last = now_ms // every
    first = max(after_ms // every + 1, last - limit + 1)
    return [k * every / 1000 for k in range(first, last + 1)]


def due_limit(spec: ScheduleSpec) -> int:
    """How many due ticks the leader lists for ``spec``: ``misfire_cap`` for ``all``."""
    return spec.misfire_cap if spec.misfire == "all" else DUE_TICKS_LIMIT


def fire_plan(spec: ScheduleSpec, due: list[float], now_ts: float, grace_s: float) -> list[float]:
    """Which of the ``due`` ticks (oldest first, from :func:`due_ticks`) fire, oldest first.

    A tick is *missed* when a later one is due too, or when it is more than ``grace_s`` old
    (``DTQ_SCHEDULER_MISFIRE_GRACE_S``). ``latest`` fires the latest due tick, missed or not;
    ``skip`` fires it only if it is not missed; ``all`` fires every due tick.
    """
    if not due:
        return []
    if spec.misfire == "all":
        return list(due)
    if spec.misfire == "skip" and now_ts - due[-1] > grace_s:
        return []
    return [due[-1]]


def jitter_delay(spec: ScheduleSpec, tick: float) -> float:
    """The delay (seconds, whole ms, in ``[0, jitter_s)``) the task of ``tick`` is submitted
    with: a hash of the tick's idempotency key, so every leader that submits the tick gives
    it the same delay (a replay is the same request) and schedules of one tick spread out."""
    if not spec.jitter_s:
        return 0.0
    digest = hashlib.sha256(idempotency_key(spec.name, tick).encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return math.floor(fraction * spec.jitter_s * 1000) / 1000
