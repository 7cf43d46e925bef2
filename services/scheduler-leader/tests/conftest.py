"""Fixtures for the scheduler's tests: replicas that run in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_core.tasks import TaskRegistry
from dtq_scheduler_leader.scheduler import Scheduler


class Replica:
    """A scheduler replica with its own Redis client, running as a task of the test's loop."""

    def __init__(self, scheduler: Scheduler, redis: aioredis.Redis) -> None:
        self.scheduler = scheduler
        self.redis = redis
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.scheduler.leadership.replica_id

    @property
    def is_leader(self) -> bool:
        return self.scheduler.leadership.is_leader

    def start(self) -> Replica:
        self.task = asyncio.create_task(self.scheduler.run(self.stop_event), name=self.name)
        return self

    async def stop(self) -> None:
        """Clean stop (SIGTERM): duties finish, the lease is released."""
        self.stop_event.set()
        if self.task is not None:
            await self.task

    async def crash(self) -> None:
        """Like kill -9: every loop stops at once and the lease is left to expire."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


MakeReplica = Callable[..., Awaitable[Replica]]


@pytest.fixture
async def make_replica(redis: aioredis.Redis, settings: Settings) -> AsyncIterator[MakeReplica]:
    """``await make_replica("a", start=True, **setting_overrides)``; all are crashed and
    closed at teardown (``redis`` is requested first so the database is flushed before)."""
    made: list[Replica] = []

    async def make(
        name: str, *, start: bool = True, registry: TaskRegistry | None = None, **overrides: Any
    ) -> Replica:
        s = settings.with_overrides(**overrides) if overrides else settings
        client = connect(s, client_name=f"test-scheduler-{name}")
        replica = Replica(Scheduler(client, s, replica_id=name, registry=registry), client)
        made.append(replica)
        return replica.start() if start else replica

    yield make
    for replica in made:
        await replica.crash()
        await replica.redis.aclose()
