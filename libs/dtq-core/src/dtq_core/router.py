"""Where a submit goes, and whether it may: the workers' routes (which queue runs which task)
and the queue registry, each cached for a few seconds so that a submit costs no extra round
trip.

A request that names no queue goes to the queue its task is registered on; a request whose
queue's live workers do not handle its task is refused (:class:`UnknownTaskError`, unless
DTQ_REJECT_UNKNOWN_TASKS=false), and so is a queue nobody created
(:class:`UnknownQueueError`, unless DTQ_REJECT_UNKNOWN_QUEUES=false, when the registry takes
new queues up to DTQ_MAX_QUEUES).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import cast

import msgspec
import redis.asyncio as aioredis

from dtq_core.errors import QueueLimitError, UnknownQueueError, ValidationError
from dtq_core.infra.connection import REDIS_DOWN, unavailable
from dtq_core.infra.settings import Settings
from dtq_core.messages import TaskRequest, TaskType
from dtq_core.names import valid_name
from dtq_core.protocol.argschema import check_call
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.routing import Routes, read_routes
from dtq_core.protocol.scripts import Scripts

ROUTES_TTL_S = 5.0
"""How long the client trusts its copy of the workers' routes and of the queue registry; a
miss (a task or queue it does not know) rereads them after half a second."""
ROUTES_RETRY_S = 0.5


class Router:
    """The routes and the registered queues one client checks its submits against."""

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, scripts: Scripts, settings: Settings
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts
        self.settings = settings
        self._routes = Routes()
        self._routes_at = -ROUTES_TTL_S
        self._known_queues: set[str] = set()
        self._known_queues_at = 0.0

    async def route(
        self,
        requests: Sequence[TaskRequest | Exception],
        *,
        args_given: Sequence[bool] | None = None,
    ) -> list[TaskRequest | Exception]:
        """Give each request without a queue its task's registered queue, and refuse those
        whose queue's live workers do not handle their task (:class:`UnknownTaskError`), or
        whose arguments do not fit the signature its worker published (:class:`ValidationError`,
        field ``args``).

        Args:
            args_given: per request, whether its arguments are all given (False: a workflow
                step that receives some from the steps before it; they are not checked).

        Raises:
            RedisUnavailableError: the routes could not be read.
        """
        if not self.settings.tasks.reject_unknown_tasks:
            return [
                r
                if isinstance(r, Exception) or r.queue is not None
                else msgspec.structs.replace(r, queue="default")
                for r in requests
            ]
        wanted = [r for r in requests if isinstance(r, TaskRequest)]
        if not wanted:
            return list(requests)
        try:
            routes = await self._fresh_routes(miss=False)
            if any(_misses(routes, r) for r in wanted):
                routes = await self._fresh_routes(miss=True)
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        out: list[TaskRequest | Exception] = []
        for i, r in enumerate(requests):
            if isinstance(r, Exception):
                out.append(r)
                continue
            queue = r.queue if r.queue is not None else routes.default_queue(r.task)
            routed = r if r.queue is not None else msgspec.structs.replace(r, queue=queue)
            # Malformed names are refused by prepare(), with the message about the name.
            refusal: Exception | None = (
                routes.refusal(r.task, queue) if names_valid(r.task, queue) else None
            )
            schema = routes.schemas.get(r.task)
            if refusal is None and schema is not None and (args_given is None or args_given[i]):
                why = check_call(schema, r.args, r.kwargs)
                if why is not None:
                    refusal = ValidationError(
                        f"task {r.task!r}: {why} (the signature its worker published: "
                        "GET /api/v1/task-types)",
                        field="args",
                    )
            out.append(refusal or routed)
        return out

    async def queue_for(self, task: str, queue: str | None, *, enforce: bool) -> str:
        """The queue a submit of ``task`` (into ``queue``, or none) goes to; ``enforce``
        refuses as a submit would. See :meth:`dtq_core.client.Client.route_for`."""
        routed = (await self.route([TaskRequest(task=task, queue=queue)], args_given=[False]))[0]
        if isinstance(routed, TaskRequest):
            resolved = cast(str, routed.queue)  # route() gave it one
        elif enforce:
            raise routed
        else:
            resolved = queue or self._routes.default_queue(task)
        if enforce and self.settings.queues.reject_unknown_queues and names_valid(task, resolved):
            refusal = (await self.admit([resolved])).get(resolved)
            if refusal is not None:
                raise refusal
        return resolved

    async def admit(self, queues: Iterable[str]) -> dict[str, Exception]:
        """Refusals of the queues a submit may not use: not in the queue registry (unless
        DTQ_REJECT_UNKNOWN_QUEUES=false, when the registry takes them up to DTQ_MAX_QUEUES).

        Known names are cached for ROUTES_TTL_S, so a submit costs no extra round trip and a
        queue an admin deleted is refused again within that time.
        """
        if time.monotonic() - self._known_queues_at > ROUTES_TTL_S:
            self._known_queues.clear()
            self._known_queues_at = time.monotonic()
        new = [q for q in queues if q not in self._known_queues]
        if not new:
            return {}
        # The queue registry is a global key: single-key commands, before the submit, so a
        # queue is always registered before it holds a task.
        async with self.redis.pipeline(transaction=False) as pipe:
            for q in new:
                await pipe.sismember(self.keys.queues, q)
            member = [bool(m) for m in await pipe.execute()]
        absent = [q for q, m in zip(new, member, strict=True) if not m]
        self._known_queues.update(q for q, m in zip(new, member, strict=True) if m)
        if not absent:
            return {}
        refused: dict[str, Exception] = {}
        if self.settings.queues.reject_unknown_queues:
            # A queue a live worker serves is deliberate, even if an admin deleted it since.
            served = (await self._fresh_routes(miss=True)).served
            refused = {q: unknown_queue(q) for q in absent if q not in served}
            absent = [q for q in absent if q in served]
            if not absent:
                return refused
        limit = self.settings.queues.max_queues
        flags = await self.scripts.register_queues(self.keys.queues, absent, limit)
        self._known_queues.update(q for q, ok in zip(absent, flags, strict=True) if ok)
        refused.update(
            (q, queue_limit(q, limit)) for q, ok in zip(absent, flags, strict=True) if not ok
        )
        return refused

    def forget(self, queue: str) -> None:
        """Drop ``queue`` from the cache of registered queues (it was deleted)."""
        self._known_queues.discard(queue)

    async def task_types(self) -> list[TaskType]:
        """The tasks the live workers run, by name, read now."""
        try:
            routes = await self._fresh_routes(miss=True)
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        return [
            TaskType(
                name=name,
                queue=routes.default_queue(name),
                queues=sorted(queues),
                args_schema=dict(routes.schemas[name]) if name in routes.schemas else None,
            )
            for name, queues in sorted(routes.handled.items())
        ]

    async def _fresh_routes(self, *, miss: bool) -> Routes:
        """The workers' routes, reread when older than ROUTES_TTL_S (or ROUTES_RETRY_S after a
        miss, so a worker that registered a moment ago is not refused)."""
        age = time.monotonic() - self._routes_at
        if age > ROUTES_TTL_S or (miss and age > ROUTES_RETRY_S):
            self._routes = await read_routes(self.redis, self.keys)
            self._routes_at = time.monotonic()
        return self._routes


def queue_limit(queue: str, limit: int) -> QueueLimitError:
    """The refusal of a new queue by a full queue registry."""
    return QueueLimitError(
        f"queue {queue!r} cannot be created: the queue registry holds DTQ_MAX_QUEUES={limit} "
        "queues; delete unused ones (DELETE /api/v1/queues/{q}, `dtq queue delete`) or raise "
        "the limit",
        queue=queue,
        limit=limit,
    )


def unknown_queue(queue: str) -> UnknownQueueError:
    """The refusal of a submit into a queue that is not in the queue registry."""
    return UnknownQueueError(
        f"queue {queue!r} does not exist: a queue exists once a worker serving it has "
        f"started, or an admin created it (POST /api/v1/queues, `dtq queue create {queue}`)",
        field="queue",
        queue=queue,
    )


def names_valid(task: object, queue: object) -> bool:
    """Whether both names are well-formed (a TaskRequest built in Python is not type-checked)."""
    return all(isinstance(n, str) and valid_name(n) for n in (task, queue))


def _misses(routes: Routes, request: TaskRequest) -> bool:
    """Whether ``routes`` would refuse ``request`` or lacks its task (worth a reread)."""
    queue = request.queue if request.queue is not None else routes.default_queue(request.task)
    return request.task not in routes.declared or routes.refusal(request.task, queue) is not None
