"""Tick math (pure): when a schedule ticks, which ticks are due, and the identity of a tick
(see :mod:`dtq_core.ops.schedules`)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from croniter import (  # type: ignore[import-untyped]  # croniter ships no type hints
    croniter,
)

from dtq_core.ops.schedules.spec import ScheduleSpec

DUE_TICKS_LIMIT = 100
"""At most this many missed ticks are listed (cron ticks are found one by one)."""


def tick_ms(tick: float) -> int:
    """A tick as whole milliseconds since the epoch (its identity in keys and state)."""
    return round(tick * 1000)


def idempotency_key(name: str, tick: float) -> str:
    """The idempotency key of one tick: the same on every replica."""
    return f"schedule:{name}:{tick_ms(tick)}"


def _every_ms(spec: ScheduleSpec) -> int:
    if spec.every_s is None:
        raise ValueError(f"schedule {spec.name!r} has neither cron nor every_s")
    return max(1, round(spec.every_s * 1000))


def next_fire(spec: ScheduleSpec, after_ts: float) -> float:
    """The first tick strictly after ``after_ts`` (seconds since the epoch, UTC).

    Raises:
        ValueError: the cron expression never fires (validation refuses those).
    """
    if spec.cron is not None:
        return float(croniter(spec.cron.strip(), after_ts).get_next(float))
    every = _every_ms(spec)
    return (math.floor(after_ts * 1000) // every + 1) * every / 1000


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

    The leader fires only the last one (see the module docstring); the length tells how many
    were missed, up to ``limit``.
    """
    if now_ts <= after_ts or limit <= 0:
        return []
    if spec.cron is not None:
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
