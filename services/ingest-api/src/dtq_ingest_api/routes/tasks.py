"""Task routes: submit (one or a batch), look up, list, long-poll the outcome, cancel, retry."""

from __future__ import annotations

from typing import Annotated, Any, cast
from urllib.parse import quote

import msgspec
import structlog
from litestar import Request, Response, get, post
from litestar.datastructures import ResponseHeader
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import HeaderParameter, JSONBody, QueryParameter

from dtq_core import messages
from dtq_core.errors import DtqError, TaskNotFoundError
from dtq_core.handles import TaskHandle
from dtq_core.messages import TaskRecord, TaskStatus
from dtq_core.ops.browse import LIST_LIMIT_MAX, TaskPage, list_tasks
from dtq_ingest_api import body
from dtq_ingest_api.auth import ADMIN, READ, SUBMIT, actor
from dtq_ingest_api.openapi_config import BatchOperation
from dtq_ingest_api.params import TaskId
from dtq_ingest_api.problems import ApiError, from_dtq_error, problem, responses
from dtq_ingest_api.schemas import (
    BATCH_MAX,
    NAME_RE,
    WAIT_MAX_S,
    BatchEnvelope,
    BatchItem,
    BatchResponse,
    FieldError,
    Outcome,
    Pending,
    SubmitRequest,
    Submitted,
    TaskState,
)
from dtq_ingest_api.state import Svc

log = structlog.get_logger()

BATCH_ENVELOPE_BYTES = BATCH_MAX * 1024
"""Room in a batch body for each item's fields around its payload."""

IdempotencyHeader = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        min_length=1,
        max_length=256,
        required=False,
        description="Same as the body's idempotency_key (give one of them, or both equal).",
    ),
]


def _submitted(handle: TaskHandle[Any]) -> Submitted:
    return Submitted(
        id=handle.id,
        status=handle.submitted_status,
        queue=handle.queue,
        created=handle.created,
        dedup=cast(Any, handle.dedup),
    )


def _location(task_id: str) -> str:
    return f"/api/v1/tasks/{quote(task_id, safe=':')}"


def _not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(f"task {task_id[:100]!r} not found", task_id=task_id[:100])


@post(
    "/tasks",
    guards=[SUBMIT],
    status_code=201,
    operation_id="submitTask",
    tags=["tasks"],
    summary="Submit a task",
    response_headers=[
        ResponseHeader(
            name="Location",
            description="The task's URL, /api/v1/tasks/{id} (201 and 200).",
            documentation_only=True,
        )
    ],
    responses={
        200: ResponseSpec(Submitted, description="Idempotent replay: the original task."),
        **responses(409, 413, 415, 422, 429),
    },
)
async def submit_task(
    data: JSONBody[SubmitRequest], svc: Svc, idempotency_key: IdempotencyHeader = None
) -> Response[Submitted]:
    """201 with the new task; 200 with the original task when the same idempotency key came
    with the same request before; 409 when it came with a different one."""
    if idempotency_key is not None and data.idempotency_key not in (None, idempotency_key):
        raise ApiError(
            "validation_error",
            "the Idempotency-Key header and the body's idempotency_key differ",
            errors=[
                FieldError(
                    message="differs from the Idempotency-Key header",
                    field="idempotency_key",
                    pointer="/idempotency_key",
                    source="body",
                )
            ],
        )
    try:
        handle = await svc.client.submit(data.to_core(idempotency_key))
    except DtqError as exc:
        svc.metrics.submitted.labels(outcome=exc.code).inc()
        raise
    svc.metrics.submitted.labels(outcome="created" if handle.created else "replayed").inc()
    # The request's log line is about this task (and the submit's trace, when traced).
    if handle.trace_id is None:
        structlog.contextvars.bind_contextvars(task_id=handle.id, queue=handle.queue)
    else:
        structlog.contextvars.bind_contextvars(
            task_id=handle.id, queue=handle.queue, trace_id=handle.trace_id
        )
    return Response(
        _submitted(handle),
        status_code=201 if handle.created else 200,
        headers={"Location": _location(handle.id)},
    )


