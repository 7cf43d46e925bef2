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
"""

from __future__ import annotations

import builtins
import hashlib
import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

import msgspec
import redis.asyncio as aioredis
import structlog
from croniter import (  # type: ignore[import-untyped]  # croniter ships no type hints
    CroniterError,
    croniter,
)
from redis.exceptions import WatchError

from dtq_core.errors import ValidationError
from dtq_core.infra.connection import answering
from dtq_core.names import PRIORITIES
from dtq_core.ops import audit
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.submit import check_name
from dtq_core.tasks import Schedule

log = structlog.get_logger()

MIN_EVERY_S = 1.0
"""Shortest interval: the leader checks schedules a few times a second, so a shorter
interval would not fire on time anyway."""

MAX_EVERY_S = 366 * 86400.0
"""Longest interval: a year and a day (a longer one is better written as cron)."""

TIMEZONES = ("UTC",)
"""Time zones a cron expression can be read in (only UTC so far)."""

DUE_TICKS_LIMIT = 100
"""At most this many missed ticks are listed (cron ticks are found one by one)."""

_CRON_FIELDS = 5


class ScheduleSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One schedule: which task to submit, where, and when.

    Exactly one of ``cron`` and ``every_s`` is set.

    Attributes:
        name: the schedule's name (the pattern of queue and task names).
        task: the task name submitted on each tick.
        queue: the queue it is submitted to.
        cron: a five-field cron expression (``*/5 * * * *``) or an alias (``@hourly``), UTC.
        every_s: an interval in seconds (at least 1), ticking at multiples since the epoch.
        args, kwargs: the task's arguments (JSON).
        priority: 0-9, 9 runs first.
        paused: a paused schedule fires nothing; ticks that pass while paused are skipped.
        timezone: the zone of ``cron``; only ``UTC`` is supported.
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
        )


TickOutcome = Literal["fired", "replayed", "refused", "deferred", "skipped"]


class LastTick(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How a schedule's latest handled tick went.

    Attributes:
        tick: the tick's time.
        at: when the leader handled it (Redis time).
        outcome: ``fired`` (a task was submitted), ``replayed`` (the tick's task existed
            already), ``refused`` (the submit was refused: ``code`` and ``reason`` say why; the
            tick is not retried), ``deferred`` (the queue was full; retried), ``skipped``
            (the schedule was paused).
        task_id: the task of a fired or replayed tick.
        code: the refusal's error code (``unknown_task``, ``unknown_queue``, ...).
        reason: the refusal's message.
    """

    tick: datetime
    at: datetime
    outcome: TickOutcome
    task_id: str | None = None
    code: str | None = None
    reason: str | None = None


class ScheduleInfo(ScheduleSpec, frozen=True, kw_only=True, omit_defaults=True):
    """A schedule as the API lists it: its definition and how its latest tick went."""

    last_tick: LastTick | None = None


_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(ScheduleSpec)
_last_decoder = msgspec.json.Decoder(LastTick)


_CRON_RANGES = (
    ("minute", 0, 59, "0-59"),
    ("hour", 0, 23, "0-23"),
    ("day-of-month", 1, 31, "1-31"),
    ("month", 1, 12, "1-12 or JAN-DEC"),
    ("day-of-week", 0, 7, "0-7 (0 and 7 are Sunday) or SUN-SAT"),
)
"""Name, bounds and allowed values of each of the five cron fields, in order."""


def _cron_field_error(expr: str, fields: list[str]) -> str | None:
    """What is wrong with the first bad field of a five-field ``expr``, or ``None``.

    croniter only says "not acceptable" for the whole expression; each field is tried alone
    (the others ``*``) so the message can name the field and its range.
    """
    for i, (name, low, high, allowed) in enumerate(_CRON_RANGES):
        alone = " ".join(f if j == i else "*" for j, f in enumerate(fields))
        if croniter.is_valid(alone):
            continue
        value = fields[i]
        numbers = [int(n) for n in re.findall(r"\d+", value.split("/")[0])]
        if any(not low <= n <= high for n in numbers):
            return (
                f"cron {expr!r} is invalid: {name} {value!r} is out of range (allowed: {allowed})"
            )
        return (
            f"cron {expr!r} is invalid: {name} {value!r} is not a valid field (allowed: {allowed},"
            " '*', lists '1,5', ranges '1-5' and steps '*/15')"
        )
    return None


def _check_cron(expr: str) -> None:
    expr = expr.strip()
    fields = expr.split()
    if len(fields) == _CRON_FIELDS and not croniter.is_valid(expr):
        message = _cron_field_error(expr, fields)
        if message is not None:
            raise ValidationError(message, field="cron")
    if not (expr.startswith("@") or len(fields) == _CRON_FIELDS) or not croniter.is_valid(expr):
        raise ValidationError(
            f"cron {expr!r} is invalid: give five fields (minute hour day-of-month month "
            "day-of-week, e.g. '*/5 * * * *') or an alias such as '@hourly' or '@daily'",
            field="cron",
        )
    try:
        croniter(expr, 0.0).get_next(float)
    except CroniterError:
        raise ValidationError(
            f"cron {expr!r} never fires (no date matches it)", field="cron"
        ) from None


