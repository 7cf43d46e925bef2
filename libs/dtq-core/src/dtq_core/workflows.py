"""Workflows: submit one (:meth:`Workflows.submit`), drive it as its steps end (the scheduler
leader's :meth:`Workflows.drain` and :meth:`Workflows.kick`), read and cancel it.

How a workflow advances, exactly once per step (docs/workflows.md, "Guarantees"):

1. The transition that ends a step's task (finish, cancel, a reclaim that buries it, an
   expiry, a purge) notes it in its queue's outbox in the same atomic step (lua/_lib.lua,
   "Workflows"), and publishes the queue's name on the workflow channel.
2. The leader reads the outbox entries and their tasks' outcomes and records them in the
   workflow (``wf_advance``: a step's first ended state counts, a step recorded before
   changes nothing), which answers the steps whose inputs have all ended.
3. It submits those steps. Each step's task id is derived from the workflow id and the step's
   index, and a step submitted again finds itself, so a crash between 2 and 4 submits nothing
   twice.
4. It records them as submitted (``wf_queued``), publishes the workflow's events, and only
   then removes the outbox entries: a crash anywhere before leaves them, and the next drain
   does the same work again, changing nothing that was done.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from functools import partial
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
import structlog

from dtq_core.canvas import compile_workflow
from dtq_core.errors import (
    DtqError,
    InvalidStateError,
    QueueFullError,
    ValidationError,
    WorkflowFailedError,
    WorkflowNotFoundError,
)
from dtq_core.infra import tracing
from dtq_core.infra.connection import answering
from dtq_core.infra.settings import Settings
from dtq_core.messages import (
    BatchRecord,
    EventField,
    StoredError,
    SubmitResult,
    TaskRequest,
    TaskStatus,
    WorkflowRecord,
    WorkflowStatus,
    WorkflowStep,
    WorkflowSummary,
    micros_to_datetime,
)
from dtq_core.names import split_task_id
from dtq_core.protocol.fields import TaskField
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.outcomes import CancelOutcome
from dtq_core.protocol.scripts import Scripts
from dtq_core.protocol.submit import Prepared, new_rands, prepare
from dtq_core.protocol.workflows import (
    MAX_EDGES,
    MAX_STEPS,
    POLICIES,
    Expr,
    Node,
    Policy,
    Ready,
    Tree,
    advance_args,
    children_id,
    decode_definition,
    encode,
    encode_batch,
    encode_definition,
    fill,
    leaves,
    read_advance,
    step_rand,
    step_ref,
    with_headers,
)
from dtq_core.router import Router
from dtq_core.submitter import Submitter

log = structlog.get_logger()

DRAIN_BATCH = 500
"""Outbox entries one drain reads at a time."""
SWEEP_AGE_MS = 5_000
"""The leader's sweep takes outbox entries and pending workflows older than this (younger
ones are driven by their messages)."""
CANCEL_CONCURRENCY = 64
NOT_MADE_GRACE_S = 10.0
"""How long :meth:`WorkflowHandle.result` waits for a workflow it cannot find to be made (the
children of a task whose finish the leader has not drained yet)."""
MAX_CHILDREN_BYTES = 16 * 1024 * 1024
"""The definitions of one task's children together, at most (they ride in its finish)."""
CHILDREN_STEP = -1
"""The step of an outbox entry that makes a task's children (``<rand>|<children id>:-1``)."""

_ENDED = frozenset({"succeeded", "failed", "dead", "cancelled", "expired"})
_errors = msgspec.json.Decoder(list[StoredError])
_fields = msgspec.json.Decoder(list[str])
_encoder = msgspec.json.Encoder()
Ended = tuple[int, str, bytes]


def error_value(task_id: str, status: str, errors: str | None, message: str | None = None) -> bytes:
    """What the successors of a failed step receive under ``on_failure="continue"``: ``{"dtq_error":
    {"task_id", "status", "type", "message"}}`` (the last attempt's error)."""
    last = _errors.decode(errors)[-1] if errors else None
    return _encoder.encode(
        {
            "dtq_error": {
                "task_id": task_id,
                "status": status,
                "type": last.type if last is not None else status,
                "message": message
                or (last.message if last is not None else f"the step's task {status}"),
            }
        }
    )


def is_error_value(value: Any) -> bool:
    """Whether a step's input is a failed step's error value (``on_failure="continue"``)."""
    return isinstance(value, dict) and set(value) == {"dtq_error"}