@post(
    "/tasks/batch",
    guards=[SUBMIT],
    status_code=200,
    operation_id="submitTasks",
    operation_class=BatchOperation,
    tags=["tasks"],
    summary="Submit up to 1000 tasks",
    responses=responses(413, 415, 422),
)
async def submit_batch(request: Request[Any, Any, Any], svc: Svc) -> BatchResponse:
    """One result per item, in order; each item is checked on its own and only the valid ones
    are submitted (one round trip to Redis). An item's ``status`` is what it would have got
    alone: 201, 200 (replay), 409, 413, 422 or 429."""
    envelope = await body.read(request, BatchEnvelope)
    items: list[SubmitRequest | ApiError] = []
    for i, raw in enumerate(envelope.tasks):
        try:
            # The whole body's keys were checked by body.read.
            decoded = body.decode(raw, SubmitRequest, prefix=f"/tasks/{i}", unique_keys=False)
            items.append(decoded)
        except ApiError as exc:
            items.append(exc)
    valid = [item.to_core() for item in items if isinstance(item, SubmitRequest)]
    handles = await svc.client.submit(valid) if valid else []
    trace_id = next((h.trace_id for h in handles if isinstance(h, TaskHandle)), None)
    if trace_id is not None:
        structlog.contextvars.bind_contextvars(trace_id=trace_id)
    submitted = iter(handles)
    results: list[BatchItem] = []
    for index, item in enumerate(items):
        outcome = item if isinstance(item, ApiError) else next(submitted)
        if isinstance(outcome, TaskHandle):
            results.append(
                BatchItem(
                    index=index, status=201 if outcome.created else 200, task=_submitted(outcome)
                )
            )
            continue
        if isinstance(outcome, ApiError):
            error = problem(outcome.code, outcome.detail, errors=outcome.errors)
        elif isinstance(outcome, DtqError):
            error, _ = from_dtq_error(outcome)
        else:
            log.error("batch_item_failed", index=index, exc_info=outcome)
            error = problem("internal_error", "the server failed to handle this item")
        results.append(BatchItem(index=index, status=error.status, error=error))
    created = sum(r.status == 201 for r in results)
    replayed = sum(r.status == 200 for r in results)
    for outcome_name, count in (("created", created), ("replayed", replayed)):
        if count:
            svc.metrics.submitted.labels(outcome=outcome_name).inc(count)
    for r in results:
        if r.error is not None:
            svc.metrics.submitted.labels(outcome=r.error.code).inc()
    return BatchResponse(
        results=results,
        created=created,
        replayed=replayed,
        refused=len(results) - created - replayed,
    )


@get(
    "/tasks",
    guards=[READ],
    operation_id="listTasks",
    tags=["tasks"],
    summary="Recent tasks, newest first",
    responses=responses(422),
)
async def get_tasks(
    *,
    svc: Svc,
    queue: Annotated[
        str | None, QueryParameter(min_length=1, max_length=64, pattern=NAME_RE)
    ] = None,
    status: Annotated[TaskStatus | None, QueryParameter()] = None,
    task: Annotated[
        str | None, QueryParameter(min_length=1, max_length=64, pattern=NAME_RE)
    ] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=LIST_LIMIT_MAX)] = 50,
    cursor: Annotated[str | None, QueryParameter(min_length=1, max_length=200)] = None,
) -> TaskPage:
    """Tasks as their submits appear in the queues' event streams, so the list covers what
    those streams retain (the last ~DTQ_EVENTS_MAXLEN entries per queue). A page examines a
    bounded number of entries: it can hold fewer than ``limit`` tasks while ``next_cursor``
    is set; pass ``next_cursor`` back as ``cursor`` to continue."""
    return await list_tasks(
        svc.client, queue=queue, status=status, task=task, limit=limit, cursor=cursor
    )


