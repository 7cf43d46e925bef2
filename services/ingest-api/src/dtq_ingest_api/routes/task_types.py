"""``GET /api/v1/task-types``: the tasks the live workers run, with the JSON Schema of each
handler's arguments (what submits are checked against)."""

from __future__ import annotations

import msgspec
from litestar import get

from dtq_core.messages import TaskType
from dtq_ingest_api.auth import READ
from dtq_ingest_api.problems import responses
from dtq_ingest_api.state import Svc


class TaskTypes(msgspec.Struct, frozen=True, kw_only=True):
    task_types: list[TaskType]


@get(
    "/task-types",
    guards=[READ],
    operation_id="listTaskTypes",
    tags=["tasks"],
    summary="The tasks the live workers run, and their arguments' schemas",
    responses=responses(),
)
async def list_task_types(svc: Svc) -> TaskTypes:
    """By name: the queue its definition names, the queues whose workers run it, and the JSON
    Schema of its handler's arguments from their annotations (``x-positional``: the names
    positional ``args`` bind to). A submit whose arguments do not fit is refused with 422,
    field ``args``."""
    return TaskTypes(task_types=await svc.client.router.task_types())


HANDLERS = [list_task_types]
