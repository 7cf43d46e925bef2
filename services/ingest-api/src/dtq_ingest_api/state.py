"""What the app's lifespan owns (one Redis client and the dtq-core objects on top of it), and
the dependency that hands it to the routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis
import structlog
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import NamedDependency

from dtq_core.client import Client
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_core.ops.admin import Admin
from dtq_core.ops.schedules import ScheduleStore
from dtq_ingest_api.context import request_id
from dtq_ingest_api.metrics import ApiMetrics
from dtq_ingest_api.waits import WaitLimiter

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a route needs; one per app, made at start-up."""

    settings: Settings
    redis: aioredis.Redis
    client: Client
    admin: Admin
    schedules: ScheduleStore
    metrics: ApiMetrics
    waits: WaitLimiter


Svc = NamedDependency[Services]
"""How a route asks for the services: a parameter ``svc: Svc``."""


def services(state: State) -> Services:
    """Dependency ``svc`` of every route."""
    svc: Services = state.services
    return svc


@asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    """Open the Redis client at start-up and close it at shutdown.

    No Redis command runs here: the API starts (and ``/health`` answers) while Redis is down,
    and ``/ready`` says why it is not ready.
    """
    settings: Settings = app.state.settings
    redis = connect(settings, client_name="dtq-ingest-api")
    client = Client(redis, settings)
    app.state.services = Services(
        settings=settings,
        redis=redis,
        client=client,
        admin=Admin(client, request_id=request_id),
        schedules=ScheduleStore(
            redis, client.keys, max_payload_bytes=settings.tasks.max_payload_bytes
        ),
        metrics=app.state.metrics,
        waits=WaitLimiter(settings.api.waits_max, settings.api.waits_per_key, app.state.metrics),
    )
    if app.state.auth.open:
        log.warning(
            "auth_open_mode",
            message="DTQ_API_KEYS is empty: every route is open to anyone who can reach this "
            "port. Local development only; make keys with "
            "`dtq keys new NAME SCOPES`.",
        )
    else:
        log.info("auth_keys_loaded", keys=len(app.state.auth.keys))
    try:
        yield
    finally:
        await client.aclose()  # the waits' reader and its connection
        await redis.aclose()
        log.info("api_stopped")
