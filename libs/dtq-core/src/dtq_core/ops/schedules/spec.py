"""What a schedule is: its stored definition (:class:`ScheduleSpec`), how its latest tick
went (:class:`LastTick`), their JSON codecs, and how a schedule is described to a person and in
the audit stream."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from dtq_core.ops import audit
from dtq_core.tasks import Schedule

MIN_EVERY_S = 1.0
"""Shortest interval: the leader checks schedules a few times a second, so a shorter
interval would not fire on time anyway."""

MAX_EVERY_S = 366 * 86400.0
"""Longest interval: a year and a day (a longer one is better written as cron)."""

MAX_JITTER_S = 3600.0
"""Longest jitter: an hour (and always less than the schedule's period)."""

MAX_MISFIRE_CAP = 1000
"""Most missed ticks ``misfire="all"`` fires after a downtime."""

DEFAULT_MISFIRE_CAP = 100

Misfire = Literal["skip", "latest", "all"]
"""What a schedule does with the ticks it missed while no scheduler led (see
:mod:`dtq_core.ops.schedules`)."""


class ScheduleSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One schedule: which task to submit, where, and when.

    Exactly one of ``cron`` and ``every_s`` is set.

    Attributes:
        name: the schedule's name (the pattern of queue and task names).
        task: the task name submitted on each tick.
        queue: the queue it is submitted to.
        cron: a five-field cron expression (``*/5 * * * *``) or an alias (``@hourly``), read
            in ``timezone``.
        every_s: an interval in seconds (at least 1), ticking at multiples since the epoch.
        args, kwargs: the task's arguments (JSON).
        priority: 0-9, 9 runs first.
        paused: a paused schedule fires nothing; ticks that pass while paused are skipped.
        timezone: the IANA zone ``cron`` is read in (``Europe/Paris``); an interval schedule
            takes only ``UTC``.
        misfire: which ticks missed while no scheduler led fire: ``latest`` (the last one),
            ``skip`` (none) or ``all`` (each, oldest first, at most ``misfire_cap``).
        misfire_cap: the most missed ticks ``misfire="all"`` fires (1 to 1000; the latest).
        jitter_s: each tick's task is submitted with a delay in ``[0, jitter_s)``, fixed per
            tick (0 to 3600, and less than the period).
    """

    name: str
    task: str
    queue: str = "default"
    cron: str | None = None
    every_s: float | None = None
    args: list[Any] = msgspec.field(default_factory=list)
    kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    priority: int = 5
    paused: bool = False
    timezone: str = "UTC"
    misfire: Misfire = "latest"
    misfire_cap: int = DEFAULT_MISFIRE_CAP
    jitter_s: float = 0.0

    @classmethod
    def from_schedule(cls, schedule: Schedule) -> ScheduleSpec:
        """The spec of a schedule declared in code with ``registry.schedule(...)``."""
        return cls(
            name=schedule.name,
            task=schedule.task,
            queue=schedule.queue,
            cron=schedule.cron,
            every_s=schedule.every_s,
            args=list(schedule.args),
            kwargs=dict(schedule.kwargs),
            priority=schedule.priority,
            timezone=schedule.timezone,
            misfire=schedule.misfire,
            misfire_cap=schedule.misfire_cap,
            jitter_s=schedule.jitter_s,
        )


TickOutcome = Literal["fired", "replayed", "refused", "deferred", "skipped"]

MISFIRED = "misfired"
"""The ``code`` of a ``skipped`` tick that ``misfire="skip"`` did not fire."""


class LastTick(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How a schedule's latest handled tick went.

    Attributes:
        tick: the tick's time.
        at: when the leader handled it (Redis time).
        outcome: ``fired`` (a task was submitted), ``replayed`` (the tick's task existed
            already), ``refused`` (the submit was refused: ``code`` and ``reason`` say why; the
            tick is not retried), ``deferred`` (the queue was full; retried), ``skipped``
            (the schedule was paused, or, with ``code`` ``misfired``, it was missed and
            ``misfire`` is ``skip``).
        task_id: the task of a fired or replayed tick.
        code: the refusal's error code (``unknown_task``, ``unknown_queue``, ...), or
            ``misfired``.
        reason: the refusal's message, or what was missed.
    """

    tick: datetime
    at: datetime
    outcome: TickOutcome
    task_id: str | None = None
    code: str | None = None
    reason: str | None = None


class ScheduleInfo(ScheduleSpec, frozen=True, kw_only=True, omit_defaults=True):
    """A schedule as the API lists it: its definition, when it fires next, and how its latest
    tick went."""

    next_fire_at: Annotated[
        datetime | None,
        Meta(
            description="Its next tick after now (Redis time), as the scheduler computes it; "
            "null while it is paused."
        ),
    ]
    last_fired_at: Annotated[
        datetime | None,
        Meta(
            description="The time of its latest tick if that tick fired a task "
            "(`last_tick.outcome` `fired` or `replayed`); null otherwise."
        ),
    ]
    last_tick: LastTick | None = None


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(ScheduleSpec)
_last_decoder = msgspec.json.Decoder(LastTick)


def encode(spec: ScheduleSpec) -> bytes:
    """The stored JSON form of ``spec``."""
    return _encoder.encode(spec)


def describe(spec: ScheduleSpec) -> str:
    """A short human form: ``cron */5 * * * *``, ``cron 0 2 * * * Europe/Paris`` (a zone
    other than UTC) or ``every 30s``; then ``misfire=...`` and ``jitter=...s`` when not the
    defaults."""
    if spec.cron is not None:
        text = f"cron {spec.cron}"
        if spec.timezone != "UTC":
            text += f" {spec.timezone}"
    else:
        text = f"every {spec.every_s:g}s"
    if spec.misfire != "latest":
        text += f" misfire={spec.misfire}"
        if spec.misfire == "all":
            text += f"/{spec.misfire_cap}"
    if spec.jitter_s:
        text += f" jitter={spec.jitter_s:g}s"
    return text


def audit_detail(spec: ScheduleSpec) -> str:
    """What an audit entry says of a schedule: its name, task, timing, priority and
    arguments (cut to the audit's bound, with the SHA-256 of the whole arguments, so two
    versions can be told apart even when their start is the same)."""
    arguments = _encoder.encode([spec.args, spec.kwargs])
    digest = hashlib.sha256(arguments).hexdigest()[:16]
    head = (
        f"schedule={spec.name} task={spec.task} {describe(spec)} priority={spec.priority} "
        f"paused={str(spec.paused).lower()} args_sha256={digest} "
    )
    return audit.bounded(head + f"args={arguments.decode()}")


class NextTick(msgspec.Struct, frozen=True, kw_only=True):
    """One upcoming tick of a schedule."""

    at: Annotated[datetime, Meta(description="The tick (UTC).")]
    local: Annotated[
        str,
        Meta(
            description="The same instant on the schedule's clock, RFC 3339 with its offset "
            "(`2027-03-28T03:00:00+02:00`)."
        ),
    ]
    delay_s: Annotated[
        float, Meta(description="The delay its task is submitted with (its jitter), seconds.")
    ]


class ScheduleNext(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule's next ticks after now (Redis time), as the scheduler computes them."""

    name: str
    timezone: str
    paused: Annotated[
        bool, Meta(description="A paused schedule fires none of them until it is resumed.")
    ]
    items: list[NextTick]


AuditFor = Callable[[ScheduleSpec], audit.Fields]
"""Builds the audit entry of a change from the schedule it changed (read in the same step)."""
