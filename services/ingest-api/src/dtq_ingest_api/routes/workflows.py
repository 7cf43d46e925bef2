"""Workflow routes: submit one (the JSON form of chains, groups and chords), look one up with
every step, list them, cancel one (docs/workflows.md)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import ResponseHeader
from litestar.params import JSONBody, PathParameter, QueryParameter

from dtq_core.canvas import from_json
from dtq_core.errors import WorkflowNotFoundError
from dtq_core.messages import WorkflowRecord, WorkflowStatus, WorkflowSummary
from dtq_ingest_api.auth import ADMIN, READ, SUBMIT, actor
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import WorkflowState, WorkflowSubmit, WorkflowSubmitted
from dtq_ingest_api.state import Svc

WorkflowId = Annotated[
    str,
    PathParameter(
        description="The workflow id the submit returned (32 hex digits).",
        min_length=1,
        max_length=64,
    ),
]
LIST_MAX = 200


class WorkflowList(msgspec.Struct, frozen=True, kw_only=True):
    workflows: list[WorkflowSummary]
    next_before_ms: int | None
    """Pass back as ``before_ms`` for the next page (``null``: this was the last)."""


def _not_found(workflow_id: str) -> WorkflowNotFoundError:
    return WorkflowNotFoundError(
        f"workflow {workflow_id[:64]!r} not found", workflow_id=workflow_id[:64]
    )


@post(
    "/workflows",
    guards=[SUBMIT],
    status_code=201,
    operation_id="submitWorkflow",
    tags=["workflows"],
    summary="Submit a workflow",
    response_headers=[
        ResponseHeader(
            name="Location",
            description="The workflow's URL, /api/v1/workflows/{id}.",
            documentation_only=True,
        )
    ],
    responses=responses(413, 415, 422, 429),
)
async def submit_workflow(data: JSONBody[WorkflowSubmit], svc: Svc) -> Response[WorkflowSubmitted]:
    """Every step is routed and checked as a task submit would be before anything is written
    (422 names the step: ``workflow.chain[1].task``, or ``step 3: ...``); its first steps are
    submitted at once."""
    expr = from_json(data.workflow)
    handle = await svc.client.enqueue_workflow(expr, name=data.name, on_failure=data.on_failure)
    record = await svc.client.workflows.get(handle.id, steps=False)
    return Response(
        WorkflowSubmitted(
            id=handle.id,
            status=WorkflowStatus.RUNNING,
            steps=record.steps_total if record is not None else 0,
        ),
        status_code=201,
        headers={"Location": f"/api/v1/workflows/{handle.id}"},
    )


@get(
    "/workflows",
    guards=[READ],
    operation_id="listWorkflows",
    tags=["workflows"],
    summary="Recent workflows, newest first",
    responses=responses(422),
)
async def list_workflows(
    *,
    svc: Svc,
    status: Annotated[WorkflowStatus | None, QueryParameter()] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=LIST_MAX)] = 50,
    before_ms: Annotated[
        int | None,
        QueryParameter(ge=0, description="Only workflows created before this (ms since 1970)."),
    ] = None,
) -> WorkflowList:
    """Workflows of the last DTQ_TASK_RETENTION_S, of one ``status`` if given."""
    found, next_before = await svc.client.workflows.page(
        status=status, limit=limit, before_ms=before_ms
    )
    return WorkflowList(workflows=found, next_before_ms=next_before)


@get(
    "/workflows/{workflow_id:str}",
    guards=[READ],
    operation_id="getWorkflow",
    tags=["workflows"],
    summary="A workflow and every step",
    responses=responses(404),
)
async def get_workflow(workflow_id: WorkflowId, svc: Svc) -> WorkflowRecord:
    """Its status, result or error, and each step's status, attempts, timing, and the value it
    passed on."""
    record = await svc.client.workflows.get(workflow_id)
    if record is None:
        raise _not_found(workflow_id)
    return record


@post(
    "/workflows/{workflow_id:str}/cancel",
    guards=[ADMIN],
    status_code=200,
    operation_id="cancelWorkflow",
    tags=["workflows"],
    summary="Cancel a workflow",
    responses=responses(404, 409),
)
async def cancel_workflow(
    workflow_id: WorkflowId, request: Request[Any, Any, Any], svc: Svc
) -> WorkflowState:
    """Steps not submitted are never submitted; every step's task not ended is cancelled,
    running ones included (their workers are told to stop). 409 when it already ended."""
    status = await svc.client.workflows.cancel(workflow_id)
    await svc.admin.audit(
        "workflow.cancel", queue="", actor=actor(request), count=1, detail=f"id={workflow_id}"
    )
    return WorkflowState(id=workflow_id, status=status)


HANDLERS = [submit_workflow, list_workflows, get_workflow, cancel_workflow]
