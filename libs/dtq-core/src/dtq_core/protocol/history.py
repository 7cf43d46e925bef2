"""The per-minute history of every queue (pure): what is counted, where a minute's figures
live, and how the hashes read back become one column per figure.

Writers (lua/_lib.lua, "Per-minute history"): the transitions count, in the same atomic call
and once per call whatever its batch's size, the tasks submitted (``submit``), the attempts
that ended (``finish``: succeeded, retrying, dead or failed, with their run times; ``reclaim``:
dead or failed after a lost worker spent the attempt budget) and the tasks that expired
unstarted (``claim``, ``promote``). The scheduler leader notes each stored queue's depth once a
minute (``history_depth``).

Layout: one hash per stored queue (a partition is a stored queue of its own) and ten minutes,
``dtq:{q}:hist:<window>`` (:meth:`~dtq_core.protocol.keys.QueueKeys.history`), the window
being Redis time in seconds divided by 600; a field is a :class:`Metric`'s letter followed by
the minute's place in its window, ``0`` to ``9`` (``s3``: succeeded in the fourth minute). Ten
minutes of the eleven metrics are 110 fields: under Redis's default
``hash-max-listpack-entries`` (128), so each hash stays a compact listpack. A hash lives
:data:`TTL_S` from its first write, so every minute is kept for a day and a few minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

MINUTE_S = 60
WINDOW_MINUTES = 10
"""Minutes per hash."""
WINDOW_S = MINUTE_S * WINDOW_MINUTES
TTL_S = 86_400 + WINDOW_S + MINUTE_S
"""A hash's TTL from its first write (``PEXPIRE NX``): its last minute ends at most a window
after that write, so each minute is kept at least a day and a minute (lua/_lib.lua's
``HIST_TTL_S``, which a test compares with this)."""


class Metric(StrEnum):
    """One figure per minute; the value is the field's first letter."""

    SUBMITTED = "q"
    """Tasks accepted by a submit (queued or scheduled)."""
    SUCCEEDED = "s"
    RETRIED = "r"
    """Attempts that failed with attempts left (``task.retrying``)."""
    FAILED = "f"
    """Tasks that ended dead (in the DLQ) or failed (DLQ off), lost workers' included."""
    EXPIRED = "x"
    """Tasks whose TTL passed before they started."""
    RUN_COUNT = "n"
    """Ended attempts whose run time is counted (finish: succeeded, retried, failed)."""
    RUN_TOTAL_US = "t"
    """The sum of those run times (claim to outcome), µs."""
    RUN_MAX_US = "m"
    """The longest of them, µs."""
    WAITING = "d"
    """Tasks ready to run and waiting in groups, as the leader saw them once in the minute."""
    IN_FLIGHT = "i"
    DELAYED = "y"


SUMMED = frozenset(Metric) - {Metric.RUN_MAX_US}
"""Figures added up across partitions (and across queues); the longest run time is the
largest."""
SAMPLED = frozenset({Metric.WAITING, Metric.IN_FLIGHT, Metric.DELAYED})
_LONGEST = Metric.RUN_MAX_US.value
"""Figures noted by the leader: a minute it did not note has none (``None``), not 0."""


def minute_of(ms: int) -> int:
    """The minute (since the epoch) that a Redis time in ms falls in."""
    return ms // 1000 // MINUTE_S


def windows(first_minute: int, last_minute: int) -> range:
    """The windows (hashes) holding the minutes ``first_minute`` to ``last_minute``."""
    return range(first_minute // WINDOW_MINUTES, last_minute // WINDOW_MINUTES + 1)


def field_name(metric: Metric, minute: int) -> str:
    """The field of ``metric`` for ``minute`` (since the epoch) in its window's hash."""
    return f"{metric.value}{minute % WINDOW_MINUTES}"


@dataclass
class Columns:
    """One column per metric over ``count`` minutes from ``first_minute``, filled from the
    hashes of any number of stored queues (:meth:`add`): counts are summed, the longest run
    time is the largest, and a sampled figure stays ``None`` where no queue has it."""

    first_minute: int
    count: int
    values: dict[Metric, list[int | None]] = field(init=False)
    _columns: dict[str, list[int | None]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.values = {m: [None] * self.count for m in Metric}
        self._columns = {m.value: self.values[m] for m in Metric}

    def add(self, window: int, fields: Mapping[str, str]) -> None:
        """Add one hash's fields (window ``window``); fields outside the minutes are left.

        A day of every queue is a few hundred thousand fields: this loop is kept to dict
        look-ups and integer parsing."""
        offset = window * WINDOW_MINUTES - self.first_minute
        columns, count = self._columns, self.count
        for name, raw in fields.items():
            column = columns.get(name[:1])
            # A field this version writes is a letter and a digit; anything else is left.
            if column is None or len(name) != 2 or not "0" <= name[1] <= "9":
                continue
            i = offset + ord(name[1]) - ord("0")
            if not 0 <= i < count:
                continue
            value = int(raw)
            old = column[i]
            if old is None:
                column[i] = value
            elif name[0] == _LONGEST:
                column[i] = max(old, value)
            else:
                column[i] = old + value

    def counts(self, metric: Metric) -> list[int]:
        """A counted figure, 0 for a minute without it."""
        return [v or 0 for v in self.values[metric]]

    def sampled(self, metric: Metric) -> list[int | None]:
        """A sampled figure, ``None`` for a minute no note covers."""
        return list(self.values[metric])

    def seconds(self, metric: Metric, *, missing: float | None) -> list[float | None]:
        """A figure kept in µs, as seconds (``missing`` where there is none)."""
        return [missing if v is None else v / 1e6 for v in self.values[metric]]
