"""The one submit path. Every submit, whoever makes it (the SDK's ``enqueue`` and
``enqueue_many``, the REST API, the ``dtq`` CLI, the scheduler's schedules), arrives here
through :meth:`dtq_core.Client.submit` as :class:`~dtq_core.messages.TaskRequest` values and
takes the same steps:

1. route: a request without a queue gets its task's registered queue; one nobody can run is
   refused (:class:`~dtq_core.router.Router`);
2. prepare: validate and encode each request (:func:`~dtq_core.protocol.submit.prepare`;
   nothing is written unless it passed), inside its trace span;
3. admit the queues (the queue registry), then send one submit call per queue and
   :data:`SUBMIT_CHUNK` tasks, all of them in one round trip, and read each task's answer.

A single request is traced as one ``send`` span, a batch as a ``send`` span around one
``create`` span per task (the OpenTelemetry messaging conventions for single and batch
operations); everything else is the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError

from dtq_core.errors import RedisUnavailableError, ValidationError
from dtq_core.infra import tracing
from dtq_core.infra.connection import REDIS_DOWN, unavailable
from dtq_core.infra.settings import Settings
from dtq_core.messages import SubmitResult, TaskRequest
from dtq_core.names import logical_queue
from dtq_core.partitions import Layouts, partition_depth
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Scripts
from dtq_core.protocol.submit import Prepared, new_rands, prepare, read_reply
from dtq_core.router import Router
from dtq_core.tasks import TaskDef

SUBMIT_CHUNK = 500
"""Tasks per submit call at most. A submit costs about 14 µs of Redis CPU per task
(docs/performance.md, "Where the time goes"), so a full call holds Redis for some 7 ms: long
enough to carry a batch in one call, short enough not to stall other clients for long."""


@dataclass(frozen=True, slots=True)
class Submission:
    """What one submit answered.

    Attributes:
        results: one per request, in order: the submitted task, or the error that refused it.
        trace_id: the trace of the submit's spans (``None`` when it was not traced).
    """

    results: list[SubmitResult | Exception]
    trace_id: str | None


def as_request(item: TaskRequest | Mapping[str, Any]) -> TaskRequest | ValidationError:
    """``item`` as a :class:`TaskRequest` (a mapping holds the same fields), or why not."""
    if isinstance(item, TaskRequest):
        return item
    try:
        return msgspec.convert(dict(item), TaskRequest)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        return ValidationError(f"invalid task request: {exc}")


class Submitter:
    """Routes, prepares and sends the submits of one client."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        scripts: Scripts,
        settings: Settings,
        router: Router,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts
        self.settings = settings
        self.router = router
        self.layouts = Layouts(redis, keys)

    async def submit_one(self, request: TaskRequest, defaults: TaskDef | None) -> Submission:
        """Submit one task in its own ``send`` span.

        Args:
            defaults: the registered definition whose ``max_attempts`` and ``timeout_s``
                apply when the request sets none.

        Raises:
            RedisUnavailableError: Redis did not answer (nothing is known to be written).
        """
        (routed,) = await self.router.route([request])
        if isinstance(routed, Exception):  # refused before any span starts
            return Submission([routed], None)
        with tracing.send_span(routed.task, cast(str, routed.queue)) as span:
            result: SubmitResult | Exception
            try:
                prepared = self._prepare(
                    routed, new_rands(1)[0], defaults, span.headers if span is not None else ""
                )
            except ValidationError as exc:
                result = exc
            else:
                (result,) = await self.send([prepared])
            if span is not None:
                span.done(result)
        return Submission([result], span.trace_id if span is not None else None)

    async def submit_many(
        self, requests: Sequence[TaskRequest | Exception], defaults: TaskDef | None
    ) -> Submission:
        """Submit a batch (tasks of several queues included) in one round trip; an exception
        among ``requests`` is that item's refusal already. Invalid items are refused before
        anything is written; the valid ones are submitted.

        Raises:
            RedisUnavailableError: Redis did not answer (nothing is known to be written).
        """
        routed = await self.router.route(requests)
        prepared: list[Prepared | Exception] = []
        with tracing.batch_span(routed) as batch:
            for req, rand in zip(routed, new_rands(len(routed)), strict=True):
                if isinstance(req, Exception):
                    prepared.append(req)
                    continue
                try:
                    if batch is None:  # the hot path: no context manager per task
                        prepared.append(self._prepare(req, rand, defaults))
                    else:
                        with batch.create(req.task, req.queue or "", rand) as headers:
                            prepared.append(self._prepare(req, rand, defaults, headers))
                except ValidationError as exc:
                    prepared.append(exc)
            valid = [p for p in prepared if isinstance(p, Prepared)]
            submitted = await self.send(valid) if valid else []
            if batch is not None:
                batch.done(submitted)
        sent = iter(submitted)
        results = [p if isinstance(p, Exception) else next(sent) for p in prepared]
        return Submission(results, batch.trace_id if batch is not None else None)

    def _prepare(
        self, request: TaskRequest, rand: str, defaults: TaskDef | None, headers: str = ""
    ) -> Prepared:
        return prepare(
            request,
            self.settings,
            rand,
            headers=headers,
            default_max_attempts=defaults.max_attempts if defaults is not None else None,
            default_timeout_s=defaults.timeout_s if defaults is not None else None,
        )

    async def send(self, prepared: Sequence[Prepared]) -> list[SubmitResult | Exception]:
        """Submit validated tasks: one submit call per queue and :data:`SUBMIT_CHUNK` tasks, in
        one round trip. Returns one result per task, in order.

        Raises:
            RedisUnavailableError: Redis did not answer, or is full (nothing was written).
        """
        try:
            refusals = await self.router.admit(dict.fromkeys(p.queue for p in prepared))
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        except OutOfMemoryError as exc:
            raise RedisUnavailableError(
                f"Redis is full (maxmemory) and refused to register the queue: {exc}"
            ) from exc
        if refusals:
            accepted = [p for p in prepared if p.queue not in refusals]
            results = iter(await self.send(accepted) if accepted else [])
            return [refusals[p.queue] if p.queue in refusals else next(results) for p in prepared]
        try:
            prepared = await self.layouts.place(prepared, self.settings.tasks.idem_ttl_s * 1000)
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        by_queue: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(prepared):
            by_queue[p.queue].append(i)
        calls = [
            (queue, idxs[start : start + SUBMIT_CHUNK])
            for queue, idxs in by_queue.items()
            for start in range(0, len(idxs), SUBMIT_CHUNK)
        ]
        try:
            replies = await self._call_all(
                [(queue, [prepared[i] for i in chunk]) for queue, chunk in calls]
            )
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc
        except OutOfMemoryError as exc:
            # The submit function is refused before its first write: nothing was stored.
            raise RedisUnavailableError(
                f"Redis is full (maxmemory) and refused the submit whole: {exc}"
            ) from exc
        out: list[SubmitResult | Exception] = [Exception("unreachable")] * len(prepared)
        for (queue, chunk), reply in zip(calls, replies, strict=True):
            own = self.layouts.cached(logical_queue(queue)).max_depth
            answers = read_reply(
                queue,
                reply,
                max_depth=own if own is not None else self.settings.queues.max_depth,
                own=own is not None,
            )
            for i, result in zip(chunk, answers, strict=True):
                out[i] = result
        return out

    async def _call_all(self, calls: list[tuple[str, list[Prepared]]]) -> list[list[str]]:
        """The replies of one submit call per ``(queue, tasks)``: one call alone, or all of
        them in one pipeline (one round trip for any number of queues).

        A missing function library fails every call of the pipeline before any of them runs,
        so loading it and sending the pipeline again submits nothing twice.
        """
        if len(calls) == 1:
            return [await self._call(*calls[0])]
        return await self.scripts.pipelined(
            [partial(self._call, queue, tasks) for queue, tasks in calls],
            [self.keys.queue(queue).meta for queue, _ in calls],
        )

    async def _call(self, queue: str, tasks: list[Prepared], client: Any = None) -> list[str]:
        s = self.settings
        count = self.layouts.cached(logical_queue(queue)).count
        return await self.scripts.submit(
            self.keys.queue(queue),
            tasks,
            max_depth=partition_depth(s.queues.max_depth, count),
            retention_ms=s.tasks.retention_s * 1000,
            idem_ttl_ms=s.tasks.idem_ttl_s * 1000,
            events_maxlen=s.queues.events_maxlen,
            client=client,
        )
