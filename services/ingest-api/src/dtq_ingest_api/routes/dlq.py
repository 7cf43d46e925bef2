"""Dead-letter queue routes: browse, requeue, discard, purge (admin actions are audited)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, delete, get, post
from litestar.params import JSONBody, QueryParameter

from dtq_core.ops.admin import DLQ_PAGE_MAX, DlqPage
from dtq_ingest_api.auth import ADMIN, READ, actor
from dtq_ingest_api.params import QueueName, TaskId
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import NAME_RE, Count, RequeueRequest
from dtq_ingest_api.state import Svc


@get(
    "/queues/{queue:str}/dlq",
    guards=[READ],
    operation_id="listDeadTasks",
    tags=["dlq"],
    summary="Dead tasks of a queue, newest first",
    responses=responses(404, 422),
)
async def list_dead(
    queue: QueueName,
    svc: Svc,
    limit: Annotated[int, QueryParameter(ge=1, le=DLQ_PAGE_MAX)] = 50,
    cursor: Annotated[str | None, QueryParameter(min_length=1, max_length=50)] = None,
    task: Annotated[
        str | None, QueryParameter(min_length=1, max_length=64, pattern=NAME_RE)
    ] = None,
) -> DlqPage:
    """Pass ``next_cursor`` back as ``cursor`` for the next page."""
    return await svc.admin.dlq_list(queue, limit=limit, cursor=cursor, task=task)


@post(
    "/queues/{queue:str}/dlq/requeue",
    guards=[ADMIN],
    status_code=200,
    operation_id="requeueDeadTasks",
    tags=["dlq"],
    summary="Run dead tasks again",
    responses=responses(404, 409, 413, 415, 422),
)
async def requeue_dead(
    queue: QueueName, data: JSONBody[RequeueRequest], request: Request[Any, Any, Any], svc: Svc
) -> Count:
    """Exactly one of ``ids`` (nothing is requeued unless every id is a dead task of this
    queue), ``all: true``, or ``task`` (every dead task with that name)."""
    count = await svc.admin.dlq_requeue(
        queue,
        data.ids,
        all=data.all,
        task=data.task,
        actor=actor(request),
    )
    return Count(queue=queue, count=count)


@delete(
    "/queues/{queue:str}/dlq/{task_id:str}",
    guards=[ADMIN],
    status_code=200,
    operation_id="discardDeadTask",
    tags=["dlq"],
    summary="Delete one dead task",
    responses=responses(404, 409, 422),
)
async def discard_dead(
    queue: QueueName, task_id: TaskId, request: Request[Any, Any, Any], svc: Svc
) -> Count:
    """409 when the task is not dead (or failed)."""
    count = await svc.admin.dlq_discard(queue, [task_id], actor=actor(request))
    return Count(queue=queue, count=count)


@delete(
    "/queues/{queue:str}/dlq",
    guards=[ADMIN],
    status_code=200,
    operation_id="purgeDeadTasks",
    tags=["dlq"],
    summary="Delete every dead task of a queue",
    responses=responses(404, 422),
)
async def purge_dead(queue: QueueName, request: Request[Any, Any, Any], svc: Svc) -> Count:
    count = await svc.admin.dlq_purge(queue, actor=actor(request))
    return Count(queue=queue, count=count)


HANDLERS = [list_dead, requeue_dead, discard_dead, purge_dead]
