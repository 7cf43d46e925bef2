"""Where a task may go: the queues live workers serve and the task names they handle there.

Every worker publishes its routes with each heartbeat, in its registry hash
(``dtq:worker:<id>``: the queues it serves and, per task it has, the queue its definition
names). That hash expires three heartbeat intervals after the last beat, so the routes of a
worker that died vanish by themselves, and a name several workers (or versions) register on
different queues is routed by the workers alive now. Producers read the routes at most every
few seconds (:class:`dtq_core.client.Client` caches them), never per submit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import msgspec
import redis.asyncio as aioredis

from dtq_core.errors import UnknownTaskError
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.workers import (
    QUEUES_FIELD,
    ROUTES_FIELD,
    SCHEMAS_FIELD,
    STARTED_AT_FIELD,
    WorkerRecord,
)

_ROUTING_FIELDS = (QUEUES_FIELD, ROUTES_FIELD, STARTED_AT_FIELD, SCHEMAS_FIELD)
"""What routing reads of each :class:`WorkerRecord` (HMGET: not the whole hash)."""

_decoder = msgspec.json.Decoder(dict[str, str])
_schemas = msgspec.json.Decoder(dict[str, dict[str, Any]])
HINT = "set DTQ_REJECT_UNKNOWN_TASKS=false to accept tasks before their workers start"


class Declared(Protocol):
    """What routing needs of a task definition (:class:`dtq_core.TaskDef`)."""

    @property
    def name(self) -> str: ...
    @property
    def queue(self) -> str: ...


def encode_routes(tasks: Iterable[Declared]) -> str:
    """The :data:`ROUTES_FIELD` value a worker with these task definitions publishes."""
    return msgspec.json.encode({t.name: t.queue for t in tasks}).decode()


def encode_schemas(schemas: Mapping[str, Mapping[str, Any]]) -> str:
    """The :data:`SCHEMAS_FIELD` value: each task's argument schema, by name."""
    return msgspec.json.encode(dict(schemas)).decode()


@dataclass(frozen=True, slots=True)
class Routes:
    """A snapshot of what the live workers run.

    Attributes:
        handled: task name -> the queues whose live workers have a handler for it.
        declared: task name -> the queue its definition names, as the most recently started
            live worker having it declares (a rolling upgrade that moves a task to another
            queue moves unqueued submits with its new workers).
    """

    handled: Mapping[str, frozenset[str]] = field(default_factory=dict)
    declared: Mapping[str, str] = field(default_factory=dict)
    served: frozenset[str] = frozenset()
    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """task name -> its argument schema, as the most recently started live worker having
    it publishes (absent: none published)."""

    def default_queue(self, task: str) -> str:
        """The queue a submit that names none goes to: the task's registered queue."""
        return self.declared.get(task, "default")

    def refusal(self, task: str, queue: str) -> UnknownTaskError | None:
        """Why ``task`` may not be submitted to ``queue`` (``None``: it may).

        Nothing is refused while no live worker has registered any task (tasks may be
        submitted before their workers start).
        """
        if not self.handled:
            return None
        queues = self.handled.get(task)
        if queues is not None and queue in queues:
            return None
        if queues is None:
            known = ", ".join(sorted(self.handled)[:20])
            return UnknownTaskError(
                f"no live worker has registered task {task!r}; registered tasks: {known} ({HINT})",
                field="task",
                queue=queue,
                queues=[],
            )
        where = ", ".join(sorted(queues))
        return UnknownTaskError(
            f"no live worker of queue {queue!r} handles task {task!r}; the workers of queue(s) "
            f"{where} do: submit it there, or leave the queue out to use the task's registered "
            f"queue ({HINT})",
            field="queue",
            queue=queue,
            queues=sorted(queues),
        )


async def read_routes(redis: aioredis.Redis, keys: Keys) -> Routes:
    """The routes of every live worker (two round trips, whatever the number of workers)."""
    ids = cast(list[str], await redis.zrange(keys.workers, 0, -1))
    if not ids:
        return Routes()
    async with redis.pipeline(transaction=False) as pipe:
        for worker_id in ids:
            await pipe.hmget(keys.worker(worker_id), _ROUTING_FIELDS)
        replies = cast(list[list[str | None]], await pipe.execute())
    handled: dict[str, set[str]] = {}
    declared: dict[str, tuple[int, str]] = {}
    schemas: dict[str, tuple[int, dict[str, Any]]] = {}
    every: set[str] = set()
    for reply in replies:
        record = WorkerRecord.from_fields(dict(zip(_ROUTING_FIELDS, reply, strict=True)))
        if record.routes is None:  # expired (a dead worker), or a worker of an older version
            continue
        try:
            tasks = _decoder.decode(record.routes)
        except msgspec.DecodeError:
            continue
        served = record.queues
        every.update(served)
        started_at = record.started_at
        for name, queue in tasks.items():
            handled.setdefault(name, set()).update(served)
            if name not in declared or started_at >= declared[name][0]:
                declared[name] = (started_at, queue)
        try:
            published = _schemas.decode(record.schemas) if record.schemas else {}
        except msgspec.DecodeError:
            published = {}
        for name, schema in published.items():
            if name not in schemas or started_at >= schemas[name][0]:
                schemas[name] = (started_at, schema)
    return Routes(
        handled={name: frozenset(qs) for name, qs in handled.items()},
        declared={name: queue for name, (_, queue) in declared.items()},
        served=frozenset(every),
        schemas={name: schema for name, (_, schema) in schemas.items()},
    )
