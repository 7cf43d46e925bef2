"""The ``h`` fixture of the transition tests: a harness on one queue that checks the
invariants at rest after each test (see :mod:`dtq_devtools.testing.transitions`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from dtq_core.infra.settings import Settings
from dtq_devtools.testing.transitions import Harness


@pytest.fixture
async def h(redis: aioredis.Redis, settings: Settings) -> AsyncIterator[Harness]:
    harness = Harness(redis, settings)
    yield harness
    if harness.check_invariants:
        await harness.assert_invariants()