class Workflows:
    """The workflows of one deployment, through one client's connections."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: Keys,
        scripts: Scripts,
        settings: Settings,
        router: Router,
        submitter: Submitter,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts
        self.settings = settings
        self.router = router
        self.submitter = submitter
        self.retention_ms = settings.tasks.retention_s * 1000
        self.on_event: Callable[[str], None] = lambda _etype: None
        """Called with each workflow event published (the leader's metrics)."""
        self.on_advanced: Callable[[list[float]], None] = lambda _ages: None
        """Called after a drain with the seconds from each step's end to its workflow
        advanced."""

    # -- submit ---------------------------------------------------------------------------

    async def submit(
        self, expr: Expr, *, name: str | None = None, on_failure: Policy = "fail"
    ) -> WorkflowHandle:
        """Store a workflow and submit its first steps: one round trip per queue they use, plus
        three. Every step is routed and checked as a submit would be first: nothing is written
        when one is refused.

        Raises:
            ValidationError: the definition, or one of its steps (``field`` and the message say
                which), is refused; :class:`UnknownTaskError` and :class:`UnknownQueueError` as
                a submit raises them.
            RedisUnavailableError: Redis did not answer.
        """
        if on_failure not in POLICIES:
            raise ValidationError(
                f"on_failure must be one of {', '.join(POLICIES)}, got {on_failure!r}",
                field="on_failure",
            )
        if name is not None and not 0 < len(name) <= 200:
            raise ValidationError("name must be a string of 1 to 200 characters", field="name")
        nodes, output = compile_workflow(expr)
        workflow_id = new_rands(1)[0]
        nodes = await self.check(nodes, workflow_id)
        with tracing.workflow_span(name or "unnamed", workflow_id) as span:
            if span is not None:
                nodes = with_headers(nodes, span.headers)
            fields = encode(nodes, output=output, policy=on_failure, name=name)
            first = [Ready(n.index, n.definition, {}) for n in nodes if not n.inputs]
            await self._store(workflow_id, fields, first)
        return WorkflowHandle(self, workflow_id)

    async def check(self, nodes: list[Node], workflow_id: str) -> list[Node]:
        """``nodes`` routed (their queues resolved) and checked as a submit would check each
        step's task.

        Raises:
            ValidationError, UnknownTaskError, UnknownQueueError: a step is refused (its index
                is in the message and the detail's ``step``).
        """
        routed = await self.router.route(
            [n.definition.request for n in nodes],
            # A step's inputs (or a batch callback's counts) come first in its arguments.
            args_given=[
                not (n.definition.summary or (n.inputs and n.definition.pass_result)) for n in nodes
            ],
        )
        for node, req in zip(nodes, routed, strict=True):
            if isinstance(req, Exception):
                raise _at_step(node.index, req)
        nodes = [
            Node(n.index, msgspec.structs.replace(n.definition, request=r), n.policy)
            for n, r in zip(nodes, routed, strict=True)
            if isinstance(r, TaskRequest)
        ]
        refusals = await self.router.admit(
            dict.fromkeys(n.definition.request.queue or "default" for n in nodes)
        )
        for node in nodes:
            req = node.definition.request
            if req.queue in refusals:
                raise _at_step(node.index, refusals[req.queue])
            try:
                prepare(req, self.settings, step_rand(workflow_id, node.index))
            except ValidationError as exc:
                raise _at_step(node.index, exc) from None
        return nodes

    def children(self, parent_task_id: str, task: str) -> Children:
        """The children one attempt of task ``parent_task_id`` (of task ``task``) spawns."""
        return Children(self, parent_task_id, task)

    async def _store(self, workflow_id: str, fields: list[str | bytes], first: list[Ready]) -> None:
        """Write a checked workflow (``wf_create``'s fields) and submit its first steps."""
        key = self.keys.workflow(workflow_id)
        now_ms = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.zadd(self.keys.workflows_pending, {workflow_id: now_ms})
            await self._listed(pipe, [workflow_id], now_ms)
            await pipe.execute()
        created = await self.scripts.wf_create(key, fields, retention_ms=self.retention_ms)
        if created != "created":  # a 128-bit random id
            raise InvalidStateError(f"workflow {workflow_id} exists already")
        if first:
            submitted, _, _ = await self._submit_steps([(workflow_id, r) for r in first])
            cancel = await self.scripts.wf_queued(
                key, submitted.get(workflow_id, []), published="", retention_ms=self.retention_ms
            )
            await self._cancel_tasks(cancel[:-1], waiting_only=False)  # the last: events left
        # The leader publishes workflow.started, and submits any first step refused here.
        await self.redis.publish(self.keys.workflow_channel, f"wf:{workflow_id}")

    async def _listed(self, pipe: Any, workflow_ids: Iterable[str], now_ms: int) -> None:
        """Add workflows to the list (in ``pipe``), dropping those past their retention."""
        await pipe.zadd(self.keys.workflows, dict.fromkeys(workflow_ids, now_ms))
        await pipe.zremrangebyscore(self.keys.workflows, "-inf", now_ms - self.retention_ms)

    def handle(self, workflow_id: str) -> WorkflowHandle:
        """A handle for a workflow id obtained elsewhere."""
        return WorkflowHandle(self, workflow_id)

    async def _submit_steps(
        self, items: list[tuple[str, Ready]]
    ) -> tuple[dict[str, list[tuple[int, str]]], dict[str, list[Ended]], set[str]]:
        """Submit ready steps in one round trip per queue. Returns the task ids of those
        submitted, by workflow; the steps refused for good, as ended ``failed`` with their
        error value; and the workflows with a step a full queue refused (tried again later).
        """
        submitted: dict[str, list[tuple[int, str]]] = defaultdict(list)
        failed: dict[str, list[Ended]] = defaultdict(list)
        full: set[str] = set()
        prepared: list[tuple[str, Ready, Prepared]] = []
        for workflow_id, ready in items:
            req = ready.request()
            rand = step_rand(workflow_id, ready.step)
            headers = tracing.step_headers(
                ready.definition.headers, req.task, req.queue or "default", rand
            )
            try:
                p = prepare(
                    req, self.settings, rand, headers=headers, wf=step_ref(workflow_id, ready.step)
                )
            except ValidationError as exc:
                failed[workflow_id].append(_refused(ready.step, req.queue or "", rand, exc))
                continue
            prepared.append((workflow_id, ready, p))
        if prepared:
            results = await self.submitter.send([p for _, _, p in prepared])
            for (workflow_id, ready, p), result in zip(prepared, results, strict=True):
                if isinstance(result, SubmitResult):
                    submitted[workflow_id].append((ready.step, result.id))
                elif isinstance(result, QueueFullError):
                    full.add(workflow_id)
                else:
                    failed[workflow_id].append(_refused(ready.step, p.queue, p.rand, result))
        return submitted, failed, full

    # -- driving (the scheduler leader) ---------------------------------------------------

    async def drain(self, queue: str, *, older_than_ms: int | None = None) -> int:
        """Advance the workflows of the steps in ``queue``'s outbox (a stored queue: a
        partition's name for a partition); returns how many entries were read.

        Args:
            older_than_ms: only entries noted at least this long ago (the sweep).
        """
        qk = self.keys.queue(queue)
        total = 0
        while True:
            upto = "+inf" if older_than_ms is None else int(time.time() * 1000) - older_than_ms
            scored = cast(
                list[tuple[str, float]],
                await self.redis.zrangebyscore(
                    qk.workflow_outbox, "-inf", upto, start=0, num=DRAIN_BATCH, withscores=True
                ),
            )
            if not scored:
                return total
            members = [m for m, _ in scored]
            total += len(members)
            notes = [_note(m) for m in members]
            async with self.redis.pipeline(transaction=False) as pipe:
                for rand, _, _ in notes:
                    await pipe.hmget(qk.task(rand), "st", "res", "err", TaskField.CHILDREN)
                records = await pipe.execute()
            ended, spawned = _outcomes(queue, notes, records)
            await self._create_children(spawned)
            later = await self._advance(ended, set(spawned))
            done = [
                (m, rand, w, step)
                for m, (rand, w, step) in zip(members, notes, strict=True)
                if w not in later
            ]
            if done:
                async with self.redis.pipeline(transaction=False) as pipe:
                    await pipe.zrem(qk.workflow_outbox, *(m for m, *_ in done))
                    for _, rand, _, step in done:
                        if step == CHILDREN_STEP:  # made: the definitions are not needed
                            await pipe.hdel(qk.task(rand), TaskField.CHILDREN)
                    await pipe.execute()
                now_ms = time.time() * 1000
                gone = {m for m, *_ in done}
                self.on_advanced([(now_ms - ms) / 1000 for (m, ms) in scored if m in gone])
            if len(members) < DRAIN_BATCH or len(done) < len(members):
                return total

    async def _create_children(self, spawned: dict[str, str | None]) -> None:
        """Make the workflows of tasks' children from the definitions their finish recorded
        (``None``: made already, and the definitions dropped)."""
        made = {w: kids for w, kids in spawned.items() if kids}
        if not made:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            await self._listed(pipe, made, int(time.time() * 1000))
            await pipe.execute()
        fields: dict[str, list[str]] = {}
        for w, kids in made.items():
            try:
                fields[w] = _fields.decode(kids)
            except msgspec.DecodeError as exc:  # not written by a finish: nothing to make
                log.error("children_unreadable", workflow_id=w, error=str(exc))
        await self._calls(
            [
                partial(
                    self.scripts.wf_create,
                    self.keys.workflow(w),
                    f,
                    retention_ms=self.retention_ms,
                )
                for w, f in fields.items()
            ],
            [self.keys.workflow(w) for w in fields],
        )  # "exists" for those made before: a drain that stopped half-way

    async def kick(self, marks: Iterable[str]) -> None:
        """Carry out what the workflows have pending: publish their events, submit the steps
        that may start, cancel the steps of those that ended; then take their marks off the
        pending set, those not marked again meanwhile.

        Args:
            marks: members of the pending set: a workflow id, or ``<id>:<token>`` (the mark
                of one batch add: :meth:`add_to_batch`).
        """
        order = list(set(marks))
        if not order:
            return
        scores = await self.redis.zmscore(self.keys.workflows_pending, order)
        ids = {m.partition(":")[0] for m in order}
        later = await self._advance({}, ids)
        settled = [
            (m, score)
            for m, score in zip(order, scores, strict=True)
            if m.partition(":")[0] not in later and score
        ]
        if settled:
            await self.scripts.wf_settle(self.keys.workflows_pending, settled)

    async def sweep(self) -> int:
        """The leader's safety net: drain outbox entries and kick pending workflows older than
        :data:`SWEEP_AGE_MS` (their messages were missed: the leader was down or changed).
        Returns how many entries and workflows it handled."""
        upto = int(time.time() * 1000) - SWEEP_AGE_MS
        pending = cast(
            list[str],
            await self.redis.zrangebyscore(
                self.keys.workflows_pending, "-inf", upto, start=0, num=DRAIN_BATCH
            ),
        )
        await self.kick(pending)
        queues = sorted(cast(set[str], await self.redis.smembers(self.keys.queues)))
        async with self.redis.pipeline(transaction=False) as pipe:
            for q in queues:
                await pipe.zrangebyscore(
                    self.keys.queue(q).workflow_outbox, "-inf", upto, start=0, num=1
                )
            heads = await pipe.execute()
        handled = len(pending)
        for q, head in zip(queues, heads, strict=True):
            if head:
                handled += await self.drain(q, older_than_ms=SWEEP_AGE_MS)
        return handled

    async def _advance(self, ended: dict[str, list[Ended]], kicks: set[str]) -> set[str]:
        """Record ``ended`` steps and kick ``kicks``, then do what the workflows answer, until
        nothing is left; returns the workflows to try again later (a full queue refused one
        of their steps, or their events could not all be cleared)."""
        later: set[str] = set()
        while ended or kicks:
            ids = [*ended, *(k for k in kicks if k not in ended)]

            replies = await self._calls(
                [
                    partial(
                        self.scripts.wf_advance,
                        self.keys.workflow(w),
                        advance_args(ended.get(w, [])),
                        retention_ms=self.retention_ms,
                    )
                    for w in ids
                ],
                [self.keys.workflow(w) for w in ids],
            )
            advances = {w: read_advance(w, r) for w, r in zip(ids, replies, strict=True)}
            ready = [(w, r) for w, a in advances.items() if a is not None for r in a.ready]
            submitted, failed, full = await self._submit_steps(ready)
            later |= full
            live = {w: a for w, a in advances.items() if a is not None}
            await self._publish(live)
            cancel_waiting: list[str] = []
            cancel_all: list[str] = []

            queued = await self._calls(
                [
                    partial(
                        self.scripts.wf_queued,
                        self.keys.workflow(w),
                        submitted.get(w, []),
                        published=a.events,
                        retention_ms=self.retention_ms,
                    )
                    for w, a in live.items()
                ],
                [self.keys.workflow(w) for w in live],
            )
            for (w, a), reply in zip(live.items(), queued, strict=True):
                *cancelled, remaining = reply
                if remaining:
                    later.add(w)
                # A failed workflow stops its steps that have not started; a cancelled one
                # all of them.
                (cancel_waiting if a.status == WorkflowStatus.FAILED else cancel_all).extend(
                    a.cancel
                )
                cancel_all.extend(cancelled)
            await self._cancel_tasks(cancel_waiting, waiting_only=True)
            await self._cancel_tasks(cancel_all, waiting_only=False)
            ended, kicks = dict(failed), set()
        return later

    async def _calls(
        self, calls: list[Callable[..., Awaitable[Any]]], slot_keys: list[str]
    ) -> list[Any]:
        """The replies of function calls (each taking ``client=``) in one pipeline."""
        if not slot_keys:
            return []
        return await self.scripts.pipelined([_on_pipeline(call) for call in calls], slot_keys)

    async def _publish(self, advances: dict[str, Any]) -> None:
        """Add the workflows' pending events to the global event stream."""
        entries = [(w, etype, a.status) for w, a in advances.items() for etype in a.event_types]
        if not entries:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for w, etype, _ in entries:
                await pipe.xadd(
                    self.keys.events,
                    {EventField.TYPE: etype, "workflow_id": w},
                    maxlen=self.settings.queues.events_maxlen,
                    approximate=True,
                )
            await pipe.execute()
        for _, etype, _ in entries:
            self.on_event(etype)

    async def _cancel_tasks(self, task_ids: list[str], *, waiting_only: bool) -> None:
        """Cancel steps' tasks (those running too, unless ``waiting_only``)."""
        ids = [t for t in dict.fromkeys(task_ids) if t]
        if not ids:
            return
        located = [(t, split_task_id(t)) for t in ids]
        if waiting_only:
            async with self.redis.pipeline(transaction=False) as pipe:
                for _, loc in located:
                    if loc is not None:
                        await pipe.hget(self.keys.queue(loc[0]).task(loc[1]), "st")
                statuses = iter(await pipe.execute())
            located = [
                (t, loc) for t, loc in located if loc is not None and next(statuses) != "running"
            ]
        gate = asyncio.Semaphore(CANCEL_CONCURRENCY)

        async def one(queue: str, rand: str) -> CancelOutcome:
            async with gate:
                outcome, _ = await self.scripts.cancel(
                    self.keys.queue(queue),
                    rand,
                    events_maxlen=self.settings.queues.events_maxlen,
                    retention_ms=self.retention_ms,
                    channel=self.keys.cancel_channel,
                )
                return outcome

        await asyncio.gather(*(one(*loc) for _, loc in located if loc is not None))

    # -- batches ------------------------------------------------------------------------------

    async def create_batch(
        self,
        *,
        on_success: Expr | None = None,
        on_complete: Expr | None = None,
        name: str | None = None,
    ) -> str:
        """Store a new open batch; its id.

        Raises:
            ValidationError: a callback is not one step, or is refused as a submit would be.
        """
        if name is not None and not 0 < len(name) <= 200:
            raise ValidationError("name must be a string of 1 to 200 characters", field="name")
        callbacks: list[tuple[Node, bool]] = []
        for field, expr, guarded in (
            ("on_success", on_success, True),
            ("on_complete", on_complete, False),
        ):
            if expr is None:
                continue
            node = _one_step(expr, len(callbacks), field)
            d = node.definition
            summary = d.pass_result
            callbacks.append(
                (
                    Node(
                        node.index,
                        msgspec.structs.replace(d, pass_result=False, summary=summary),
                        node.policy,
                    ),
                    guarded,
                )
            )
        batch_id = new_rands(1)[0]
        checked = await self.check([n for n, _ in callbacks], batch_id)
        headers = tracing.current_headers()
        if headers:
            checked = with_headers(checked, headers)
        fields = encode_batch(
            [(n, g) for n, (_, g) in zip(checked, callbacks, strict=True)], name=name
        )
        await self._store(batch_id, fields, [])
        return batch_id

    async def add_to_batch(self, batch_id: str, members: Sequence[Expr]) -> list[str | None]:
        """Add members (each one step) to an open batch and submit them: one round trip per
        queue they use, plus four. Returns their task ids, in order (``None`` for a member a
        full queue refused: it waits in the batch, and the scheduler leader submits it when
        the queue has room).

        Raises:
            WorkflowNotFoundError: no such batch.
            InvalidStateError: it is sealed, or it ended (cancelled).
            ValidationError: a member is refused (nothing is added), or the batch would have
                more than :data:`MAX_STEPS` steps.
        """
        if not _valid_id(batch_id):
            raise WorkflowNotFoundError(f"batch {batch_id} not found", workflow_id=batch_id)
        nodes = [_one_step(m, i, "members") for i, m in enumerate(members)]
        for node in nodes:
            if node.policy is not None:
                raise ValidationError(
                    f"member {node.index}: a batch member cannot have on_failure (every "
                    "member's outcome is counted)",
                    field="on_failure",
                )
        if not nodes:
            return []
        checked = await self.check(nodes, batch_id)
        headers = tracing.current_headers()
        if headers:
            checked = with_headers(checked, headers)
        key = self.keys.workflow(batch_id)
        # This add's own mark first: a crash before its members are submitted leaves them to
        # the leader's sweep. Its own, so that it takes no other adder's mark off.
        mark = f"{batch_id}:{new_rands(1)[0][:12]}"
        await self.redis.zadd(self.keys.workflows_pending, {mark: int(time.time() * 1000)})
        outcome, value = await self.scripts.wf_batch_add(
            key,
            [encode_definition(n.definition) for n in checked],
            max_steps=MAX_STEPS,
            retention_ms=self.retention_ms,
        )
        if outcome != "added":
            raise _batch_refusal(batch_id, outcome, value)
        first = int(value)
        ready = [Ready(first + i, n.definition, {}) for i, n in enumerate(checked)]
        submitted, _, _ = await self._submit_steps([(batch_id, r) for r in ready])
        done = submitted.get(batch_id, [])
        cancel = await self.scripts.wf_queued(
            key, done, published="", retention_ms=self.retention_ms
        )
        await self._cancel_tasks(cancel[:-1], waiting_only=False)
        if len(done) == len(ready):
            # Nothing of this add is left for the leader (which would read the whole batch to
            # find that); events still to publish are the business of the mark that made them.
            await self.redis.zrem(self.keys.workflows_pending, mark)
        else:  # it submits the members refused here, and its sweep takes the mark off
            await self.redis.publish(self.keys.workflow_channel, f"wf:{batch_id}")
        ids = dict(done)
        return [ids.get(r.step) for r in ready]

    async def seal_batch(self, batch_id: str) -> WorkflowStatus:
        """Seal a batch: nothing is added after, and its callbacks run once every member has
        ended. Sealing twice changes nothing. Returns its status.

        Raises:
            WorkflowNotFoundError: no such batch.
        """
        if not _valid_id(batch_id):
            raise WorkflowNotFoundError(f"batch {batch_id} not found", workflow_id=batch_id)
        await self.redis.zadd(self.keys.workflows_pending, {batch_id: int(time.time() * 1000)})
        outcome, status = await self.scripts.wf_batch_seal(
            self.keys.workflow(batch_id), retention_ms=self.retention_ms
        )
        if outcome == "not_found":
            raise WorkflowNotFoundError(f"batch {batch_id} not found", workflow_id=batch_id)
        # The leader submits the callbacks that may start, or publishes its end.
        await self.redis.publish(self.keys.workflow_channel, f"wf:{batch_id}")
        return WorkflowStatus(status)

    @answering
    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        """A batch's counts; ``None`` when there is no such batch (or its record expired)."""
        if not _valid_id(batch_id):
            return None
        fields = ["st", "kind", "name", "ct", "ft", "n", "m0", "bok", "bfail", "sealed"]
        st, kind, name, ct, ft, n, m0, ok, failed, sealed, s0, s1, g0 = cast(
            list[str | None],
            await self.redis.hmget(self.keys.workflow(batch_id), [*fields, "s:0", "s:1", "g:0"]),
        )
        if st is None or kind != "batch":
            return None
        callbacks = int(m0 or 0)
        states = [s0, s1][:callbacks]
        on_success = states.pop(0) if g0 else None
        on_complete = states.pop(0) if states else None
        total, done_ok, done_failed = int(n or 0) - callbacks, int(ok or 0), int(failed or 0)
        return BatchRecord(
            id=batch_id,
            name=name,
            status=WorkflowStatus(st),
            sealed=sealed == "1",
            total=total,
            pending=total - done_ok - done_failed,
            succeeded=done_ok,
            failed=done_failed,
            created_at=micros_to_datetime(ct),  # type: ignore[arg-type]
            finished_at=micros_to_datetime(ft),
            on_success=on_success,
            on_complete=on_complete,
        )

    def batch(self, batch_id: str) -> Batch:
        """A handle for a batch id obtained elsewhere."""
        return Batch(self, batch_id=batch_id)

    # -- reading and steering ---------------------------------------------------------------

    @answering
    async def get(self, workflow_id: str, *, steps: bool = True) -> WorkflowRecord | None:
        """The workflow and (with ``steps``) every step with its task's live state; ``None``
        when there is no such workflow (or its record expired)."""
        if not _valid_id(workflow_id):
            return None
        h = cast(dict[str, str], await self.redis.hgetall(self.keys.workflow(workflow_id)))
        if not h or "st" not in h:
            return None
        n = int(h["n"])
        status = WorkflowStatus(h["st"])
        values = {i: msgspec.json.decode(h[f"r:{i}"]) for i in range(n) if f"r:{i}" in h}
        result = None
        if status is WorkflowStatus.SUCCEEDED:
            out = msgspec.json.decode(h["out"])
            result = fill(out, values) if out is not None else None
        record_steps: list[WorkflowStep] = []
        if steps:
            definitions = [decode_definition(h[f"q:{i}"]) for i in range(n)]
            task_ids = [h.get(f"t:{i}") for i in range(n)]
            live = await self._live(task_ids)
            for i, (d, task_id, task) in enumerate(zip(definitions, task_ids, live, strict=True)):
                state = h[f"s:{i}"]
                st, att, sa, ft = task if task is not None else (None, None, None, None)
                record_steps.append(
                    WorkflowStep(
                        step=i,
                        task=d.request.task,
                        queue=d.request.queue or "default",
                        status=st or state,
                        depends_on=list(dict.fromkeys(leaves(d.input))),
                        task_id=task_id,
                        attempts=int(att or 0),
                        started_at=micros_to_datetime(sa),
                        finished_at=micros_to_datetime(ft),
                        result=values.get(i),
                    )
                )
        errs = h.get("errs")
        return WorkflowRecord(
            id=workflow_id,
            name=h.get("name"),
            status=status,
            on_failure=h["pol"],
            created_at=micros_to_datetime(h["ct"]),  # type: ignore[arg-type]
            finished_at=micros_to_datetime(h.get("ft")),
            steps_total=n,
            steps_ended=n - int(h["left"]),
            result=result,
            error=msgspec.json.decode(h["err"])
            if "err" in h and status is not WorkflowStatus.SUCCEEDED
            else None,
            failed_step=int(errs) if errs is not None else None,
            kind=h.get("kind", "workflow"),
            parent_task_id=h.get("par"),
            steps=record_steps,
        )

    async def _live(self, task_ids: list[str | None]) -> list[tuple[Any, ...] | None]:
        located = [split_task_id(t) if t else None for t in task_ids]
        wanted = [loc for loc in located if loc is not None]
        if not wanted:
            return [None] * len(task_ids)
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue, rand in wanted:
                await pipe.hmget(self.keys.queue(queue).task(rand), "st", "att", "sa", "ft")
            replies = iter(await pipe.execute())
        return [tuple(next(replies)) if loc is not None else None for loc in located]

    async def list(
        self, *, status: WorkflowStatus | None = None, limit: int = 50, before_ms: int | None = None
    ) -> list[WorkflowSummary]:
        """:meth:`page` without the cursor."""
        found, _ = await self.page(status=status, limit=limit, before_ms=before_ms)
        return found

    @answering
    async def page(
        self, *, status: WorkflowStatus | None = None, limit: int = 50, before_ms: int | None = None
    ) -> tuple[builtins.list[WorkflowSummary], int | None]:
        """The newest workflows first (at most ``limit``), of one status if given, listed
        before ``before_ms`` if given; and the ``before_ms`` of the next page (``None``: this
        was the last), the list's own order (submit time, ms), not ``created_at``."""
        last: int | None = None
        upper: str | int = "+inf" if before_ms is None else f"({before_ms}"
        out: list[WorkflowSummary] = []
        while len(out) < limit:
            page = cast(
                list[tuple[str, float]],
                await self.redis.zrevrangebyscore(
                    self.keys.workflows,
                    upper,
                    "-inf",
                    start=0,
                    num=max(limit, 100),
                    withscores=True,
                ),
            )
            if not page:
                break
            async with self.redis.pipeline(transaction=False) as pipe:
                for w, _ in page:
                    await pipe.hmget(
                        self.keys.workflow(w), "st", "name", "ct", "ft", "n", "left", "kind"
                    )
                rows = await pipe.execute()
            for (w, _score), (st, name, ct, ft, n, left, kind) in zip(page, rows, strict=True):
                if st is None or (status is not None and st != status):
                    continue
                out.append(
                    WorkflowSummary(
                        id=w,
                        name=name,
                        status=WorkflowStatus(st),
                        created_at=micros_to_datetime(ct),  # type: ignore[arg-type]
                        finished_at=micros_to_datetime(ft),
                        steps_total=int(n),
                        steps_ended=int(n) - int(left),
                        kind=kind or "workflow",
                    )
                )
                last = int(_score)
                if len(out) >= limit:
                    break
            upper = f"({int(page[-1][1])}"
        return out, (last if len(out) >= limit else None)

    @answering
    async def cancel(self, workflow_id: str) -> WorkflowStatus:
        """Cancel a running workflow: steps not submitted never are, and every submitted
        step's task not ended is cancelled, running ones included.

        Raises:
            WorkflowNotFoundError: no such workflow.
            InvalidStateError: it had ended.
        """
        if not _valid_id(workflow_id):
            raise WorkflowNotFoundError(
                f"workflow {workflow_id} not found", workflow_id=workflow_id
            )
        outcome, status, task_ids = await self.scripts.wf_cancel(
            self.keys.workflow(workflow_id), retention_ms=self.retention_ms
        )
        if outcome == "not_found":
            raise WorkflowNotFoundError(
                f"workflow {workflow_id} not found", workflow_id=workflow_id
            )
        if outcome == "final":
            raise InvalidStateError(
                f"workflow {workflow_id} already ended ({status}); nothing to cancel",
                workflow_id=workflow_id,
                status=status,
            )
        await self.redis.zadd(self.keys.workflows_pending, {workflow_id: int(time.time() * 1000)})
        await self._cancel_tasks(task_ids, waiting_only=False)
        await self.redis.publish(self.keys.workflow_channel, f"wf:{workflow_id}")
        return WorkflowStatus.CANCELLED


class Children:
    """The children one attempt of a handler spawns (:meth:`TaskContext.spawn
    <dtq_core.tasks.TaskContext.spawn>`): one workflow, id :func:`children_id` of the task,
    made from what its finish records, and only when that attempt succeeds. Every child is
    routed and checked when it is spawned, so a refused child is an error in the handler."""

    def __init__(self, workflows: Workflows, parent_task_id: str, task: str) -> None:
        self._workflows = workflows
        self.parent = parent_task_id
        self.task = task
        self.id = children_id(parent_task_id)
        self.nodes: list[Node] = []
        self.outputs: list[Tree] = []
        self.then: Tree | None = None
        self.policy: Policy = "continue"
        self._edges = 0

    def __len__(self) -> int:
        return len(self.nodes)

    async def add(self, exprs: Sequence[Expr]) -> None:
        """Spawn ``exprs`` (each a step, chain, group or chord), in order.

        Raises:
            ValidationError: one is refused (nothing of ``exprs`` is spawned), or
                :meth:`wait` came first.
        """
        if self.then is not None:
            raise ValidationError("spawn after wait_children: the continuation comes last")
        new: list[Node] = []
        outputs: list[Tree] = []
        for expr in exprs:
            nodes, out = compile_workflow(expr, start=len(self.nodes) + len(new))
            new += nodes
            outputs.append(cast(Tree, out))
        self._count(new)
        checked = await self._workflows.check(new, self.id)
        headers = tracing.current_headers()
        self.nodes += with_headers(checked, headers) if headers else checked
        self.outputs += outputs

    async def wait(self, then: Expr, on_failure: Policy) -> None:
        """Run ``then`` when every child has ended, with the list of their results first in
        its arguments (a chord of the children and ``then``)."""
        if on_failure not in POLICIES:
            raise ValidationError(
                f"on_failure must be one of {', '.join(POLICIES)}, got {on_failure!r}",
                field="on_failure",
            )
        if self.then is not None:
            raise ValidationError("wait_children was called already")
        if not self.nodes:
            raise ValidationError("wait_children needs children: spawn them first")
        nodes, out = compile_workflow(then, start=len(self.nodes), input=list(self.outputs))
        self._count(nodes)
        checked = await self._workflows.check(nodes, self.id)
        headers = tracing.current_headers()
        self.nodes += with_headers(checked, headers) if headers else checked
        self.then = cast(Tree, out)
        self.policy = on_failure

    def _count(self, nodes: Sequence[Node]) -> None:
        if len(self.nodes) + len(nodes) > MAX_STEPS:
            raise ValidationError(f"a task spawns at most {MAX_STEPS} children")
        edges = self._edges + sum(len(n.inputs) for n in nodes)
        if edges > MAX_EDGES:
            raise ValidationError(f"a task's children have at most {MAX_EDGES} inputs together")
        self._edges = edges

    def payload(self) -> str:
        """What the finish records (``<id>:<wf_create's fields, JSON>``); ``""`` for no
        children.

        Raises:
            ValidationError: it is larger than :data:`MAX_CHILDREN_BYTES`.
        """
        if not self.nodes:
            return ""
        output = self.then if self.then is not None else list(self.outputs)
        fields = encode(self.nodes, output=output, policy=self.policy, name=f"{self.task} children")
        fields += ["par", self.parent]
        body = _encoder.encode([f if isinstance(f, str) else f.decode() for f in fields])
        if len(body) > MAX_CHILDREN_BYTES:
            raise ValidationError(
                f"the children's definitions take {len(body)} bytes, more than "
                f"{MAX_CHILDREN_BYTES}: pass references to the data, not the data"
            )
        return f"{self.id}:{body.decode()}"


class Batch:
    """A batch (:meth:`Client.batch <dtq_core.Client.batch>`): tasks added over time, counted as
    they end, and callbacks run exactly once when it is sealed and every task has ended
    (docs/workflows.md, "Batches").

    ``await client.batch(...)`` creates it open; ``async with client.batch(...) as b:`` creates
    it and seals it when the block ends (and cancels it when the block raises).

    Attributes:
        id: the batch id (32 hex digits; the id of its workflow too).
    """

    def __init__(
        self,
        workflows: Workflows,
        *,
        batch_id: str | None = None,
        on_success: Expr | None = None,
        on_complete: Expr | None = None,
        name: str | None = None,
    ) -> None:
        self._workflows = workflows
        self._id = batch_id
        self._create = (on_success, on_complete, name)

    def __repr__(self) -> str:
        return f"Batch(id={self._id!r})"

    @property
    def id(self) -> str:
        if self._id is None:
            raise RuntimeError("the batch is not created yet: await it, or enter it")
        return self._id

    async def open(self) -> Batch:
        """Create it (once); itself."""
        if self._id is None:
            on_success, on_complete, name = self._create
            self._id = await self._workflows.create_batch(
                on_success=on_success, on_complete=on_complete, name=name
            )
        return self

    def __await__(self) -> Generator[Any, None, Batch]:
        return self.open().__await__()

    async def __aenter__(self) -> Batch:
        return await self.open()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.seal()
        elif self._id is not None:
            # A half-built batch is not what was meant: its tasks stop, no callback runs.
            with contextlib.suppress(DtqError):
                await self.cancel()

    async def add(self, member: Expr) -> str | None:
        """Add one task (a :func:`~dtq_core.step`) and submit it; its task id (``None``: a
        full queue refused it for now, see :meth:`add_many`)."""
        return (await self.add_many([member]))[0]

    async def add_many(self, members: Iterable[Expr]) -> list[str | None]:
        """Add tasks (each a :func:`~dtq_core.step`) and submit them, in one round trip per
        queue; their task ids, in order (``None`` for a member a full queue refused: it waits
        in the batch and the scheduler leader submits it when the queue has room).

        Raises:
            InvalidStateError: the batch is sealed, or it ended.
            ValidationError: a member is refused (nothing is added).
        """
        return await self._workflows.add_to_batch(self.id, list(members))

    async def seal(self) -> WorkflowStatus:
        """No more tasks: its callbacks run once every task in it has ended."""
        return await self._workflows.seal_batch(self.id)

    async def cancel(self) -> WorkflowStatus:
        """Cancel every task of it not ended, running ones included; no callback runs."""
        return await self._workflows.cancel(self.id)

    async def counts(self) -> BatchRecord:
        """Its live counts.

        Raises:
            WorkflowNotFoundError: no such batch (or its record expired).
        """
        record = await self._workflows.get_batch(self.id)
        if record is None:
            raise WorkflowNotFoundError(f"batch {self.id} not found", workflow_id=self.id)
        return record

    async def wait(self, timeout: float | None = None) -> BatchRecord:
        """Wait for it to end (sealed, every task and callback ended); its final counts.
        Members that failed do not raise: the counts say how many.

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        delay = 0.01
        async with asyncio.timeout(timeout):
            while not (record := await self.counts()).status.terminal:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
        return record

    def workflow(self) -> WorkflowHandle:
        """The batch as a workflow (every task and callback as a step)."""
        return WorkflowHandle(self._workflows, self.id)


class WorkflowHandle:
    """A submitted workflow (:meth:`Client.enqueue_workflow <dtq_core.Client.enqueue_workflow>`).

    Attributes:
        id: the workflow id (32 hex digits).
    """

    __slots__ = ("_workflows", "id")

    def __init__(self, workflows: Workflows, workflow_id: str) -> None:
        self._workflows = workflows
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"WorkflowHandle(id={self.id!r})"

    async def get(self) -> WorkflowRecord:
        """The workflow with every step.

        Raises:
            WorkflowNotFoundError: its record expired.
        """
        record = await self._workflows.get(self.id)
        if record is None:
            raise WorkflowNotFoundError(f"workflow {self.id} not found", workflow_id=self.id)
        return record

    async def status(self) -> WorkflowStatus:
        return (await self._record(steps=False)).status

    async def steps(self) -> list[WorkflowStep]:
        return (await self.get()).steps

    async def cancel(self) -> WorkflowStatus:
        return await self._workflows.cancel(self.id)

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to end; its result (a chain's last step's, a group's list, a
        chord's callback's).

        A workflow not found is waited for up to :data:`NOT_MADE_GRACE_S` (a task's children
        are made just after its finish).

        Raises:
            WorkflowFailedError: it failed or was cancelled (``status``, ``error``,
                ``failed_step`` in its detail).
            WorkflowNotFoundError: there is no such workflow (or its record expired).
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        delay = 0.01
        since = time.monotonic()
        # Read at least once: timeout=0 answers an ended workflow's result, it does not expire
        # before the first read.
        deadline = None if timeout is None else since + timeout
        while True:
            found = await self._workflows.get(self.id, steps=False)
            if found is None:
                if time.monotonic() - since > NOT_MADE_GRACE_S:
                    raise WorkflowNotFoundError(
                        f"workflow {self.id} not found", workflow_id=self.id
                    )
            elif found.status.terminal:
                record = found
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"workflow {self.id} did not end within {timeout} s")
            await asyncio.sleep(delay if left is None else min(delay, left))
            delay = min(delay * 2, 0.5)
        if record.status is WorkflowStatus.SUCCEEDED:
            return record.result
        raise WorkflowFailedError(
            f"workflow {self.id} {record.status}"
            + (f" at step {record.failed_step}" if record.failed_step is not None else ""),
            workflow_id=self.id,
            status=str(record.status),
            error=record.error,
            failed_step=record.failed_step,
        )

    async def _record(self, *, steps: bool) -> WorkflowRecord:
        record = await self._workflows.get(self.id, steps=steps)
        if record is None:
            raise WorkflowNotFoundError(f"workflow {self.id} not found", workflow_id=self.id)
        return record


def _note(member: str) -> tuple[str, str, int]:
    """An outbox entry ``<rand>|<workflow id>:<step>``."""
    rand, _, ref = member.partition("|")
    workflow_id, _, step = ref.partition(":")
    return rand, workflow_id, int(step)


def _on_pipeline(call: Callable[..., Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    """``call`` made on the pipeline it is given (its ``client``)."""
    return lambda pipe: call(client=pipe)


def _outcomes(
    queue: str, notes: list[tuple[str, str, int]], records: list[list[str | None]]
) -> tuple[dict[str, list[Ended]], dict[str, str | None]]:
    """What outbox entries and their tasks' records say: the steps ended, by workflow, and
    the children to make (their definitions, ``None`` once made)."""
    ended: dict[str, list[Ended]] = defaultdict(list)
    spawned: dict[str, str | None] = {}
    for (rand, workflow_id, step), (st, res, err, kids) in zip(notes, records, strict=True):
        task_id = f"{queue}:{rand}"
        if step == CHILDREN_STEP:
            spawned[workflow_id] = kids
        elif st is None:
            value = error_value(task_id, "expired", None, "its task's record expired")
            ended[workflow_id].append((step, "expired", value))
        elif st == "succeeded":
            ended[workflow_id].append((step, st, (res or "null").encode()))
        elif st in _ENDED:
            ended[workflow_id].append((step, st, error_value(task_id, st, err)))
        # Not ended any more (run again from the DLQ since): it notes itself again.
    return ended, spawned


def _refused(step: int, queue: str, rand: str, exc: Exception) -> Ended:
    """A step its submit refused for good: it ends ``failed`` with that error."""
    code = exc.code if isinstance(exc, DtqError) else type(exc).__name__
    value = _encoder.encode(
        {
            "dtq_error": {
                "task_id": f"{queue}:{rand}",
                "status": "failed",
                "type": code,
                "message": str(exc),
            }
        }
    )
    return step, TaskStatus.FAILED.value, value


def _at_step(index: int, exc: Exception) -> Exception:
    """``exc``, its message naming the step it refused."""
    if isinstance(exc, DtqError):
        exc.message = f"step {index}: {exc.message}"
        exc.args = (exc.message,)
        exc.detail.setdefault("step", index)
    return exc


def _one_step(expr: Expr, index: int, field: str) -> Node:
    """The one step ``expr`` is (a batch's callback or member)."""
    nodes, _ = compile_workflow(expr, start=index)
    if len(nodes) != 1:
        raise ValidationError(
            f"{field}: a batch's tasks and callbacks are single steps", field=field
        )
    return nodes[0]


def _batch_refusal(batch_id: str, outcome: str, value: str) -> Exception:
    if outcome == "not_found":
        return WorkflowNotFoundError(f"batch {batch_id} not found", workflow_id=batch_id)
    if outcome == "sealed":
        return InvalidStateError(
            f"batch {batch_id} is sealed: nothing can be added",
            workflow_id=batch_id,
            status="sealed",
        )
    if outcome == "full":
        return ValidationError(
            f"batch {batch_id} has {value} steps; a batch has at most {MAX_STEPS}"
        )
    return InvalidStateError(
        f"batch {batch_id} already ended ({value}): nothing can be added",
        workflow_id=batch_id,
        status=value,
    )


def _valid_id(workflow_id: str) -> bool:
    return len(workflow_id) == 32 and all(c in "0123456789abcdef" for c in workflow_id)
