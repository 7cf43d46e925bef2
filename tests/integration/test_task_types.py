"""Argument schemas end to end: a real worker publishes its handlers' signatures, and submits
by name (SDK, workflows, batches) are checked against them; steps that receive their inputs
from earlier steps are not refused for the arguments those bring."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dtq_core import Client, TaskContext, TaskRegistry, ValidationError, chain, step
from dtq_scheduler_leader.scheduler import Scheduler

Stack = Callable[..., Awaitable[Scheduler]]
"""``await stack(registry)`` (tests/integration/conftest.py)."""


def typed() -> TaskRegistry:
    registry = TaskRegistry()

    @registry.task(name="rows")
    async def rows(ctx: TaskContext, day: str) -> list[int]:
        return [1, 2, 3]

    @registry.task(name="total")
    async def total(ctx: TaskContext, values: list[int], label: str) -> str:
        return f"{label}: {sum(values)}"

    @registry.task(name="report")
    async def report(ctx: TaskContext, summary: dict[str, Any], to: str) -> str:
        return f"{to}: {summary['total']}"

    return registry


async def test_submits_are_checked_against_the_published_signature(
    client: Client, stack: Stack
) -> None:
    await stack(typed())
    with pytest.raises(ValidationError, match=r"day: expected string, got integer") as bad:
        await client.enqueue("rows", [42])
    assert bad.value.field == "args"
    with pytest.raises(ValidationError, match=r"label: missing"):
        await client.enqueue("total", [[1]])
    with pytest.raises(ValidationError, match=r"colour: unexpected"):
        await client.enqueue("rows", ["d"], {"colour": "red"})
    assert (await (await client.enqueue("rows", ["2026-12-03"])).result(timeout=20)).ok

    # A step after another receives its first argument from it: only the rest is given.
    handle = await client.enqueue_workflow(
        chain(step("rows", ["2026-12-03"]), step("total", kwargs={"label": "sum"}))
    )
    assert await handle.result(timeout=20) == "sum: 6"
    with pytest.raises(ValidationError, match=r"step 0: task 'rows': day: missing"):
        await client.enqueue_workflow(chain(step("rows"), step("total", kwargs={"label": "x"})))
    # A batch callback receives the counts first.
    async with client.batch(on_complete=step("report", kwargs={"to": "ops"})) as batch:
        await batch.add(step("rows", ["d"]))
    assert (await batch.wait(timeout=20)).status == "succeeded"

    types = {t.name: t for t in await client.router.task_types()}
    assert set(types) == {"rows", "total", "report"}
    assert types["total"].queues == ["default", "other"]
    schema = types["total"].args_schema
    assert schema is not None
    assert schema["x-positional"] == ["values", "label"]
    assert schema["properties"]["values"] == {"type": "array", "items": {"type": "integer"}}
