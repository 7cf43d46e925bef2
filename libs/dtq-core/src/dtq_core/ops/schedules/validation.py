"""The rules a stored schedule follows (:func:`validate`), with messages that name the
field and how to fix it, and :func:`decode`, which parses and validates in one step."""

from __future__ import annotations

import itertools
import math
import re

import msgspec
from croniter import (  # type: ignore[import-untyped]  # croniter ships no type hints
    CroniterError,
    croniter,
)

from dtq_core.errors import ValidationError
from dtq_core.names import PRIORITIES
from dtq_core.ops.schedules.spec import (
    MAX_EVERY_S,
    MAX_JITTER_S,
    MAX_MISFIRE_CAP,
    MIN_EVERY_S,
    ScheduleSpec,
    _decoder,
    _encoder,
)
from dtq_core.ops.schedules.ticks import zone
from dtq_core.protocol.submit import check_name

_CRON_FIELDS = 5


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


_ZONE_RE = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
_MISFIRES = ("skip", "latest", "all")
_PERIOD_SAMPLE = 64
"""Ticks of a cron expression whose shortest gap bounds its jitter."""


def _check_timezone(spec: ScheduleSpec) -> None:
    name: object = spec.timezone
    if name == "UTC":
        return
    if spec.cron is None:
        raise ValidationError(
            f"timezone {name!r} applies to cron schedules only: an interval schedule ticks at "
            "multiples of every_s since the epoch (leave timezone out, or give 'UTC')",
            field="timezone",
        )
    known = isinstance(name, str) and len(name) <= 64 and _ZONE_RE.fullmatch(name) is not None
    if known and name not in {"localtime", "posixrules", "Factory"}:
        try:
            zone(str(name))
        except ValueError:
            known = False
    if not known:
        raise ValidationError(
            f"timezone {name!r} is not a known IANA time zone (give a name of the tz "
            "database such as 'Europe/Paris', 'America/New_York' or 'UTC')",
            field="timezone",
        )


def _period_s(spec: ScheduleSpec) -> float:
    """The schedule's shortest gap between two ticks: ``every_s``, or the shortest of the
    first ticks of its cron expression (read in UTC from 2024-01-01)."""
    if spec.every_s is not None:
        return float(spec.every_s)
    it = croniter(str(spec.cron).strip(), 1704067200.0)
    ticks = [float(it.get_next(float)) for _ in range(_PERIOD_SAMPLE)]
    return min(b - a for a, b in itertools.pairwise(ticks))


def _check_misfire(spec: ScheduleSpec) -> None:
    if spec.misfire not in _MISFIRES:
        raise ValidationError(
            f"misfire must be 'skip', 'latest' or 'all', got {spec.misfire!r}", field="misfire"
        )
    cap: object = spec.misfire_cap
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_MISFIRE_CAP:
        raise ValidationError(
            f"misfire_cap must be an integer from 1 to {MAX_MISFIRE_CAP}, got {cap!r}",
            field="misfire_cap",
        )


def _check_jitter(spec: ScheduleSpec) -> None:
    jitter: object = spec.jitter_s
    if (
        isinstance(jitter, bool)
        or not isinstance(jitter, int | float)
        or not math.isfinite(jitter)
        or not 0 <= jitter <= MAX_JITTER_S
    ):
        raise ValidationError(
            f"jitter_s must be a number of seconds from 0 to {MAX_JITTER_S:g}, got {jitter!r}",
            field="jitter_s",
        )
    if jitter and jitter >= (period := _period_s(spec)):
        raise ValidationError(
            f"jitter_s {jitter:g} must be less than the schedule's period ({period:g} s), "
            "or a tick's task could run after the next tick's",
            field="jitter_s",
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
    _check_timezone(spec)
    _check_misfire(spec)
    _check_jitter(spec)
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
