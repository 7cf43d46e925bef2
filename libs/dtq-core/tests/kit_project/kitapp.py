"""The tasks the test kit's own tests run (libs/dtq-core/tests/test_testing_kit.py)."""

from __future__ import annotations

import asyncio

from dtq_core import TaskContext, TaskRegistry

registry = TaskRegistry()
ran: list[str] = []
"""What the handlers did, in order: the worker runs them in the test's own process."""
attempts: dict[str, int] = {}


@registry.task(name="kit.add")
async def add(ctx: TaskContext, x: int, y: int) -> int:
    ran.append(f"add {x} {y}")
    return x + y


@registry.task(name="kit.flaky", max_attempts=4)
async def flaky(ctx: TaskContext, key: str, fail_times: int) -> str:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] <= fail_times:
        raise RuntimeError(f"attempt {attempts[key]} fails")
    return f"ok after {attempts[key]}"


@registry.task(name="kit.stuck_once")
async def stuck_once(ctx: TaskContext) -> str:
    """Hangs on its first attempt (its worker is crashed meanwhile), returns on the next."""
    ran.append(f"stuck_once attempt {ctx.attempt}")
    if ctx.attempt == 1:
        await asyncio.Event().wait()
    return f"done on attempt {ctx.attempt}"


@registry.task(name="kit.slow")
async def slow(ctx: TaskContext, seconds: float) -> None:
    await asyncio.sleep(seconds)


@registry.task(name="kit.tick")
async def tick(ctx: TaskContext) -> None:
    ran.append("tick")


registry.schedule("hourly", task="kit.tick", cron="0 * * * *", misfire="skip")
