"""A queue's groups: list them, read one, pause, resume or weigh one (changes are audited;
docs/flow-control.md, "Groups")."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, get, put
from litestar.params import JSONBody, PathParameter, QueryParameter

from dtq_core.ops.admin import GROUPS_PAGE_MAX, GroupPage, GroupStats
from dtq_core.protocol.submit import GROUP_MAX
from dtq_ingest_api.auth import ADMIN, READ, actor
from dtq_ingest_api.params import QueueName
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import GroupChange
from dtq_ingest_api.state import Svc

GroupName = Annotated[
    str,
    PathParameter(min_length=1, max_length=GROUP_MAX, description="A group name, URL-encoded."),
]


@get(
    "/queues/{queue:str}/groups",
    guards=[READ],
    operation_id="listGroups",
    tags=["groups"],
    summary="The groups of a queue, by name",
    responses=responses(404, 422),
)
async def list_groups(
    queue: QueueName,
    svc: Svc,
    limit: Annotated[int, QueryParameter(ge=1, le=GROUPS_PAGE_MAX)] = 100,
    cursor: Annotated[str | None, QueryParameter(min_length=1, max_length=GROUP_MAX)] = None,
) -> GroupPage:
    """Groups holding tasks, and groups paused or given a weight, with their waiting, queued
    and running tasks. Pass ``next_cursor`` back as ``cursor`` for the next page."""
    return await svc.admin.groups(queue, limit=limit, cursor=cursor)


@get(
    "/queues/{queue:str}/groups/{group:str}",
    guards=[READ],
    operation_id="getGroup",
    tags=["groups"],
    summary="One group of a queue",
    responses=responses(404, 422),
)
async def get_group(queue: QueueName, group: GroupName, svc: Svc) -> GroupStats:
    """A group that holds nothing shows zeros."""
    return await svc.admin.group(queue, group)


@put(
    "/queues/{queue:str}/groups/{group:str}",
    guards=[ADMIN],
    status_code=200,
    operation_id="changeGroup",
    tags=["groups"],
    summary="Pause, resume or weigh one group",
    responses=responses(404, 415, 422),
)
async def change_group(
    queue: QueueName,
    group: GroupName,
    data: JSONBody[GroupChange],
    request: Request[Any, Any, Any],
    svc: Svc,
) -> GroupStats:
    """A paused group's waiting tasks stay waiting and its running tasks finish; the other
    groups go on. A group of weight w gets w turns for another's one."""
    paused = data.paused if data.paused is not msgspec.UNSET else None
    weight = data.weight if data.weight is not msgspec.UNSET else None
    return await svc.admin.set_group(
        queue, group, paused=paused, weight=weight, actor=actor(request)
    )


HANDLERS = [list_groups, get_group, change_group]
