"""What a client asks to see: ``queue``, ``task_id`` and ``types`` query parameters.

Each parameter may be repeated or hold comma-separated values; values of one parameter are
alternatives (OR) and the parameters combine with AND. A ``types`` value ending in ``.`` or
``.*`` is a prefix (``task.`` matches every task event). A type that is not one of
:data:`dtq_core.messages.EVENT_TYPES`, or a prefix that matches none of them, is refused like a
bad queue name: a typo such as ``task.succeded`` would otherwise look like a quiet system.
Control frames (``gap``, ``degraded``, ``recovered``, ``subscribed``) are not filtered.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtq_core.messages import EVENT_TYPES
from dtq_core.names import logical_queue, split_task_id, valid_name

MAX_VALUES = 100
"""Values per parameter: a filter is checked for every event, so it stays small."""

_TYPE_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}(\.[a-z0-9_-]{1,32}){0,3}(\.|\.\*)?")


class FilterError(ValueError):
    """A filter parameter with an invalid value; the message names it.

    ``short`` is the same in at most :data:`SHORT_MAX` characters, for a WebSocket close
    reason (123 bytes at most), where the full message (which may list every valid value)
    does not fit.
    """

    def __init__(self, message: str, short: str | None = None) -> None:
        super().__init__(message)
        self.short = short if short is not None else message[:SHORT_MAX]


SHORT_MAX = 120


@dataclass(frozen=True, slots=True)
class EventFilter:
    """A parsed filter; ``None`` means "any"."""

    queues: frozenset[str] | None = None
    task_ids: frozenset[str] | None = None
    types: frozenset[str] | None = None
    type_prefixes: tuple[str, ...] = ()

    def follows(self, stream: str) -> bool:
        """Whether events of ``stream`` (a queue name or ``*``) can match."""
        return self.queues is None or logical_queue(stream) in self.queues

    def matches(self, event_type: str, task_id: str | None) -> bool:
        if self.task_ids is not None and task_id not in self.task_ids:
            return False
        if self.types is None:
            return True
        return event_type in self.types or event_type.startswith(self.type_prefixes)

    def describe(self) -> dict[str, list[str] | None]:
        """The filter for log lines (sorted, so equal filters log alike)."""
        types = None if self.types is None else sorted(self.types) + list(self.type_prefixes)
        return {
            "queues": None if self.queues is None else sorted(self.queues),
            "task_ids": None if self.task_ids is None else sorted(self.task_ids),
            "types": types,
        }


def _values(params: Mapping[str, Sequence[str]], name: str) -> list[str] | None:
    raw = params.get(name)
    if not raw:
        return None
    values = [v.strip() for item in raw for v in item.split(",") if v.strip()]
    if not values:
        return None
    if len(values) > MAX_VALUES:
        raise FilterError(f"{name}: at most {MAX_VALUES} values")
    return values


def parse_filter(params: Mapping[str, Sequence[str]]) -> EventFilter:
    """The filter a request's query parameters describe.

    Raises:
        FilterError: a queue name, task id or event type is invalid.
    """
    queues = _values(params, "queue")
    if queues is not None:
        for q in queues:
            if not valid_name(q):
                raise FilterError(f"queue: {q[:70]!r} is not a valid queue name")
    task_ids = _values(params, "task_id")
    followed = None if queues is None else frozenset(queues)
    if task_ids is not None:
        task_queues = set()
        for task_id in task_ids:
            parts = split_task_id(task_id)
            if parts is None:
                raise FilterError(f"task_id: {task_id[:80]!r} is not a dtq task id")
            task_queues.add(logical_queue(parts[0]))
        followed = frozenset(task_queues) if followed is None else followed & task_queues
        if not followed:
            raise FilterError("task_id: none of these tasks belongs to the queues asked for")
    types = _values(params, "types")
    exact, prefixes = _types(types or [])
    return EventFilter(
        queues=followed,
        task_ids=None if task_ids is None else frozenset(task_ids),
        types=None if types is None else frozenset(exact),
        type_prefixes=tuple(prefixes),
    )


def _types(values: list[str]) -> tuple[set[str], list[str]]:
    """The exact types and the prefixes (``task.*`` → ``task.``) of a ``types`` filter."""
    exact: set[str] = set()
    prefixes: list[str] = []
    for t in values:
        if _TYPE_RE.fullmatch(t) is None:
            raise _unknown_type(t)
        if t.endswith((".", ".*")):
            prefix = t.removesuffix("*")
            if not any(known.startswith(prefix) for known in EVENT_TYPES):
                raise _unknown_type(t)
            prefixes.append(prefix)
        elif t in EVENT_TYPES:
            exact.add(t)
        else:
            raise _unknown_type(t)
    return exact, prefixes


def _unknown_type(value: str) -> FilterError:
    """The refusal of a ``types`` value: every valid type, and the closest one if any."""
    shown = repr(value[:40])
    close = difflib.get_close_matches(value, EVENT_TYPES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return FilterError(
        f"types: {shown} is not an event type{hint}. Valid types: {', '.join(EVENT_TYPES)};"
        " or a prefix such as 'task.*' or 'queue.'",
        short=f"types: {shown} is not an event type"
        f"{hint or ' (valid: task.*, queue.*, worker.stale)'}; see docs/events.md",
    )
