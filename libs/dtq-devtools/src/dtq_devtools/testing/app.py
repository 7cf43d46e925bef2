"""A task registry for dtq's own fault tests and benchmark (``dtq_devtools.testing.app:registry``).

Handlers record what they do in a side Redis (``DTQTEST_SIDE_URL``, when set) so a test can
count executions and duplicate side effects after killing processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import warnings
from typing import Any

import redis as sync_redis
import structlog

from dtq_core.canvas import step
from dtq_core.errors import PermanentError, Retry
from dtq_core.tasks import TaskContext, TaskRegistry

registry = TaskRegistry()
_side: sync_redis.Redis | None = None


def _side_redis() -> sync_redis.Redis | None:
    global _side  # noqa: PLW0603 - one lazily made connection per process
    url = os.environ.get("DTQTEST_SIDE_URL")
    if url and _side is None:
        _side = sync_redis.Redis.from_url(url)
    return _side


def _record(kind: str, ctx: TaskContext) -> None:
    side = _side_redis()
    if side is not None:
        side.rpush(f"{kind}", f"{ctx.task_id}|{ctx.attempt}|{os.getpid()}|{time.time()}")


@registry.task(name="noop", queue="default")
async def noop(ctx: TaskContext, *args: Any, **kwargs: Any) -> None:
    """Does nothing with whatever it is given (a payload of any size, say)."""
    return None


@registry.task(name="echo", queue="default")
async def echo(ctx: TaskContext, *args: Any, **kwargs: Any) -> dict[str, Any]:
    _record("exec_start", ctx)
    _record("exec_end", ctx)
    return {"args": list(args), "kwargs": kwargs, "attempt": ctx.attempt}


@registry.task(name="sleep", queue="default")
async def sleep(ctx: TaskContext, seconds: float) -> float:
    _record("exec_start", ctx)
    await asyncio.sleep(seconds)
    _record("exec_end", ctx)
    return seconds


@registry.task(name="member", queue="default")
async def member(ctx: TaskContext, value: int, seconds: float) -> int:
    """A workflow step that takes a while and answers its value (docs/workflows.md's chaos
    test counts its runs)."""
    _record("exec_start", ctx)
    await asyncio.sleep(seconds)
    _record("exec_end", ctx)
    return value


@registry.task(name="collect", queue="default")
async def collect(ctx: TaskContext, values: list[Any], seconds: float) -> list[Any]:
    """A chord's callback that takes a while: its runs are recorded apart (``callback_*``)."""
    _record("callback_start", ctx)
    await asyncio.sleep(seconds)
    _record("callback_end", ctx)
    side = _side_redis()
    if side is not None:
        side.rpush("callback_values", repr(values))
    return values


@registry.task(name="spawner", queue="default")
async def spawner(ctx: TaskContext, n: int, hold_s: float) -> int:
    """A parent that spawns ``n`` children (``child``) and waits for them (``gather``), records
    that this attempt spawned (a ``spawned`` entry), then holds ``hold_s`` before it finishes:
    the window in which a test kills its worker (tests/chaos/test_children.py)."""
    await ctx.spawn_many([step("child", args=[i]) for i in range(n)])
    await ctx.wait_children(then=step("gather"))
    _record("spawned", ctx)
    await asyncio.sleep(hold_s)
    return n


@registry.task(name="child", queue="default")
async def child(ctx: TaskContext, value: int) -> int:
    """A child of ``spawner``: each run pushes its value onto ``child_runs``."""
    side = _side_redis()
    if side is not None:
        side.rpush("child_runs", value)
    return value


@registry.task(name="gather", queue="default")
async def gather(ctx: TaskContext, results: list[Any]) -> list[Any]:
    """``spawner``'s continuation: each run pushes the results it got onto
    ``continuation_runs``."""
    side = _side_redis()
    if side is not None:
        side.rpush("continuation_runs", repr(results))
    return results


@registry.task(name="sync_sleep", queue="default")
def sync_sleep(ctx: TaskContext, seconds: float) -> float:
    _record("exec_start", ctx)
    time.sleep(seconds)
    _record("exec_end", ctx)
    return seconds


@registry.task(name="stdlib_log", queue="default")
async def stdlib_log(ctx: TaskContext, message: str) -> str:
    """Logs through the standard library and warns, as a handler's libraries do: the worker's
    output stays one stream (docs/observability.md, Logs)."""
    logging.getLogger("dtq_devtools.handler").warning("handler says %s", message)
    warnings.warn(f"handler warns {message}", UserWarning, stacklevel=1)
    return message


@registry.task(name="fail", queue="default")
async def fail(ctx: TaskContext, message: str = "boom") -> None:
    raise ValueError(message)


@registry.task(name="flaky", queue="default")
async def flaky(ctx: TaskContext, fail_until: int = 2) -> int:
    """Raises before attempt ``fail_until``, then succeeds; logs each attempt."""
    structlog.get_logger().info("flaky_attempt", fail_until=fail_until)
    if ctx.attempt < fail_until:
        raise ValueError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@registry.task(name="fail_permanently", queue="default")
async def fail_permanently(ctx: TaskContext) -> None:
    raise PermanentError("cannot succeed")


