"""Fixtures for in-process worker tests: start workers on the session's Redis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from dtq_core import Client, TaskRegistry
from dtq_core.infra.settings import Settings
from dtq_devtools.testing import wait_until
from dtq_worker.worker import Worker

Runner = Callable[..., Awaitable[Worker]]


@pytest.fixture
async def run_worker(settings: Settings) -> AsyncIterator[Runner]:
    """``await run_worker(registry, queues=None, **setting_overrides)`` -> a running Worker."""
    started: list[tuple[Worker, asyncio.Event, asyncio.Task[None]]] = []

    async def start(
        registry: TaskRegistry, queues: list[str] | None = None, **overrides: Any
    ) -> Worker:
        s = settings.with_overrides(**overrides) if overrides else settings
        worker = Worker(s, registry, queues or ["default"])
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        started.append((worker, stop, task))
        await wait_until(lambda: worker.state == "running", message="worker running")
        return worker

    yield start
    for _, stop, _ in started:
        stop.set()
    for _, _, task in started:
        await asyncio.wait_for(task, 20)


@pytest.fixture
async def promoter(client: Client) -> AsyncIterator[None]:
    """Promotes due retries, as the scheduler leader would (these tests run no scheduler)."""
    qk = client.queue_keys("default")

    async def loop() -> None:
        while True:
            await client.scripts.promote(
                qk, epoch=1, limit=100, events_maxlen=1000, retention_ms=60000
            )
            await asyncio.sleep(0.01)

    task = asyncio.create_task(loop())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
