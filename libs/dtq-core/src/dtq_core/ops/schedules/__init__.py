"""Cron and interval schedules: the stored definition, its validation, tick math and storage.

A schedule submits one task per *tick*. Definitions are JSON :class:`ScheduleSpec` values in
the hash ``Keys.schedules`` (field = schedule name); the scheduler leader fires them, and the
REST API and the CLI manage them through :class:`ScheduleStore`.

Ticks are the same on every replica, whoever computes them:

- an interval schedule ticks at whole multiples of ``every_s`` since the Unix epoch (so
  ``every_s=3600`` fires on the hour, and a new schedule first fires at its next tick, not at
  once);
- a cron schedule ticks at its cron times (standard five fields or an ``@hourly``-style alias)
  read in its IANA ``timezone`` (UTC by default), DST-correct: a local time the clock shows
  twice (fall back) fires once, at its first occurrence; a local time it skips (spring
  forward) fires once, at the first instant after the gap (the instant of the change: a
  02:30 tick in Europe/Paris on 2027-03-28 fires at 03:00 CEST), and every time in the gap
  fires there as one tick.

A tick is submitted with the idempotency key ``schedule:<name>:<tick in ms>``: a leader that
submits a tick and dies before recording it, and the next leader that submits it again, yield
one task (the second submit is an idempotent replay).

The hash ``Keys.schedules_state`` keeps one *watermark* per schedule (ms since the epoch,
Redis time): every tick at or before it has been handled (fired, skipped while paused, or it
lay before the schedule was first seen). Each pass lists the due ticks (after the watermark,
up to now) and the schedule's ``misfire`` policy picks those that fire
(:func:`~dtq_core.ops.schedules.ticks.fire_plan`). A tick is *missed* when a later one is due
too, or when it is more than ``DTQ_SCHEDULER_MISFIRE_GRACE_S`` old (no leader ran at its
time):

- ``latest`` (the default) fires the latest due tick only: a backlog of identical runs of the
  same job is rarely what anyone wants, and the one run that does happen sees the current
  state of the world;
- ``skip`` fires none of the missed ticks (the latest fires only if it is not missed) and
  goes on from the next one;
- ``all`` fires every due tick, oldest first, at most the latest ``misfire_cap``.

The watermark moves to each tick after it is handled, one tick at a time, so ``all`` keeps
the once-per-tick guarantee across a failover mid-backlog. A tick's task may be submitted
with a delay (``jitter_s``), fixed per tick by a hash of its idempotency key, so a replay is
the same request.

The hash ``Keys.schedules_last`` keeps how each schedule's latest tick went
(:class:`LastTick`: the task it fired, or why it was refused), so a schedule whose task no
worker runs is visible in the API, the CLI and the dashboard, not only in the leader's log.

The parts: :mod:`~dtq_core.ops.schedules.spec` (the definition, the last tick, their codecs),
:mod:`~dtq_core.ops.schedules.validation` (the rules), :mod:`~dtq_core.ops.schedules.ticks`
(tick math, pure) and :mod:`~dtq_core.ops.schedules.store` (Redis).
"""

from dtq_core.ops.schedules.spec import (
    DEFAULT_MISFIRE_CAP,
    MAX_EVERY_S,
    MAX_JITTER_S,
    MAX_MISFIRE_CAP,
    MIN_EVERY_S,
    MISFIRED,
    AuditFor,
    LastTick,
    Misfire,
    NextTick,
    ScheduleInfo,
    ScheduleNext,
    ScheduleSpec,
    TickOutcome,
    audit_detail,
    describe,
    encode,
)
from dtq_core.ops.schedules.store import ScheduleStore
from dtq_core.ops.schedules.ticks import (
    DUE_TICKS_LIMIT,
    due_limit,
    due_ticks,
    fire_plan,
    idempotency_key,
    jitter_delay,
    local_instant,
    next_fire,
    next_fire_at,
    next_fires,
    tick_ms,
    zone,
)
from dtq_core.ops.schedules.validation import decode, validate

__all__ = [
    "DEFAULT_MISFIRE_CAP",
    "DUE_TICKS_LIMIT",
    "MAX_EVERY_S",
    "MAX_JITTER_S",
    "MAX_MISFIRE_CAP",
    "MIN_EVERY_S",
    "MISFIRED",
    "AuditFor",
    "LastTick",
    "Misfire",
    "NextTick",
    "ScheduleInfo",
    "ScheduleNext",
    "ScheduleSpec",
    "ScheduleStore",
    "TickOutcome",
    "audit_detail",
    "decode",
    "describe",
    "due_limit",
    "due_ticks",
    "encode",
    "fire_plan",
    "idempotency_key",
    "jitter_delay",
    "local_instant",
    "next_fire",
    "next_fire_at",
    "next_fires",
    "tick_ms",
    "validate",
    "zone",
]
