"""A queue's configuration as Redis stores it, and the checks of its values (the pure part of
:mod:`dtq_core.ops.admin.config`, which reads and writes it; ``registry.queue`` checks a
declaration with it). docs/flow-control.md says what each setting means."""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from dtq_core.errors import ValidationError
from dtq_core.protocol.fields import MetaField

MAX_DEPTH_CAP = 1_000_000_000
MAX_CONCURRENCY = 100_000
MAX_RATE_PER_S = 1_000_000.0
MAX_BURST = 100_000
_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
RATE_PATTERN = r"^([0-9]{1,9}(?:\.[0-9]{1,6})?)/([smhd])$(?!\n)"
"""A rate: a number of tasks, ``/`` and a period (second, minute, hour, day)."""
_RATE_RE = re.compile(RATE_PATTERN)


class Unset:
    """A setting not given: left as Redis has it (``None`` clears one)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


class QueueConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's configuration as stored in Redis (``None``: not set)."""

    partitions: int = 1
    """Partitions the queue is split into (docs/scaling.md, "Partitioned queues")."""
    max_depth: int | None = None
    """Waiting tasks (delayed included) the queue admits; ``None``: DTQ_MAX_QUEUE_DEPTH."""
    rate: str | None = None
    """Tasks started per period across every worker, ``<n>/<s|m|h|d>`` (``100/s``)."""
    burst: int | None = None
    """Starts the rate lets through at once after a quiet time (default: a tenth of a second's
    worth, at least 1)."""
    concurrency: int | None = None
    """Tasks of the queue running at once across every worker."""
    group_concurrency: int | None = None
    """Tasks of one group running at once (docs/flow-control.md, "Groups")."""
    group_rate: str | None = None
    """Tasks of one group started per period, ``<n>/<s|m|h|d>``."""


SETTINGS = ("max_depth", "rate", "burst", "concurrency", "group_concurrency", "group_rate")
"""The limits a queue may set (each ``None``: not set)."""


def parse_rate(value: object, field: str = "rate") -> float:
    """Tasks per second of a rate ``<n>/<s|m|h|d>``.

    Raises:
        ValidationError: not a rate, 0, or above MAX_RATE_PER_S.
    """
    match = _RATE_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValidationError(
            f"{field} must look like 100/s, 6000/m, 10/h or 500/d, got {value!r}", field=field
        )
    per_s = float(match.group(1)) / _PERIODS[match.group(2)]
    if not 0 < per_s <= MAX_RATE_PER_S:
        raise ValidationError(
            f"{field} must be above 0 and at most {MAX_RATE_PER_S:.0f}/s, got {value!r}",
            field=field,
        )
    return per_s


def _bounded(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(
            f"{field} must be an integer from {low} to {high}, got {value!r}", field=field
        )
    return value


def default_burst(per_s: float) -> int:
    """A tenth of a second's worth of starts, at least 1."""
    return max(1, math.ceil(per_s / 10))


def checked(
    current: QueueConfig,
    *,
    max_depth: Any = UNSET,
    rate: Any = UNSET,
    burst: Any = UNSET,
    concurrency: Any = UNSET,
    group_concurrency: Any = UNSET,
    group_rate: Any = UNSET,
) -> QueueConfig:
    """``current`` with the given settings (UNSET: kept, None: cleared), each checked.

    Raises:
        ValidationError: a value out of range; nothing is written.
    """
    changes: dict[str, Any] = {}
    if max_depth is not UNSET:
        changes["max_depth"] = (
            None if max_depth is None else _bounded("max_depth", max_depth, 0, MAX_DEPTH_CAP)
        )
    if rate is not UNSET:
        if rate is not None:
            parse_rate(rate)
        changes["rate"] = rate
    if burst is not UNSET:
        changes["burst"] = None if burst is None else _bounded("burst", burst, 1, MAX_BURST)
    if concurrency is not UNSET:
        changes["concurrency"] = (
            None
            if concurrency is None
            else _bounded("concurrency", concurrency, 1, MAX_CONCURRENCY)
        )
    if group_concurrency is not UNSET:
        changes["group_concurrency"] = (
            None
            if group_concurrency is None
            else _bounded("group_concurrency", group_concurrency, 1, MAX_CONCURRENCY)
        )
    if group_rate is not UNSET:
        if group_rate is not None:
            parse_rate(group_rate, "group_rate")
        changes["group_rate"] = group_rate
    out = msgspec.structs.replace(current, **changes)
    if out.burst is not None and out.rate is None:
        raise ValidationError("burst needs a rate", field="burst")
    return out


def limit_fields(config: QueueConfig, partitions: int) -> dict[str, str]:
    """One partition's share of each limit, as its meta hash holds them (absent: none)."""
    out: dict[str, str] = {}
    if config.max_depth is not None:
        out[MetaField.LIMIT_DEPTH] = str(
            config.max_depth if config.max_depth == 0 else math.ceil(config.max_depth / partitions)
        )
    if config.concurrency is not None:
        out[MetaField.LIMIT_CONCURRENCY] = str(math.ceil(config.concurrency / partitions))
    if config.rate is not None:
        per_s = parse_rate(config.rate)
        burst = config.burst if config.burst is not None else default_burst(per_s)
        out[MetaField.LIMIT_INTERVAL] = str(math.ceil(1_000_000 * partitions / per_s))
        out[MetaField.LIMIT_BURST] = str(max(1, math.ceil(burst / partitions)))
    # A group lives in one partition (producers place it by its name): not shared out.
    if config.group_concurrency is not None:
        out[MetaField.LIMIT_GROUP_CONCURRENCY] = str(config.group_concurrency)
    if config.group_rate is not None:
        per_s = parse_rate(config.group_rate, "group_rate")
        out[MetaField.LIMIT_GROUP_INTERVAL] = str(math.ceil(1_000_000 / per_s))
        out[MetaField.LIMIT_GROUP_BURST] = str(default_burst(per_s))
    return out


CONFIG_FIELDS = (
    MetaField.CONFIG_DEPTH,
    MetaField.CONFIG_RATE,
    MetaField.CONFIG_BURST,
    MetaField.CONFIG_CONCURRENCY,
    MetaField.CONFIG_GROUP_CONCURRENCY,
    MetaField.CONFIG_GROUP_RATE,
)
LIMIT_FIELDS = (
    MetaField.LIMIT_DEPTH,
    MetaField.LIMIT_CONCURRENCY,
    MetaField.LIMIT_INTERVAL,
    MetaField.LIMIT_BURST,
    MetaField.LIMIT_GROUP_CONCURRENCY,
    MetaField.LIMIT_GROUP_INTERVAL,
    MetaField.LIMIT_GROUP_BURST,
)


def config_from(partitions: int, values: list[str | None]) -> QueueConfig:
    """The configuration from partition 0's :data:`CONFIG_FIELDS` (in that order)."""
    depth, rate, burst, concurrency, group_concurrency, group_rate = values
    return QueueConfig(
        partitions=partitions,
        max_depth=int(depth) if depth is not None else None,
        rate=rate,
        burst=int(burst) if burst is not None else None,
        concurrency=int(concurrency) if concurrency is not None else None,
        group_concurrency=int(group_concurrency) if group_concurrency is not None else None,
        group_rate=group_rate,
    )