def _check_every(every_s: object) -> None:
    # Typed as object: a spec built in Python is not type-checked by msgspec.
    if (
        isinstance(every_s, bool)
        or not isinstance(every_s, int | float)
        or not math.isfinite(every_s)
        or not MIN_EVERY_S <= every_s <= MAX_EVERY_S
    ):
        raise ValidationError(
            f"every_s must be a number of seconds from {MIN_EVERY_S:g} to {MAX_EVERY_S:g}, "
            f"got {every_s!r}",
            field="every_s",
        )


def validate(spec: ScheduleSpec, *, max_payload_bytes: int | None = None) -> ScheduleSpec:
    """Check every rule a stored schedule must follow.

    Args:
        spec: the schedule.
        max_payload_bytes: when given, the cap of the encoded ``args`` and ``kwargs``
            (``DTQ_MAX_PAYLOAD_BYTES``), so a schedule cannot store a task no tick could submit.

    Returns:
        ``spec`` itself, for chaining.

    Raises:
        InvalidNameError: the schedule, task or queue name breaks the name pattern.
        ValidationError: any other rule; the message says which and how to fix it.
    """
    check_name("schedule", spec.name)
    check_name("task", spec.task)
    check_name("queue", spec.queue)
    if (spec.cron is None) == (spec.every_s is None):
        raise ValidationError(
            f"schedule {spec.name!r} needs exactly one of cron and every_s", field="cron"
        )
    if spec.cron is not None:
        _check_cron(spec.cron)
    if spec.every_s is not None:
        _check_every(spec.every_s)
    if spec.timezone not in TIMEZONES:
        raise ValidationError(
            f"timezone {spec.timezone!r} is not supported: cron schedules run in UTC",
            field="timezone",
        )
    priority: object = spec.priority
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not 0 <= priority < PRIORITIES
    ):
        raise ValidationError(
            f"priority must be an integer from 0 to 9 (9 runs first), got {spec.priority!r}",
            field="priority",
        )
    args: object = spec.args
    kwargs: object = spec.kwargs
    if not isinstance(args, list):
        raise ValidationError("args must be a list", field="args")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ValidationError("kwargs must be an object with string keys", field="kwargs")
    try:
        size = len(_encoder.encode(spec.args)) + len(_encoder.encode(spec.kwargs))
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError(f"args and kwargs must be JSON: {exc}", field="args") from None
    if max_payload_bytes is not None and size > max_payload_bytes:
        raise ValidationError(
            f"args and kwargs take {size} bytes as JSON; the limit is "
            f"DTQ_MAX_PAYLOAD_BYTES={max_payload_bytes}",
            field="args",
        )
    return spec


def encode(spec: ScheduleSpec) -> bytes:
    """The stored JSON form of ``spec``."""
    return _encoder.encode(spec)


def decode(raw: str | bytes) -> ScheduleSpec:
    """Parse a schedule from JSON (a stored value or a request body) and validate it.

    Raises:
        ValidationError: malformed JSON, a wrong field type, or a broken rule.
    """
    try:
        spec = _decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValidationError(f"invalid schedule: {exc}") from None
    return validate(spec)


# -- tick math (pure) ----------------------------------------------------------------------


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


def describe(spec: ScheduleSpec) -> str:
    """A short human form: ``cron */5 * * * *`` or ``every 30s``."""
    if spec.cron is not None:
        return f"cron {spec.cron}"
    return f"every {spec.every_s:g}s"


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


AuditFor = Callable[[ScheduleSpec], audit.Fields]
"""Builds the audit entry of a change from the schedule it changed (read in the same step)."""


# -- storage -------------------------------------------------------------------------------


