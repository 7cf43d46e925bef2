"""The per-minute history of the queues (``GET /stats/history``): what the dashboard's
overview charts on open and ``dtq stats`` prints."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.params import QueryParameter

from dtq_core.ops.admin import HistoryRange, QueueHistory
from dtq_ingest_api.auth import READ
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import NAME_RE
from dtq_ingest_api.state import Svc


@get(
    "/stats/history",
    guards=[READ],
    operation_id="getStatsHistory",
    tags=["stats"],
    summary="Per-minute throughput, failures, run times and depth",
    responses=responses(404, 422),
)
async def get_history(
    *,
    svc: Svc,
    range: Annotated[  # the query's name, which problems name too (no builtin is used here)
        HistoryRange, QueryParameter(description="How far back: `1h`, `6h` or `24h`.")
    ] = HistoryRange.HOUR,
    queue: Annotated[
        str | None,
        QueryParameter(
            min_length=1,
            max_length=64,
            pattern=NAME_RE,
            description="One queue (its partitions added up); every queue when left out.",
        ),
    ] = None,
) -> QueueHistory:
    """One value per minute and figure, oldest first, up to the current minute (counted up to
    ``as_of_ms``): tasks submitted, succeeded, retried, failed and expired; run times (count,
    total, longest); and the depth the scheduler leader noted once a minute (waiting, in
    flight, delayed; ``null`` where no leader noted it). Kept in Redis for a day, so it
    survives page loads and restarts (docs/architecture.md, "Per-minute history"). 404 for a
    queue that is not known."""
    return await svc.admin.history(range, queue)


HANDLERS = [get_history]
