"""What a client asks to see: ``queue``, ``task_id`` and ``types`` query parameters.

Each parameter may be repeated or hold comma-separated values; values of one parameter are
alternatives (OR) and the parameters combine with AND. A ``types`` value ending in ``.`` or
``.*`` is a prefix (``task.`` matches every task event). Control frames (``gap``, ``degraded``,
``recovered``, ``subscribed``) are not filtered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtq_core.keys import split_task_id, valid_name

MAX_VALUES = 100
"""Values per parameter: a filter is checked for every event, so it stays small."""

_TYPE_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}(\.[a-z0-9_-]{1,32}){0,3}(\.|\.\*)?")


class FilterError(ValueError):
    """A filter parameter with an invalid value; the message names it."""


@dataclass(frozen=True, slots=True)
class EventFilter:
    """A parsed filter; ``None`` means "any"."""

    queues: frozenset[str] | None = None
    task_ids: frozenset[str] | None = None
    types: frozenset[str] | None = None
    type_prefixes: tuple[str, ...] = ()

    def follows(self, stream: str) -> bool:
        """Whether events of ``stream`` (a queue name or ``*``) can match."""
        return self.queues is None or stream in self.queues

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
            task_queues.add(parts[0])
        followed = frozenset(task_queues) if followed is None else followed & task_queues
        if not followed:
            raise FilterError("task_id: none of these tasks belongs to the queues asked for")
    types = _values(params, "types")
    exact: set[str] = set()
    prefixes: list[str] = []
    for t in types or []:
        if _TYPE_RE.fullmatch(t) is None:
            raise FilterError(f"types: {t[:70]!r} is not an event type or a prefix like 'task.'")
        if t.endswith(".*"):
            prefixes.append(t[:-1])
        elif t.endswith("."):
            prefixes.append(t)
        else:
            exact.add(t)
    return EventFilter(
        queues=followed,
        task_ids=None if task_ids is None else frozenset(task_ids),
        types=None if types is None else frozenset(exact),
        type_prefixes=tuple(prefixes),
    )
