"""Child tasks end to end: handlers spawn children through real workers; the children are
made with the parent's successful finish, once, and a continuation runs when they end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dtq_core import Client, Retry, TaskContext, TaskRegistry, WorkflowStatus, chain, step
from dtq_core.errors import UnknownTaskError, ValidationError
from dtq_core.protocol.workflows import children_id
from dtq_scheduler_leader.scheduler import Scheduler

Stack = Callable[..., Awaitable[Scheduler]]
"""``await stack(registry)`` (tests/integration/conftest.py)."""


def family() -> tuple[TaskRegistry, Counter[str], list[Any]]:  # noqa: C901 - one task each
    """Parents that spawn, children that square, and what they saw."""
    registry = TaskRegistry()
    calls: Counter[str] = Counter()
    seen: list[Any] = []

    @registry.task(name="square")
    async def square(ctx: TaskContext, x: int) -> int:
        calls[f"square:{x}"] += 1
        return x * x

    @registry.task(name="fails", max_attempts=1)
    async def fails(ctx: TaskContext, x: int) -> None:
        calls[f"fails:{x}"] += 1
        raise RuntimeError(f"child {x} failed")

    @registry.task(name="report")
    async def report(ctx: TaskContext, results: list[Any], label: str) -> str:
        calls["report"] += 1
        seen.append(results)
        return f"{label}: {results}"

    @registry.task(name="fanout")
    async def fanout(ctx: TaskContext, n: int) -> int:
        await ctx.spawn_many([step("square", [i]) for i in range(n)])
        await ctx.wait_children(then=step("report", kwargs={"label": "squares"}))
        return n

    @registry.task(name="flaky_parent", max_attempts=3)
    async def flaky_parent(ctx: TaskContext) -> str:
        await ctx.spawn(step("square", [7]))
        await ctx.spawn(chain(step("square", [2]), step("report", kwargs={"label": "x"})))
        if ctx.attempt < 3:
            raise Retry(delay_s=0, reason="not yet")
        return "done"

    @registry.task(name="independent")
    async def independent(ctx: TaskContext) -> None:
        await ctx.spawn_many([step("fails", [1]), step("square", [3])])

    @registry.task(name="refused")
    async def refused(ctx: TaskContext) -> list[str]:
        errors = []
        try:
            await ctx.spawn(step("no.such.task"))
        except UnknownTaskError as exc:
            errors.append(exc.code)
        await ctx.spawn(step("square", [5]))
        try:
            await ctx.wait_children(then=step("report", kwargs={"label": "r"}), on_failure="x")  # type: ignore[arg-type]
        except ValidationError as exc:
            errors.append(exc.field or "")
        await ctx.wait_children(then=step("report", kwargs={"label": "r"}))
        try:
            await ctx.spawn(step("square", [6]))
        except ValidationError as exc:
            errors.append(str(exc))
        return errors

    @registry.task(name="spawns_then_fails", max_attempts=1)
    async def spawns_then_fails(ctx: TaskContext) -> None:
        await ctx.spawn(step("square", [9]))
        raise RuntimeError("the parent failed")

    return registry, calls, seen


async def children_of(client: Client, task_id: str) -> str:
    """The children workflow id the parent's record names, once it finished."""
    outcome = await client.wait(task_id, timeout=20)
    assert outcome.status == "succeeded", outcome
    record = await client.get(task_id)
    assert record is not None
    assert record.children_workflow_id is not None
    return record.children_workflow_id


