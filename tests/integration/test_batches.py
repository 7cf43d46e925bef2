"""Batches end to end: tasks added over time through real workers, live counts, and callbacks
that run once when the batch is sealed and its tasks have ended."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dtq_core import (
    Client,
    InvalidStateError,
    SyncClient,
    TaskContext,
    TaskRegistry,
    ValidationError,
    WorkflowStatus,
    chain,
    step,
)
from dtq_core.canvas import compile_workflow
from dtq_core.errors import UnknownTaskError, WorkflowNotFoundError
from dtq_core.protocol.workflows import encode_definition
from dtq_devtools.testing import wait_until
from dtq_scheduler_leader.scheduler import Scheduler

Stack = Callable[..., Awaitable[Scheduler]]
"""``await stack(registry)`` (tests/integration/conftest.py)."""


def exports() -> tuple[TaskRegistry, Counter[str], list[Any], asyncio.Event]:
    """Members that export (one fails on request, one waits for a gate), and callbacks that
    record the summary they got."""
    registry = TaskRegistry()
    calls: Counter[str] = Counter()
    summaries: list[Any] = []
    gate = asyncio.Event()

    @registry.task(name="export")
    async def export(ctx: TaskContext, user: int) -> int:
        calls[f"export:{user}"] += 1
        return user

    @registry.task(name="export_fails", max_attempts=1)
    async def export_fails(ctx: TaskContext, user: int) -> None:
        calls[f"export_fails:{user}"] += 1
        raise RuntimeError(f"user {user} failed")

    @registry.task(name="gated")
    async def gated(ctx: TaskContext) -> str:
        calls["gated"] += 1
        await gate.wait()
        return "open"

    @registry.task(name="on_success")
    async def on_success(ctx: TaskContext, summary: dict[str, Any], to: str) -> str:
        calls["on_success"] += 1
        summaries.append(("success", summary, to))
        return "mailed"

    @registry.task(name="on_complete")
    async def on_complete(ctx: TaskContext, *args: Any) -> None:
        calls["on_complete"] += 1
        summaries.append(("complete", *args))

    return registry, calls, summaries, gate


async def test_a_batch_counts_its_tasks_and_calls_back_once_when_sealed(
    client: Client, stack: Stack
) -> None:
    registry, calls, summaries, gate = exports()
    await stack(registry)
    batch = await client.batch(
        on_success=step("on_success", kwargs={"to": "ops@example.com"}),
        on_complete=step("on_complete"),
        name="nightly export",
    )
    ids = await batch.add_many([step("export", [u]) for u in range(5)])
    assert all(ids)
    assert len(set(ids)) == 5
    # Every task submitted: the add took its own pending mark off (no leader pass needed).
    marks = await client.redis.zrange(client.keys.workflows_pending, 0, -1)
    assert [m for m in marks if m.startswith(f"{batch.id}:")] == []
    assert await batch.add(step("gated")) is not None
    await wait_until(lambda: _counts_are(batch, succeeded=5, pending=1), message="five exported")
    counts = await batch.counts()
    assert (counts.total, counts.sealed, counts.status) == (6, False, WorkflowStatus.RUNNING)
    assert counts.on_success == "pending"
    # Everything ended but the batch is open: no callback yet. Added later, over time:
    gate.set()
    await wait_until(lambda: _counts_are(batch, succeeded=6, pending=0), message="all ended")
    await batch.add(step("export", [99]))
    assert calls["on_success"] == 0
    assert await batch.seal() == WorkflowStatus.RUNNING
    done = await batch.wait(timeout=20)
    assert (done.status, done.total, done.succeeded, done.failed) == ("succeeded", 7, 7, 0)
    assert (done.on_success, done.on_complete) == ("succeeded", "succeeded")
    assert calls["on_success"] == calls["on_complete"] == 1
    summary = {"batch_id": batch.id, "total": 7, "succeeded": 7, "failed": 0}
    assert sorted(summaries, key=str) == sorted(
        [("success", summary, "ops@example.com"), ("complete", summary)], key=str
    )
    # Sealed: nothing more goes in; sealing again changes nothing.
    with pytest.raises(InvalidStateError, match=r"ended|sealed"):
        await batch.add(step("export", [100]))
    assert await batch.seal() == WorkflowStatus.SUCCEEDED
    record = await batch.workflow().get()
    assert record.kind == "batch"
    assert record.steps_total == 9  # two callbacks and seven tasks
    listed = await client.workflows.list(limit=5)
    assert any(w.id == batch.id and w.kind == "batch" for w in listed)


async def _counts_are(batch: Any, **expected: int) -> bool:
    counts = await batch.counts()
    return all(getattr(counts, k) == v for k, v in expected.items())


async def test_a_failed_task_skips_on_success_and_on_complete_still_runs(
    client: Client, stack: Stack
) -> None:
    registry, calls, summaries, _ = exports()
    await stack(registry)
    async with client.batch(
        on_success=step("on_success", kwargs={"to": "x"}),
        on_complete=step("on_complete", pass_result=False),
    ) as batch:
        await batch.add_many([step("export", [1]), step("export_fails", [2])])
    done = await batch.wait(timeout=20)
    assert (done.status, done.succeeded, done.failed, done.pending) == ("failed", 1, 1, 0)
    assert (done.on_success, done.on_complete) == ("cancelled", "succeeded")
    assert calls["on_success"] == 0
    assert calls["on_complete"] == 1
    assert summaries == [("complete",)]  # pass_result=False: no summary


async def test_an_empty_sealed_batch_ends_and_runs_on_complete(
    client: Client, stack: Stack
) -> None:
    registry, _, summaries, _ = exports()
    await stack(registry)
    async with client.batch(on_complete=step("on_complete")) as batch:
        pass
    done = await batch.wait(timeout=20)
    assert done.status == "succeeded"
    assert summaries == [
        ("complete", {"batch_id": batch.id, "total": 0, "succeeded": 0, "failed": 0})
    ]
    no_callbacks = await client.batch()
    assert await no_callbacks.seal() == WorkflowStatus.SUCCEEDED


async def test_a_block_that_raises_cancels_its_batch(client: Client, stack: Stack) -> None:
    registry, calls, _, _ = exports()
    await stack(registry)

    async def half_built() -> Any:
        async with client.batch(on_complete=step("on_complete")) as batch:
            await batch.add(step("gated"))
            await wait_until(lambda: calls["gated"] == 1, message="the gated task runs")
            seen.append(batch)
            raise RuntimeError("half-way")

    seen: list[Any] = []
    with pytest.raises(RuntimeError, match="half-way"):
        await half_built()
    (batch,) = seen
    done = await batch.wait(timeout=20)
    assert done.status == "cancelled"

    async def steps_cancelled() -> bool:
        # The running member's cancel is a request: it ends cancelled once its handler stops.
        record = await batch.workflow().get()
        return [s.status for s in record.steps] == ["cancelled", "cancelled"]

    await wait_until(steps_cancelled, message="both steps cancelled")
    assert calls["on_complete"] == 0


async def test_bad_batches_and_members_are_refused_and_add_nothing(
    client: Client, stack: Stack
) -> None:
    registry, _, _, _ = exports()
    await stack(registry)
    with pytest.raises(ValidationError, match="single steps"):
        await client.batch(on_success=chain(step("export", [1]), step("export", [2])))
    with pytest.raises(UnknownTaskError):
        await client.batch(on_complete=step("nope"))
    batch = await client.batch()
    with pytest.raises(UnknownTaskError):
        await batch.add_many([step("export", [1]), step("nope")])
    with pytest.raises(ValidationError, match="on_failure"):
        await batch.add(step("export", [1], on_failure="ignore"))
    with pytest.raises(ValidationError, match="single steps"):
        await batch.add(chain(step("export", [1]), step("export", [2])))
    assert (await batch.counts()).total == 0
    with pytest.raises(WorkflowNotFoundError):
        await client.batch_of("0" * 32).add(step("export", [1]))
    with pytest.raises(WorkflowNotFoundError):
        await client.batch_of("not-an-id").seal()
    # A workflow is not a batch.
    handle = await client.enqueue_workflow(step("export", [1]))
    with pytest.raises(WorkflowNotFoundError):
        await client.batch_of(handle.id).add(step("export", [2]))
    assert await client.workflows.get_batch(handle.id) is None


async def test_another_process_adds_and_seals_by_id_through_the_sync_client(
    client: Client, stack: Stack, redis_url: str
) -> None:
    registry, calls, _, _ = exports()
    await stack(registry)
    batch = await client.batch(on_complete=step("on_complete"))

    def elsewhere() -> None:
        sync = SyncClient.from_url(redis_url)
        try:
            other = sync.batch_of(batch.id)
            other.add_many([step("export", [u]) for u in range(3)])
            other.seal()
            assert other.wait(timeout=20).succeeded == 3
            with sync.batch(on_complete=step("on_complete")) as mine:
                mine.add(step("export", [7]))
            assert mine.wait(timeout=20).status == "succeeded"
        finally:
            sync.close()

    await asyncio.to_thread(elsewhere)
    assert (await batch.counts()).status == "succeeded"
    assert calls["on_complete"] == 2


async def test_a_member_added_but_not_submitted_is_submitted_by_the_sweep(
    client: Client, stack: Stack
) -> None:
    """An adder that stopped between recording its members and submitting them (a crash)
    leaves its batch marked pending: the leader's sweep submits them, and a kick that read the
    mark before it was renewed does not take it off."""
    registry, calls, _, _ = exports()
    scheduler = await stack(registry)
    batch = await client.batch(on_complete=step("on_complete"))
    workflows = client.workflows
    pending = client.keys.workflows_pending
    mark = f"{batch.id}:crashed-adder"  # the mark an add makes, old: the sweep takes it
    await client.redis.zadd(pending, {mark: 1_000})
    (node,) = await workflows.check([_node(step("export", [41]))], batch.id)
    outcome, first = await client.scripts.wf_batch_add(
        client.keys.workflow(batch.id),
        [encode_definition(node.definition)],
        max_steps=100,
        retention_ms=60_000,
    )
    assert (outcome, first) == ("added", "1")
    # A kick that read an older mark leaves a renewed one alone.
    assert await client.scripts.wf_settle(pending, [(mark, 999.0)]) == 0
    assert await client.redis.zscore(pending, mark) == 1_000
    await scheduler.workflows.workflows.sweep()
    await wait_until(lambda: calls["export:41"] == 1, message="the member ran")
    await batch.seal()
    done = await batch.wait(timeout=20)
    assert (done.status, done.total, done.succeeded) == ("succeeded", 1, 1)
    assert calls["on_complete"] == 1
    assert await client.redis.zscore(pending, mark) is None


def _node(expr: Any) -> Any:
    nodes, _ = compile_workflow(expr, start=1)
    return nodes[0]
