"""The worker registry route."""

from __future__ import annotations

from litestar import get

from dtq_ingest_api.auth import READ
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import WorkerList
from dtq_ingest_api.state import Svc


@get(
    "/workers",
    guards=[READ],
    operation_id="listWorkers",
    tags=["workers"],
    summary="Every worker",
    responses=responses(),
)
async def list_workers(svc: Svc) -> WorkerList:
    """Id, host, queues, concurrency, in flight, processed, last heartbeat and state
    (``running``, ``draining``, or ``stale`` after three missed heartbeats)."""
    return WorkerList(items=await svc.admin.workers())


HANDLERS = [list_workers]