async def test_children_run_and_their_continuation_gets_every_result(
    client: Client, stack: Stack
) -> None:
    registry, calls, seen = family()
    await stack(registry)
    parent = await client.enqueue("fanout", [5])
    workflow_id = await children_of(client, parent.id)
    handle = client.workflow(workflow_id)
    assert await handle.result(timeout=20) == "squares: [0, 1, 4, 9, 16]"
    record = await handle.get()
    assert record.parent_task_id == parent.id
    assert record.name == "fanout children"
    assert [s.task for s in record.steps] == ["square"] * 5 + ["report"]
    assert record.steps[-1].depends_on == [0, 1, 2, 3, 4]
    assert calls["report"] == 1
    assert seen == [[0, 1, 4, 9, 16]]
    # Made once, and the definitions the finish carried are dropped once made.
    queue, rand = parent.id.split(":", 1)
    kids = await client.redis.hget(client.keys.queue(queue).task(rand), "kids")
    assert kids is None


async def test_a_retried_parent_makes_its_children_once_from_its_successful_attempt(
    client: Client, stack: Stack
) -> None:
    registry, calls, _ = family()
    await stack(registry)
    parent = await client.enqueue("flaky_parent")
    workflow_id = await children_of(client, parent.id)
    # No continuation: the result is the list of the children's, in spawn order.
    assert await client.workflow(workflow_id).result(timeout=20) == [49, "x: 4"]
    # Two failed attempts spawned too: what they spawned was never made.
    assert calls["square:7"] == 1
    assert calls["square:2"] == 1
    assert calls["report"] == 1


async def test_children_without_a_continuation_are_independent(
    client: Client, stack: Stack
) -> None:
    registry, calls, _ = family()
    await stack(registry)
    parent = await client.enqueue("independent")
    handle = client.workflow(await children_of(client, parent.id))
    with pytest.raises(Exception, match="failed"):
        await handle.result(timeout=20)
    record = await handle.get()
    assert record.status is WorkflowStatus.FAILED
    assert [s.status for s in record.steps] == ["dead", "succeeded"]
    assert calls["square:3"] == 1


async def test_refused_children_are_errors_in_the_handler(client: Client, stack: Stack) -> None:
    registry, calls, _ = family()
    await stack(registry)
    parent = await client.enqueue("refused")
    await client.wait(parent.id, timeout=20)
    record = await client.get(parent.id)
    assert record is not None
    assert record.status == "succeeded"
    assert record.result is not None
    assert record.result[:2] == ["unknown_task", "on_failure"]
    assert "continuation comes last" in record.result[2]
    assert record.children_workflow_id is not None
    result = await client.workflow(record.children_workflow_id).result(timeout=20)
    assert result == "r: [25]"
    assert calls["square:6"] == 0


async def test_a_failed_parent_makes_no_children(client: Client, stack: Stack) -> None:
    registry, calls, _ = family()
    await stack(registry)
    parent = await client.enqueue("spawns_then_fails")
    await client.wait(parent.id, timeout=20)
    record = await client.get(parent.id)
    assert record is not None
    assert record.status in {"dead", "failed"}
    assert record.children_workflow_id is None
    done = await client.enqueue("square", [1])  # a task after it, through the same worker
    await client.wait(done.id, timeout=20)
    assert calls["square:9"] == 0
    assert await client.workflows.get(children_id(parent.id)) is None


async def test_a_finish_sent_again_makes_the_children_once(client: Client, stack: Stack) -> None:
    """The drain of one parent's outbox entry, run twice (a leader that stopped after making
    the children and before removing the entry): the second makes nothing."""
    registry, calls, _ = family()
    scheduler = await stack(registry)
    parent = await client.enqueue("fanout", [3])
    workflow_id = await children_of(client, parent.id)
    await client.workflow(workflow_id).result(timeout=20)
    queue, rand = parent.id.split(":", 1)
    qk = client.keys.queue(queue)
    # Put the entry back, as if the leader had died before removing it.
    await client.redis.zadd(qk.workflow_outbox, {f"{rand}|{workflow_id}:-1": 1})
    assert await scheduler.workflows.workflows.drain(queue) == 1
    assert await client.redis.zcard(qk.workflow_outbox) == 0
    assert calls["report"] == 1
    assert sum(n for k, n in calls.items() if k.startswith("square:")) == 3
