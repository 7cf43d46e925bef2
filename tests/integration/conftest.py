"""Fixtures of the integration tests: a worker and a scheduler leader on the session's
Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dtq_core import TaskRegistry
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_devtools.testing import wait_until
from dtq_scheduler_leader.scheduler import Scheduler
from dtq_worker.worker import Worker

Stack = Callable[..., Awaitable[Scheduler]]


@pytest.fixture
async def stack(settings: Settings, redis: Any) -> AsyncIterator[Stack]:
    """``await stack(registry)``: a worker serving ``default`` and ``other`` and a scheduler
    leader, stopped at teardown."""
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
    clients: list[Any] = []

    async def start(registry: TaskRegistry, queues: list[str] | None = None) -> Scheduler:
        worker = Worker(settings, registry, queues or ["default", "other"])
        stop = asyncio.Event()
        running.append((stop, asyncio.create_task(worker.run(stop))))
        await wait_until(lambda: worker.state == "running", message="worker running")
        r = connect(settings)
        clients.append(r)
        scheduler = Scheduler(r, settings, replica_id="wf-test")
        stop2 = asyncio.Event()
        running.append((stop2, asyncio.create_task(scheduler.run(stop2))))
        await wait_until(lambda: scheduler.leadership.is_leader, message="leading")
        return scheduler

    yield start
    for stop, _ in running:
        stop.set()
    for _, task in running:
        await asyncio.wait_for(task, 20)
    for r in clients:
        await r.aclose()
