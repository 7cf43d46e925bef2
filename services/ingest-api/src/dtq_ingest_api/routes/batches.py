"""Batch routes: create one with its callbacks, add tasks to it over time, seal it, read its
live counts, cancel it (docs/workflows.md, "Batches")."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.datastructures import ResponseHeader
from litestar.params import JSONBody, PathParameter

from dtq_core.canvas import from_json
from dtq_core.errors import WorkflowNotFoundError
from dtq_core.messages import BatchRecord
from dtq_ingest_api.auth import ADMIN, READ, SUBMIT, actor
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import BatchAdd, BatchAdded, BatchCreate, WorkflowState
from dtq_ingest_api.state import Svc

BatchId = Annotated[
    str,
    PathParameter(
        description="The batch id its create returned (32 hex digits).",
        min_length=1,
        max_length=64,
    ),
]


def _not_found(batch_id: str) -> WorkflowNotFoundError:
    return WorkflowNotFoundError(f"batch {batch_id[:64]!r} not found", workflow_id=batch_id[:64])


async def _record(svc: Svc, batch_id: str) -> BatchRecord:
    record = await svc.client.workflows.get_batch(batch_id)
    if record is None:
        raise _not_found(batch_id)
    return record


@post(
    "/batches",
    guards=[SUBMIT],
    status_code=201,
    operation_id="createBatch",
    tags=["batches"],
    summary="Create a batch",
    response_headers=[
        ResponseHeader(
            name="Location",
            description="The batch's URL, /api/v1/batches/{id}.",
            documentation_only=True,
        )
    ],
    responses=responses(413, 415, 422, 429),
)
async def create_batch(data: JSONBody[BatchCreate], svc: Svc) -> Response[BatchRecord]:
    """An open batch: add tasks with ``POST /batches/{id}/tasks``, then seal it. Each callback
    is one step, routed and checked as a task submit would be; it receives ``{"batch_id",
    "total", "succeeded", "failed"}`` first in its arguments."""
    on_success = from_json(data.on_success, "on_success") if data.on_success else None
    on_complete = from_json(data.on_complete, "on_complete") if data.on_complete else None
    batch = await svc.client.batch(on_success=on_success, on_complete=on_complete, name=data.name)
    return Response(
        await _record(svc, batch.id),
        status_code=201,
        headers={"Location": f"/api/v1/batches/{batch.id}"},
    )


@post(
    "/batches/{batch_id:str}/tasks",
    guards=[SUBMIT],
    status_code=201,
    operation_id="addToBatch",
    tags=["batches"],
    summary="Add tasks to an open batch",
    responses=responses(404, 409, 413, 415, 422, 429),
)
async def add_to_batch(batch_id: BatchId, data: JSONBody[BatchAdd], svc: Svc) -> BatchAdded:
    """All or none: a refused task (422 names it) adds nothing. 409 once the batch is sealed
    or ended."""
    members = [from_json(t, f"tasks[{i}]") for i, t in enumerate(data.tasks)]
    ids = await svc.client.batch_of(batch_id).add_many(members)
    return BatchAdded(task_ids=ids)


@post(
    "/batches/{batch_id:str}/seal",
    guards=[SUBMIT],
    status_code=200,
    operation_id="sealBatch",
    tags=["batches"],
    summary="Seal a batch",
    responses=responses(404),
)
async def seal_batch(batch_id: BatchId, svc: Svc) -> BatchRecord:
    """Nothing can be added after; the callbacks run once every task has ended. Sealing
    again changes nothing."""
    await svc.client.batch_of(batch_id).seal()
    return await _record(svc, batch_id)


@get(
    "/batches/{batch_id:str}",
    guards=[READ],
    operation_id="getBatch",
    tags=["batches"],
    summary="A batch's live counts",
    responses=responses(404),
)
async def get_batch(batch_id: BatchId, svc: Svc) -> BatchRecord:
    """Tasks added, pending, succeeded and failed, and each callback's state. Every task as
    a step: ``GET /workflows/{id}``."""
    return await _record(svc, batch_id)


@post(
    "/batches/{batch_id:str}/cancel",
    guards=[ADMIN],
    status_code=200,
    operation_id="cancelBatch",
    tags=["batches"],
    summary="Cancel a batch",
    responses=responses(404, 409),
)
async def cancel_batch(
    batch_id: BatchId, request: Request[Any, Any, Any], svc: Svc
) -> WorkflowState:
    """Every task not ended is cancelled, running ones included; no callback runs. 409 when it
    already ended."""
    await _record(svc, batch_id)
    status = await svc.client.batch_of(batch_id).cancel()
    await svc.admin.audit(
        "batch.cancel", queue="", actor=actor(request), count=1, detail=f"id={batch_id}"
    )
    return WorkflowState(id=batch_id, status=status)


HANDLERS = [create_batch, seal_batch, get_batch, cancel_batch]
"""Routes with a single task's body limit; :data:`add_to_batch` takes a batch's."""