@registry.task(name="fail_recorded", queue="default")
async def fail_recorded(ctx: TaskContext) -> None:
    """Fails for good after recording its execution: a dead task whose record a DLQ trim may
    delete is still accounted for by the checker (through ``exec_end``)."""
    _record("exec_start", ctx)
    _record("exec_end", ctx)
    raise PermanentError("cannot succeed")


@registry.task(name="retry_after", queue="default")
async def retry_after(ctx: TaskContext, delay_s: float, succeed_on: int = 2) -> int:
    if ctx.attempt < succeed_on:
        raise Retry(delay_s=delay_s, reason="not yet")
    return ctx.attempt


@registry.task(name="kill_worker", queue="default")
async def kill_worker(ctx: TaskContext) -> None:
    _record("exec_start", ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@registry.task(name="effect_then_crash", queue="default")
async def effect_then_crash(ctx: TaskContext, crash_until: int = 1) -> int:
    """A2: does its side effect (an ``effect`` entry), then, before attempt ``crash_until``
    is over, kills its own process: the outcome never reaches Redis, so the attempt is
    reclaimed after the visibility timeout and the side effect happens again."""
    _record("exec_start", ctx)
    _record("effect", ctx)
    if ctx.attempt <= crash_until:
        os.kill(os.getpid(), signal.SIGKILL)
    _record("exec_end", ctx)
    return ctx.attempt


@registry.task(name="progress", queue="default")
async def progress(ctx: TaskContext, steps: int = 3) -> int:
    for i in range(steps):
        await ctx.progress((i + 1) / steps, f"step {i + 1}")
    return steps


@registry.task(name="slow_here", queue="default")
async def slow_here(ctx: TaskContext, seconds: float) -> str:
    """Sleeps only in a process started with DTQTEST_SLOW=1 (the worker a test stops)."""
    _record("exec_start", ctx)
    if os.environ.get("DTQTEST_SLOW") == "1":
        await asyncio.sleep(seconds)
    _record("exec_end", ctx)
    return "done"


@registry.task(name="cpu_in_thread", queue="default")
def cpu_in_thread(ctx: TaskContext, seconds: float) -> int:
    """CPU-bound work in a plain ``def`` handler (a thread): the event loop keeps beating."""
    _record("exec_start", ctx)
    spins, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        spins += 1
    _record("exec_end", ctx)
    return spins


@registry.task(name="block_loop_once", queue="default")
async def block_loop_once(ctx: TaskContext, seconds: float) -> int:
    """The documented mistake: blocking calls in an ``async def`` starve the worker's
    heartbeat. Only the first attempt blocks, so a second one can finish."""
    _record("exec_start", ctx)
    if ctx.attempt == 1:
        time.sleep(seconds)  # noqa: ASYNC251 - this task exists to block the loop
    _record("exec_end", ctx)
    return ctx.attempt


@registry.task(name="allocate", queue="default")
async def allocate(ctx: TaskContext, megabytes: int) -> int:
    """Allocates and touches ``megabytes`` MB, 8 MB at a time: in a worker under a memory
    limit the kernel's OOM killer ends the process mid-task (catalogue A9, docs/testing.md)."""
    _record("exec_start", ctx)
    held = []
    for _ in range(0, megabytes, 8):
        held.append(bytearray(b"\x01" * (8 << 20)))  # written, so really resident
        await asyncio.sleep(0)
    _record("exec_end", ctx)
    return len(held) * 8


ticking = TaskRegistry()
"""Only a schedule: ``noop`` every second (``dtq_devtools.testing.app:ticking`` for schedulers)."""
ticking.schedule("tick", task="noop", every_s=1)


cpu = TaskRegistry()
"""Handlers run in handler processes (``executor="process"``): ``dtq_devtools.testing.app:cpu``,
apart from ``registry`` so that the workers of the other tests start no handler process."""


def _spin(seconds: float) -> int:
    spins, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        spins += 1
    return spins


@cpu.task(name="spin_in_process", queue="default", executor="process")
def spin_in_process(ctx: TaskContext, seconds: float, effect_after_s: float = -1.0) -> int:
    """Spins ``seconds`` in a handler process; records its start (``exec_start``, with the
    process id) and, when ``effect_after_s`` >= 0, a side effect (``effect``) that many seconds
    in: a handler killed at its timeout never records it."""
    _record("exec_start", ctx)
    if effect_after_s >= 0:
        spins = _spin(effect_after_s)
        _record("effect", ctx)
        spins += _spin(max(0.0, seconds - effect_after_s))
    else:
        spins = _spin(seconds)
    _record("exec_end", ctx)
    return spins


@cpu.task(name="in_process", queue="default", executor="process")
def in_process(ctx: TaskContext, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Answers its arguments, its attempt and its process id; ``progress=[...]`` reports each
    value first; ``raise_=`` raises that kind (``value``, ``retry``, ``permanent``, ``exit``)."""
    kept = [ctx.progress_threadsafe(v, f"at {v}") for v in kwargs.pop("progress", [])]
    match kwargs.pop("raise_", None):
        case "value":
            raise ValueError("raised in a handler process")
        case "retry":
            raise Retry(delay_s=0.05, reason="again")
        case "permanent":
            raise PermanentError("never")
        case "exit":
            os._exit(3)
        case "unencodable":
            return {"set": {1, 2}} | {"obj": object()}
    return {
        "args": list(args),
        "kwargs": kwargs,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "kept": kept,
    }
