"""Workflows end to end: in-process workers and a scheduler leader on the session's Redis;
results flow through chains, groups and chords, every failure policy, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dtq_core import (
    Client,
    SyncClient,
    TaskContext,
    TaskRegistry,
    WorkflowFailedError,
    WorkflowStatus,
    chain,
    chord,
    group,
    is_error_value,
    step,
)
from dtq_core.canvas import from_json
from dtq_core.errors import UnknownTaskError, ValidationError
from dtq_core.infra.settings import Settings
from dtq_devtools.testing import wait_until
from dtq_scheduler_leader.scheduler import Scheduler

Stack = Callable[..., Awaitable[Scheduler]]
"""``await stack(registry)`` (tests/integration/conftest.py)."""


def arithmetic() -> tuple[TaskRegistry, list[tuple[str, Any]]]:
    """Tasks that add, sum and fail, and the calls they saw (side effects, counted)."""
    registry = TaskRegistry()
    calls: list[tuple[str, Any]] = []

    @registry.task(name="add")
    async def add(ctx: TaskContext, a: int, b: int) -> int:
        calls.append(("add", (a, b)))
        return a + b

    @registry.task(name="total")
    async def total(ctx: TaskContext, values: list[Any], *extra: int) -> int:
        calls.append(("total", values))
        return sum(v for v in values if isinstance(v, int)) + sum(extra)

    @registry.task(name="seen")
    async def seen(ctx: TaskContext, *args: Any) -> list[Any]:
        calls.append(("seen", args))
        return list(args)

    @registry.task(name="boom", max_attempts=1)
    async def boom(ctx: TaskContext, *args: Any) -> None:
        calls.append(("boom", args))
        raise RuntimeError("boom")

    @registry.task(name="slow")
    async def slow(ctx: TaskContext, *args: Any) -> str:
        calls.append(("slow", args))
        await asyncio.sleep(30)
        return "late"

    return registry, calls


async def test_a_chain_passes_each_result_to_the_next_step(client: Client, stack: Stack) -> None:
    registry, calls = arithmetic()
    await stack(registry)
    handle = await client.enqueue_workflow(
        chain(step("add", [1, 2]), step("add", [10]), step("add", [100])), name="sums"
    )
    assert await handle.result(timeout=20) == 113
    assert calls == [("add", (1, 2)), ("add", (3, 10)), ("add", (13, 100))]
    record = await handle.get()
    assert record.status is WorkflowStatus.SUCCEEDED
    assert record.name == "sums"
    assert [s.status for s in record.steps] == ["succeeded"] * 3
    assert [s.depends_on for s in record.steps] == [[], [0], [1]]
    assert [s.result for s in record.steps] == [3, 13, 113]
    task = await client.get(record.steps[1].task_id or "")
    assert task is not None
    assert (task.workflow_id, task.workflow_step) == (handle.id, 1)


async def test_a_chord_gets_every_member_result_in_order(client: Client, stack: Stack) -> None:
    registry, calls = arithmetic()
    await stack(registry)
    members = [step("add", [i, i], queue="other" if i % 2 else None) for i in range(20)]
    handle = await client.enqueue_workflow(chord(members, step("seen")))
    assert await handle.result(timeout=20) == [[2 * i for i in range(20)]]
    assert [c for c in calls if c[0] == "seen"] == [("seen", ([2 * i for i in range(20)],))]


async def test_nesting_a_chain_of_groups_of_chains(client: Client, stack: Stack) -> None:
    registry, _ = arithmetic()
    await stack(registry)
    wf = chain(
        step("add", [1, 1]),
        group(chain(step("add", [1]), step("add", [1])), step("add", [10])),
        step("total", [], pass_result=True),
        chord([step("add", [5]), step("add", [6])], step("seen")),
    )
    # 2 -> [4, 12] -> 16 -> [21, 22] -> seen([21, 22])
    assert await (await client.enqueue_workflow(wf)).result(timeout=20) == [[21, 22]]


async def test_a_group_result_is_the_list_of_its_results(client: Client, stack: Stack) -> None:
    registry, _ = arithmetic()
    await stack(registry)
    handle = await client.enqueue_workflow(group(step("add", [1, 2]), step("add", [3, 4])))
    assert await handle.result(timeout=20) == [3, 7]


async def test_a_step_without_pass_result_waits_but_receives_nothing(
    client: Client, stack: Stack
) -> None:
    registry, _ = arithmetic()
    await stack(registry)
    wf = chain(step("add", [1, 2]), step("seen", ["own"], pass_result=False))
    assert await (await client.enqueue_workflow(wf)).result(timeout=20) == ["own"]


async def test_on_failure_fail_stops_the_workflow_and_cancels_later_steps(
    client: Client, stack: Stack
) -> None:
    registry, calls = arithmetic()
    await stack(registry)
    handle = await client.enqueue_workflow(
        chain(step("add", [1, 2]), step("boom"), step("add", [1]), step("add", [1]))
    )
    with pytest.raises(WorkflowFailedError) as err:
        await handle.result(timeout=20)
    assert err.value.detail["status"] == "failed"
    assert err.value.detail["failed_step"] == 1
    assert err.value.detail["error"]["dtq_error"]["message"] == "boom"
    record = await handle.get()
    assert [s.status for s in record.steps] == ["succeeded", "dead", "cancelled", "cancelled"]
    assert [c[0] for c in calls] == ["add", "boom"]


async def test_on_failure_continue_passes_the_error_value_on(client: Client, stack: Stack) -> None:
    registry, calls = arithmetic()
    await stack(registry)
    handle = await client.enqueue_workflow(
        chord([step("add", [1, 2]), step("boom")], step("seen")), on_failure="continue"
    )
    with pytest.raises(WorkflowFailedError):
        await handle.result(timeout=20)
    (received,) = [c[1][0] for c in calls if c[0] == "seen"]
    assert received[0] == 3
    assert is_error_value(received[1])
    assert received[1]["dtq_error"]["status"] == "dead"
    assert (await handle.get()).steps[2].status == "succeeded"


async def test_on_failure_ignore_passes_none_and_can_succeed(client: Client, stack: Stack) -> None:
    registry, _ = arithmetic()
    await stack(registry)
    wf = chord([step("add", [1, 2]), step("boom", on_failure="ignore")], step("seen"))
    assert await (await client.enqueue_workflow(wf)).result(timeout=20) == [[3, None]]


async def test_cancelling_a_workflow_cancels_running_and_waiting_steps(
    client: Client, stack: Stack
) -> None:
    registry, calls = arithmetic()
    await stack(registry)
    handle = await client.enqueue_workflow(chain(step("slow"), step("add", [1, 2])))
    await wait_until(lambda: ("slow", ()) in calls, message="slow step running")
    assert await handle.cancel() is WorkflowStatus.CANCELLED

    async def ended() -> bool:
        steps = (await handle.get()).steps
        return [s.status for s in steps] == ["cancelled", "cancelled"]

    await wait_until(ended, message="steps cancelled")
    with pytest.raises(WorkflowFailedError) as err:
        await handle.result(timeout=5)
    assert err.value.detail["status"] == "cancelled"


async def test_a_refused_step_refuses_the_whole_workflow_and_writes_nothing(
    client: Client, stack: Stack
) -> None:
    registry, _ = arithmetic()
    await stack(registry)
    with pytest.raises(UnknownTaskError, match="step 1"):
        await client.enqueue_workflow(chain(step("add", [1, 2]), step("nope")))
    with pytest.raises(ValidationError, match="cannot have idempotency_key"):
        await client.enqueue_workflow(from_json({"task": "add", "idempotency_key": "k"}))
    assert await client.workflows.list() == []


async def test_the_leader_counts_workflow_events_and_times_each_advance(
    client: Client, stack: Stack
) -> None:
    registry, _ = arithmetic()
    scheduler = await stack(registry)
    await (await client.enqueue_workflow(chain(step("add", [1, 2]), step("add", [3])))).result(
        timeout=20
    )
    registry_ = scheduler.metrics.registry

    def sample(name: str, **labels: str) -> float:
        return registry_.get_sample_value(name, labels) or 0.0

    # The workflow's end is published before the drain that ended it times its advance.
    await wait_until(
        lambda: (
            sample("dtq_workflows_total", event="succeeded") == 1
            and sample("dtq_workflow_advance_seconds_count") >= 2
        ),  # each step's end advanced it
        message="counted",
    )
    assert sample("dtq_workflows_total", event="started") == 1
    assert sample("dtq_workflows_total", event="failed") == 0


async def test_the_sync_client_submits_and_waits_for_a_workflow(
    client: Client, stack: Stack, settings: Settings
) -> None:
    registry, _ = arithmetic()
    await stack(registry)

    def run() -> tuple[Any, Any, list[str]]:
        with SyncClient.from_url(settings.redis.url) as sync:
            handle = sync.enqueue_workflow(
                chord([step("add", [1, 1]), step("add", [2, 2])], step("seen"))
            )
            result = handle.result(timeout=20)
            return result, handle.status(), [s.status for s in handle.steps()]

    result, status, steps = await asyncio.to_thread(run)
    assert result == [[2, 4]]
    assert status is WorkflowStatus.SUCCEEDED
    assert steps == ["succeeded"] * 3
