"""Cron and interval schedules: the stored definition, its validation, tick math and storage.

A schedule submits one task per *tick*. Definitions are JSON :class:`ScheduleSpec` values in
the hash ``Keys.schedules`` (field = schedule name); the scheduler leader fires them, and the
REST API and the CLI manage them through :class:`ScheduleStore`.

Ticks are the same on every replica, whoever computes them:

- an interval schedule ticks at whole multiples of ``every_s`` since the Unix epoch (so
  ``every_s=3600`` fires on the hour, and a new schedule first fires at its next tick, not at
  once);
- a cron schedule ticks at its cron times in UTC (standard five fields or an ``@hourly``-style
  alias).

A tick is submitted with the idempotency key ``schedule:<name>:<tick in ms>``: a leader that
submits a tick and dies before recording it, and the next leader that submits it again, yield
one task (the second submit is an idempotent replay).

The hash ``Keys.schedules_state`` keeps one *watermark* per schedule (ms since the epoch,
Redis time): every tick at or before it has been handled (fired, skipped while paused, or it
lay before the schedule was first seen). When no leader ran for a while, only the latest
missed tick fires: a backlog of identical runs of the same job is rarely what anyone wants,
and the one run that does happen sees the current state of the world.

The hash ``Keys.schedules_last`` keeps how each schedule's latest tick went
(:class:`LastTick`: the task it fired, or why it was refused), so a schedule whose task no
worker runs is visible in the API, the CLI and the dashboard, not only in the leader's log.

The parts: :mod:`~dtq_core.ops.schedules.spec` (the definition, the last tick, their codecs),
:mod:`~dtq_core.ops.schedules.validation` (the rules), :mod:`~dtq_core.ops.schedules.ticks`
(tick math, pure) and :mod:`~dtq_core.ops.schedules.store` (Redis).
"""

from dtq_core.ops.schedules.spec import (
    MAX_EVERY_S,
    MIN_EVERY_S,
    TIMEZONES,
    AuditFor,
    LastTick,
    ScheduleInfo,
    ScheduleSpec,
    TickOutcome,
    audit_detail,
    describe,
    encode,
)
from dtq_core.ops.schedules.store import ScheduleStore
from dtq_core.ops.schedules.ticks import (
    DUE_TICKS_LIMIT,
    due_ticks,
    idempotency_key,
    next_fire,
    next_fire_at,
    tick_ms,
)
from dtq_core.ops.schedules.validation import decode, validate

__all__ = [
    "DUE_TICKS_LIMIT",
    "MAX_EVERY_S",
    "MIN_EVERY_S",
    "TIMEZONES",
    "AuditFor",
    "LastTick",
    "ScheduleInfo",
    "ScheduleSpec",
    "ScheduleStore",
    "TickOutcome",
    "audit_detail",
    "decode",
    "describe",
    "due_ticks",
    "encode",
    "idempotency_key",
    "next_fire",
    "next_fire_at",
    "tick_ms",
    "validate",
]