class ScheduleStore:
    """Schedule definitions and their watermarks in Redis (two global hashes).

    Every call is a single-key command (or a pipeline of them), so it works on a cluster.

    Args:
        redis: a client with ``decode_responses=True`` (what ``dtq_core.infra.connection`` makes).
        keys: the namespace's keys.
        max_payload_bytes: cap of a schedule's encoded args and kwargs on :meth:`put`.
    """

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, *, max_payload_bytes: int | None = None
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.max_payload_bytes = max_payload_bytes

    @answering
    async def put(self, spec: ScheduleSpec, *, audit_for: AuditFor | None = None) -> bool:
        """Create or replace a schedule.

        Args:
            audit_for: the audit entry to write in the same transaction.

        Returns:
            True when it is new, False when it replaced one.

        Raises:
            ValidationError: ``spec`` breaks a rule; nothing was written.
        """
        validate(spec, max_payload_bytes=self.max_payload_bytes)
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.hset(self.keys.schedules, spec.name, encode(spec))
            if audit_for is not None:
                await audit.append(pipe, self.keys.audit, audit_for(spec))
            added, *_ = await pipe.execute()
        return bool(added)

    @answering
    async def get(self, name: str) -> ScheduleSpec | None:
        """The schedule called ``name``, or None."""
        raw = await self.redis.hget(self.keys.schedules, name)
        return None if raw is None else _decoder.decode(raw)

    @answering
    async def list(self) -> builtins.list[ScheduleSpec]:
        """Every schedule, by name. A stored value that no longer decodes is logged and left
        out, so one bad entry cannot stop the others from firing."""
        stored = await self.redis.hgetall(self.keys.schedules)
        out: builtins.list[ScheduleSpec] = []
        for name in sorted(stored):
            try:
                out.append(_decoder.decode(stored[name]))
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.error("schedule_skipped", schedule=name, reason="undecodable", error=str(exc))
        return out

    @answering
    async def infos(self) -> builtins.list[ScheduleInfo]:
        """Every schedule with its last tick outcome, by name (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hgetall(self.keys.schedules)
            await pipe.hgetall(self.keys.schedules_last)
            stored, last = await pipe.execute()
        out: builtins.list[ScheduleInfo] = []
        for name in sorted(stored):
            try:
                spec = _decoder.decode(stored[name])
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.error("schedule_skipped", schedule=name, reason="undecodable", error=str(exc))
                continue
            out.append(_info(spec, last.get(name)))
        return out

    @answering
    async def info(self, name: str) -> ScheduleInfo | None:
        """The schedule called ``name`` with its last tick outcome, or None."""
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hget(self.keys.schedules, name)
            await pipe.hget(self.keys.schedules_last, name)
            raw, last = await pipe.execute()
        return None if raw is None else _info(_decoder.decode(raw), last)

    async def record_tick(self, name: str, last: LastTick) -> None:
        """Keep how the latest tick of ``name`` went (one field per schedule)."""
        await self.redis.hset(self.keys.schedules_last, name, _encoder.encode(last))

    @answering
    async def delete(self, name: str, *, audit_for: AuditFor | None = None) -> ScheduleSpec | None:
        """Remove a schedule, its watermark and its last tick; the removed schedule, or None if
        absent.

        Args:
            audit_for: the audit entry, from the removed schedule, to write in the same
                transaction.
        """
        return await self._changed(name, None, audit_for)

    @answering
    async def pause(self, name: str, *, audit_for: AuditFor | None = None) -> ScheduleSpec | None:
        """Stop a schedule from firing; returns the updated schedule, or None if absent."""
        return await self._changed(name, True, audit_for)

    @answering
    async def resume(self, name: str, *, audit_for: AuditFor | None = None) -> ScheduleSpec | None:
        """Let a paused schedule fire again from its next tick on (ticks that passed while it
        was paused are not fired); returns the updated schedule, or None if absent."""
        return await self._changed(name, False, audit_for)

    async def _changed(
        self, name: str, paused: bool | None, audit_for: AuditFor | None
    ) -> ScheduleSpec | None:
        """Pause (True), resume (False) or delete (None) schedule ``name`` and write its audit
        entry, in one transaction. Read-modify-write under WATCH: a concurrent put() is not
        overwritten by a stale copy, and the entry describes what was changed."""
        now_ms = await self.now_ms() if paused is False else 0
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(self.keys.schedules)
                    raw = await pipe.hget(self.keys.schedules, name)
                    if raw is None:
                        return None
                    spec = _decoder.decode(raw)
                    if paused is not None:
                        spec = msgspec.structs.replace(spec, paused=paused)
                    pipe.multi()  # type: ignore[no-untyped-call]  # unannotated in redis-py
                    if paused is None:
                        await pipe.hdel(self.keys.schedules, name)
                        await pipe.hdel(self.keys.schedules_state, name)
                        await pipe.hdel(self.keys.schedules_last, name)
                    else:
                        await pipe.hset(self.keys.schedules, name, encode(spec))
                    if paused is False:  # ticks that passed while paused are skipped
                        await pipe.hset(self.keys.schedules_state, name, now_ms)
                    if audit_for is not None:
                        await audit.append(pipe, self.keys.audit, audit_for(spec))
                    await pipe.execute()
                except WatchError:
                    continue
                return spec

    async def watermarks(self) -> dict[str, int]:
        """Every schedule's watermark in ms (see the module docstring)."""
        stored = await self.redis.hgetall(self.keys.schedules_state)
        return {str(name): int(value) for name, value in stored.items()}

    async def set_watermark(self, name: str, ms: int) -> None:
        await self.redis.hset(self.keys.schedules_state, name, ms)

    async def init_watermark(self, name: str, ms: int) -> int:
        """Set the watermark of a schedule seen for the first time (no-op if it has one).

        Returns:
            The watermark now stored.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hsetnx(self.keys.schedules_state, name, ms)
            await pipe.hget(self.keys.schedules_state, name)
            _, value = await pipe.execute()
        return int(value)

    async def now_ms(self) -> int:
        """Redis server time in ms (DESIGN rule 4: no host clock decides a tick)."""
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000


def _info(spec: ScheduleSpec, last: str | None) -> ScheduleInfo:
    tick = None
    if last is not None:
        try:
            tick = _last_decoder.decode(last)
        except (msgspec.ValidationError, msgspec.DecodeError):
            tick = None  # written by another version: shown as no outcome yet
    return ScheduleInfo(**msgspec.structs.asdict(spec), last_tick=tick)
