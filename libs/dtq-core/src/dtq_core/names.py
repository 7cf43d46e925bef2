"""Names and ids: the shape of queue and task names and of task ids, shared by every layer
(settings validate names with them, the key map puts them in keys, the SDK issues ids)."""

from __future__ import annotations

import re
from functools import lru_cache

PRIORITIES = 10
"""Priorities 0..9; 9 is claimed first."""

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
"""Queue and task names: no ``{``, ``}``, ``:`` or spaces, so they can sit inside key names
and hash tags, and no more than 64 characters."""

END = r"$(?!\n)"
r"""The end of a whole-string pattern in JSON Schema, msgspec and OpenAPI. Python's ``$`` also
matches before a final newline (``"ab\n"`` would pass), ``\Z`` means a plain ``Z`` to the
ECMA-262 regexes of JSON Schema tools; ``$(?!\n)`` is the true end of the string in both."""

ANCHORED_NAME_PATTERN = f"^{NAME_PATTERN}{END}"
""":data:`NAME_PATTERN` for a whole value (schemas, query and path parameters)."""

_NAME_RE = re.compile(NAME_PATTERN)
_RAND_RE = re.compile(r"[0-9a-f]{32}")

TASK_ID_SEPARATOR = ":"

PARTITION_SEPARATOR = "~"
"""Between a partitioned queue's name and a partition's number: ``hot~3`` is partition 3 of
``hot`` (partition 0 is ``hot`` itself). A queue name cannot hold it, so no queue is mistaken
for a partition, and it is unreserved in URLs, so a task id ``hot~3:<rand>`` needs no escaping
in ``/tasks/{id}``."""

MAX_PARTITIONS = 64
"""The most partitions one queue may have (each is a queue in the registry: DTQ_MAX_QUEUES
counts them)."""

_PARTITION_RE = re.compile(r"[1-9][0-9]?")


@lru_cache(maxsize=4096)
def valid_name(name: str) -> bool:
    """Whether ``name`` is a valid queue or task name (see :data:`NAME_PATTERN`)."""
    return _NAME_RE.fullmatch(name) is not None


@lru_cache(maxsize=4096)
def split_partition(name: str) -> tuple[str, int] | None:
    """A stored queue name as ``(queue, partition)``: ``"hot~3"`` is ``("hot", 3)``, ``"hot"``
    is ``("hot", 0)``; ``None`` when it is neither a queue name nor one of its partitions."""
    queue, sep, number = name.partition(PARTITION_SEPARATOR)
    if not valid_name(queue):
        return None
    if not sep:
        return queue, 0
    if _PARTITION_RE.fullmatch(number) is None or int(number) >= MAX_PARTITIONS:
        return None
    return queue, int(number)


def valid_stored_name(name: str) -> bool:
    """Whether ``name`` is a queue or a partition of one (what the queue registry holds)."""
    return split_partition(name) is not None


def logical_queue(name: str) -> str:
    """The queue a stored queue name belongs to (``"hot~3"`` -> ``"hot"``)."""
    return name.partition(PARTITION_SEPARATOR)[0]


def partition_name(queue: str, partition: int) -> str:
    """The stored name of ``queue``'s partition ``partition`` (0 is the queue itself)."""
    return queue if partition == 0 else f"{queue}{PARTITION_SEPARATOR}{partition}"


def split_task_id(task_id: str) -> tuple[str, str] | None:
    """Split a task id ``<queue>:<32 hex>`` into its queue and random part.

    The queue part is where the task is stored: a partition's name (``hot~3``) for a task of a
    partitioned queue.

    Returns:
        ``(queue, rand)``, or ``None`` when ``task_id`` is not a task id this server issued.
    """
    queue, sep, rand = task_id.partition(TASK_ID_SEPARATOR)
    if not sep or not valid_stored_name(queue) or _RAND_RE.fullmatch(rand) is None:
        return None
    return queue, rand


def make_task_id(queue: str, rand: str) -> str:
    """The public task id: it carries its queue, so a lookup needs no index key."""
    return f"{queue}{TASK_ID_SEPARATOR}{rand}"
