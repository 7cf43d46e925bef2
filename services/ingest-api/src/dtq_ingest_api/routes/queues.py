"""Queue routes: statistics, create and delete, pause and resume, purge (admin actions are
audited)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from dtq_core.ops.admin import QueueStats
from dtq_core.protocol.queue_config import SETTINGS
from dtq_ingest_api.auth import ADMIN, READ, actor
from dtq_ingest_api.params import QueueName
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import (
    Count,
    QueueConfigure,
    QueueCreate,
    QueueCreated,
    QueueDeleted,
    QueueList,
    QueueState,
)
from dtq_ingest_api.state import Svc


@get(
    "/queues",
    guards=[READ],
    operation_id="listQueues",
    tags=["queues"],
    summary="Every queue's statistics",
    responses=responses(),
)
async def list_queues(svc: Svc) -> QueueList:
    """Depth per priority, delayed, in flight, dead, the oldest waiting task's age, paused."""
    return QueueList(items=await svc.admin.queues())


@get(
    "/queues/{queue:str}",
    guards=[READ],
    operation_id="getQueue",
    tags=["queues"],
    summary="A queue's statistics",
    responses=responses(404, 422),
)
async def get_queue(queue: QueueName, svc: Svc) -> QueueStats:
    return await svc.admin.queue(queue)


@put(
    "/queues/{queue:str}",
    guards=[ADMIN],
    status_code=200,
    operation_id="configureQueue",
    tags=["queues"],
    summary="Change a queue's configuration",
    responses=responses(404, 409, 415, 422),
)
async def configure_queue(
    queue: QueueName, data: JSONBody[QueueConfigure], request: Request[Any, Any, Any], svc: Svc
) -> QueueStats:
    """The fields given change (the change is audited), the others stay, ``null`` clears a
    limit; the answer is the queue as ``GET`` shows it. Limits apply to the next claim and
    submit (docs/flow-control.md). ``partitions`` may only grow (422 when asked to shrink);
    409 ``queue_limit`` when the queue registry has no room for the new partitions. Producers
    and workers follow a growth within a second."""
    given = {
        name: value for name in SETTINGS if (value := getattr(data, name)) is not msgspec.UNSET
    }
    partitions = data.partitions if data.partitions is not msgspec.UNSET else None
    await svc.admin.configure(queue, partitions=partitions, actor=actor(request), **given)
    return await svc.admin.queue(queue)


@post(
    "/queues",
    guards=[ADMIN],
    status_code=201,
    operation_id="createQueue",
    tags=["queues"],
    summary="Create a queue",
    responses={
        200: ResponseSpec(QueueCreated, description="The queue existed already."),
        **responses(409, 415, 422),
    },
)
async def create_queue(
    data: JSONBody[QueueCreate], request: Request[Any, Any, Any], svc: Svc
) -> Response[QueueCreated]:
    """Submits are accepted only into queues that a worker serving them registered or that an
    admin created: this creates one before its workers start. 201 created, 200 when it
    existed; 409 ``queue_limit`` when the registry holds DTQ_MAX_QUEUES queues."""
    created = await svc.admin.create_queue(data.name, actor=actor(request))
    return Response(
        QueueCreated(queue=data.name, created=created), status_code=201 if created else 200
    )


@delete(
    "/queues/{queue:str}",
    guards=[ADMIN],
    status_code=200,
    operation_id="deleteQueue",
    tags=["queues"],
    summary="Delete an empty queue",
    responses=responses(404, 409, 422),
)
async def delete_queue(queue: QueueName, request: Request[Any, Any, Any], svc: Svc) -> QueueDeleted:
    """Its keys and its registry entry go; 409 ``queue_not_empty`` while it holds waiting,
    running, delayed or dead tasks (purge it and its DLQ first). Records of finished tasks
    stay until their retention ends."""
    await svc.admin.delete_queue(queue, actor=actor(request))
    return QueueDeleted(queue=queue, deleted=True)


@post(
    "/queues/{queue:str}/pause",
    guards=[ADMIN],
    status_code=200,
    operation_id="pauseQueue",
    tags=["queues"],
    summary="Pause a queue",
    responses=responses(404, 422),
)
async def pause_queue(queue: QueueName, request: Request[Any, Any, Any], svc: Svc) -> QueueState:
    """Workers start no new task of the queue; running tasks finish."""
    await svc.admin.pause(queue, actor=actor(request))
    return QueueState(queue=queue, paused=True)


@post(
    "/queues/{queue:str}/resume",
    guards=[ADMIN],
    status_code=200,
    operation_id="resumeQueue",
    tags=["queues"],
    summary="Resume a queue",
    responses=responses(404, 422),
)
async def resume_queue(queue: QueueName, request: Request[Any, Any, Any], svc: Svc) -> QueueState:
    await svc.admin.resume(queue, actor=actor(request))
    return QueueState(queue=queue, paused=False)


@delete(
    "/queues/{queue:str}/tasks",
    guards=[ADMIN],
    status_code=200,
    operation_id="purgeQueue",
    tags=["queues"],
    summary="Cancel every waiting task of a queue",
    responses=responses(404, 422),
)
async def purge_queue(queue: QueueName, request: Request[Any, Any, Any], svc: Svc) -> Count:
    """Queued, scheduled and retrying tasks become ``cancelled``; running tasks finish."""
    count = await svc.admin.purge(queue, actor=actor(request))
    return Count(queue=queue, count=count)


HANDLERS = [
    list_queues,
    get_queue,
    configure_queue,
    create_queue,
    delete_queue,
    pause_queue,
    resume_queue,
    purge_queue,
]