@get(
    "/tasks/{task_id:str}",
    guards=[READ],
    operation_id="getTask",
    tags=["tasks"],
    summary="A task",
    responses=responses(404),
)
async def get_task(task_id: TaskId, svc: Svc) -> TaskRecord:
    """Status, attempts, timestamps, error history, progress, and the result while kept."""
    record = await svc.client.get(task_id)
    if record is None:
        raise _not_found(task_id)
    return record


@get(
    "/tasks/{task_id:str}/result",
    guards=[READ],
    operation_id="getTaskResult",
    tags=["tasks"],
    summary="Wait for a task's outcome",
    responses={
        200: ResponseSpec(Outcome, description="The task ended: how."),
        202: ResponseSpec(Pending, description="Not finished when the wait ended."),
        **responses(404, 422, 429),
    },
)
async def get_result(
    task_id: TaskId,
    request: Request[Any, Any, Any],
    svc: Svc,
    wait: Annotated[
        float, QueryParameter(ge=0, le=WAIT_MAX_S, description="Seconds to wait for the outcome.")
    ] = 0.0,
) -> Response[Outcome | Pending]:
    """200 with the outcome as soon as the task ends (the wait is woken by the queue's event
    stream, it does not poll); 202 with the current status when ``wait`` seconds pass first.
    429 ``too_many_waits`` when the key (DTQ_API_WAITS_PER_KEY) or the server
    (DTQ_API_WAITS_MAX) already holds as many waits as allowed."""
    try:
        if wait > 0:
            with svc.waits.hold(actor(request)):
                return Response(_ended(await svc.client.wait(task_id, timeout=wait)))
        return Response(_ended(await svc.client.wait(task_id, timeout=0)))
    except TaskNotFoundError:
        raise _not_found(task_id) from None
    except TimeoutError:
        pass
    record = await svc.client.get(task_id)
    if record is None:
        raise _not_found(task_id)
    if record.status.terminal:  # it ended just as the wait did
        return Response(_ended(await svc.client.wait(task_id, timeout=0)))
    progress = record.progress.value if record.progress is not None else None
    pending = Pending(
        id=record.id, status=record.status, attempts=record.attempts, progress=progress
    )
    return Response(pending, status_code=202)


@post(
    "/tasks/{task_id:str}/cancel",
    guards=[ADMIN],
    status_code=200,
    operation_id="cancelTask",
    tags=["tasks"],
    summary="Cancel a task",
    responses=responses(404, 409),
)
async def cancel_task(task_id: TaskId, request: Request[Any, Any, Any], svc: Svc) -> TaskState:
    """Queued, scheduled and retrying tasks are cancelled at once (``cancelled``); a running
    task's worker is told to stop its handler (``running`` until it does). 409 when the task
    already ended."""
    try:
        status = await svc.client.cancel(task_id)
    except TaskNotFoundError:
        raise _not_found(task_id) from None
    await svc.admin.audit(
        "task.cancel",
        queue=task_id.partition(":")[0],
        actor=actor(request),
        count=1,
        detail=f"ids={task_id}",
    )
    return TaskState(id=task_id, status=status)


@post(
    "/tasks/{task_id:str}/retry",
    guards=[ADMIN],
    status_code=200,
    operation_id="retryTask",
    tags=["tasks"],
    summary="Run a dead or failed task again",
    responses=responses(404, 409),
)
async def retry_task(task_id: TaskId, request: Request[Any, Any, Any], svc: Svc) -> TaskState:
    """Only dead or failed tasks (409 otherwise); the attempt budget starts over and the error
    history is kept."""
    try:
        status = await svc.client.retry(task_id)
    except TaskNotFoundError:
        raise _not_found(task_id) from None
    await svc.admin.audit(
        "task.retry",
        queue=task_id.partition(":")[0],
        actor=actor(request),
        count=1,
        detail=f"ids={task_id}",
    )
    return TaskState(id=task_id, status=status)


HANDLERS = [submit_task, get_tasks, get_task, get_result, cancel_task, retry_task]
"""Every task route but the batch, which has its own body limit."""


def _ended(outcome: messages.Outcome[Any]) -> Outcome:
    """The SDK's outcome as the route's response type."""
    return Outcome(**msgspec.structs.asdict(outcome))
