"""Liveness, readiness and metrics, outside ``/api/v1`` and without a key."""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from litestar import Response, get
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from dtq_core.errors import LibraryMissingError
from dtq_core.infra.cluster import each_master
from dtq_core.infra.connection import RETRYABLE
from dtq_ingest_api.metrics import MULTIPROC_ENV
from dtq_ingest_api.schemas import Health, Readiness
from dtq_ingest_api.state import Services, Svc

READY_TIMEOUT_S = 2.0
"""A readiness probe that hangs is as bad as a failed one: answer within this."""


@get(
    "/health",
    operation_id="health",
    tags=["service"],
    summary="The process lives",
)
async def health() -> Health:
    """200 while the process can answer; it does not look at Redis (see ``/ready``)."""
    return Health(status="ok")


CONFIG_NAMES = ("maxmemory-policy", "appendonly", "appendfsync")


async def _config(svc: Services) -> dict[str, str] | None:
    """``maxmemory-policy``, ``appendonly`` and ``appendfsync``; ``None`` when CONFIG is not
    allowed. On a cluster every master answers, and a setting whose masters differ reads as
    their values joined by commas (``everysec,no``): one master that may evict is enough to
    lose tasks, so the policy must be ``noeviction`` on all of them."""
    try:
        replies = await each_master(svc.redis, "CONFIG GET", *CONFIG_NAMES)
    except ResponseError:
        return None  # NOPERM from an ACL, or the command renamed away
    merged: dict[str, str] = {}
    for name in CONFIG_NAMES:
        values = sorted({cast(dict[str, str], r)[name] for r in replies if name in r})
        if values:
            merged[name] = ",".join(values)
    return merged


@get(
    "/ready",
    operation_id="ready",
    tags=["service"],
    summary="Redis answers and keeps dtq's keys",
    responses={503: ResponseSpec(Readiness, description="Not ready; `reasons` says why.")},
)
async def ready(svc: Svc) -> Response[Readiness]:
    """200 when Redis answers PING, holds this version's function library (loaded here when
    missing and this service's Redis user may load it; on a cluster, every master) and its
    ``maxmemory-policy`` is ``noeviction`` (any other policy lets Redis delete queued tasks
    under memory pressure); 503 otherwise, naming the reason. When the server refuses CONFIG
    the policy is reported as ``unknown`` and does not block readiness."""
    reasons: list[str] = []
    config: dict[str, str] | None = None
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await svc.redis.ping()
            config = await _config(svc)
            await svc.client.scripts.ensure()
    except LibraryMissingError as exc:
        reasons.append(exc.message)
    except (AuthenticationError, NoPermissionError):
        reasons.append("redis refused this service's credentials")
    except RETRYABLE:  # refused, reset, the timeout above: what a loop would wait out
        reasons.append("redis did not answer PING")
    if reasons:
        body = Readiness(
            status="not_ready", redis="unavailable", maxmemory_policy="unknown", reasons=reasons
        )
        return Response(body, status_code=503)
    notes: list[str] = []
    if config is None:
        policy = "unknown"
        notes.append(
            "CONFIG GET is not allowed for this Redis user: the eviction policy is unknown"
        )
    else:
        policy = config.get("maxmemory-policy", "unknown")
        if policy != "noeviction":
            reasons.append(
                f"maxmemory-policy is {policy}: Redis may evict queued tasks; set noeviction"
            )
    body = Readiness(
        status="not_ready" if reasons else "ready",
        redis="ok",
        maxmemory_policy=policy,
        reasons=reasons,
        notes=notes,
        appendonly=config.get("appendonly") if config else None,
        appendfsync=config.get("appendfsync") if config else None,
    )
    return Response(body, status_code=503 if reasons else 200)


@get(
    "/metrics",
    operation_id="metrics",
    tags=["service"],
    summary="Prometheus metrics",
    media_type=CONTENT_TYPE_LATEST,
)
async def metrics(state: State) -> Response[bytes]:
    """Every process's metrics, added up, when ``DTQ_API_WORKERS`` > 1 (each process writes
    its samples to the shared ``PROMETHEUS_MULTIPROC_DIR``): a scrape reaches one process at
    random but always sees all of them."""
    registry: Any = state.metrics.registry
    if MULTIPROC_ENV in os.environ:
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


HANDLERS = [health, ready, metrics]
