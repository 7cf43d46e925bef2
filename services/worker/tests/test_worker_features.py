"""Worker features end to end, in-process, against real Redis."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus, UnknownTaskError
from dtq_core.infra import tracing
from dtq_core.ops.admin import Admin
from dtq_core.protocol.routing import read_routes
from dtq_devtools.testing import wait_until
from dtq_devtools.testing.history import queue_events
from dtq_worker.tasklog import TaskLog

if TYPE_CHECKING:
    from conftest import Runner


async def _status(client: Client, task_id: str) -> TaskStatus | None:
    record = await client.get(task_id)
    return record.status if record else None


async def test_cancel_a_running_async_handler(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @registry.task(name="long")
    async def long(ctx: TaskContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await run_worker(registry)
    handle = await client.enqueue("long")
    await asyncio.wait_for(started.wait(), 10)
    assert await handle.cancel() is TaskStatus.RUNNING  # requested, the worker does the rest
    outcome = await handle.result(timeout=10)
    assert outcome.status is TaskStatus.CANCELLED
    assert cancelled.is_set()
    types = [e.type for e in await queue_events(client.redis, client.queue_keys("default"))]
    assert types[-1] == "task.cancelled"


async def test_progress_is_recorded_and_published(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    halfway = asyncio.Event()
    go_on = asyncio.Event()

    @registry.task(name="steps")
    async def steps(ctx: TaskContext) -> str:
        assert await ctx.progress(0.5, "half")
        halfway.set()
        await go_on.wait()
        return "done"

    await run_worker(registry)
    handle = await client.enqueue("steps")
    await asyncio.wait_for(halfway.wait(), 10)
    record = await handle.info()
    assert record.progress is not None
    assert (record.progress.value, record.progress.message) == (0.5, "half")
    go_on.set()
    assert (await handle.result(timeout=10)).result == "done"
    events = await queue_events(client.redis, client.queue_keys("default"))
    progress = [e for e in events if e.type == "task.progress"]
    assert progress[0].data == {"progress": {"value": 0.5, "message": "half"}}
    (done,) = [e for e in events if e.type == "task.succeeded"]
    assert done.attempt == 1  # outcome events name the attempt, like started ones


async def test_large_results_are_truncated_and_flagged(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="big")
    async def big(ctx: TaskContext) -> str:
        return "é" * 5000

    await run_worker(registry, result_max_bytes=100)
    outcome = await (await client.enqueue("big")).result(timeout=10)
    assert outcome.result_truncated
    assert isinstance(outcome.result, str)
    assert len(outcome.result.encode()) <= 100


async def test_unserializable_result_fails_permanently(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="weird")
    async def weird(ctx: TaskContext) -> object:
        return object()

    await run_worker(registry)
    outcome = await (await client.enqueue("weird")).result(timeout=10)
    assert outcome.status is TaskStatus.DEAD
    assert outcome.error is not None
    assert outcome.error.type == "ResultNotSerializable"


async def test_sync_handler_timeout_fails_the_attempt(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()
    release = threading.Event()

    @registry.task(name="blocking", max_attempts=1, timeout_s=0.2)
    def blocking(ctx: TaskContext) -> None:
        release.wait(10)

    await run_worker(registry)
    try:
        outcome = await (await client.enqueue("blocking")).result(timeout=10)
    finally:
        release.set()
    assert outcome.status is TaskStatus.DEAD
    assert outcome.error is not None
    assert outcome.error.reason == "timeout"


async def test_a_task_submitted_without_a_queue_runs_on_its_registered_queue(
    client: Client, run_worker: Runner
) -> None:
    """docs/api.md's walk-through: the examples worker serves `default`, the mailer serves
    `emails`; `emails.send` submitted without a queue goes to `emails` and runs there, and a
    submit of it into `default` (whose worker would bury it as unknown) is refused."""
    examples = TaskRegistry()

    @examples.task(name="examples.add")
    async def add(ctx: TaskContext, a: int, b: int) -> int:
        return a + b

    mailer = TaskRegistry()

    @mailer.task(name="emails.send", queue="emails", max_attempts=1)
    async def send(ctx: TaskContext, to: str) -> str:
        return f"sent to {to} from {ctx.queue}"

    await run_worker(examples, ["default"])
    await run_worker(mailer, ["emails"])

    async def both_announced() -> bool:
        routes = await read_routes(client.redis, client.keys)
        return {"examples.add", "emails.send"} <= routes.handled.keys()

    await wait_until(both_announced, message="both workers published their routes")
    handle = await client.enqueue("emails.send", args=["a@b.c"])
    assert handle.queue == "emails"
    outcome = await handle.result(timeout=10)
    assert (outcome.status, outcome.result) == (TaskStatus.SUCCEEDED, "sent to a@b.c from emails")
    with pytest.raises(UnknownTaskError) as exc:
        await client.enqueue("emails.send", queue="default")
    assert exc.value.detail["queues"] == ["emails"]


async def test_task_unknown_to_the_worker_is_retried_then_buried(
    client: Client, run_worker: Runner
) -> None:
    await run_worker(TaskRegistry())
    outcome = await (await client.enqueue("nobody.runs.this", max_attempts=1)).result(timeout=10)
    assert outcome.status is TaskStatus.DEAD
    assert outcome.error is not None
    assert outcome.error.reason == "unknown_task"


async def test_paused_queue_is_not_claimed_until_resumed(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()
    ran: list[int] = []

    @registry.task(name="mark")
    async def mark(ctx: TaskContext, n: int) -> None:
        ran.append(n)

    admin = Admin(client)
    await client.enqueue("mark", args=[0])
    await admin.pause("default")
    worker = await run_worker(registry)
    await wait_until(
        lambda: worker.claimer.plan.is_paused("default"), message="worker saw the pause"
    )
    h = await client.enqueue("mark", args=[1])
    await wait_until(lambda: _claims_at_least(worker, 1), message="a claim round trip")
    assert ran == []
    assert await h.status() is TaskStatus.QUEUED
    await admin.resume("default")
    await h.result(timeout=10)
    assert sorted(ran) == [0, 1]


def _claims_at_least(worker: Any, n: int) -> bool:
    samples = worker.metrics.registry.get_sample_value
    return (samples("dtq_worker_claims_total", {"queue": "default"}) or 0) >= n


async def test_prefetched_tasks_keep_their_lease(client: Client, run_worker: Runner) -> None:
    """A task waiting in the prefetch buffer longer than the visibility timeout is not
    reclaimed: the heartbeat extends everything the worker holds."""
    registry = TaskRegistry()

    @registry.task(name="hold")
    async def hold(ctx: TaskContext, seconds: float) -> int:
        await asyncio.sleep(seconds)
        return ctx.attempt

    await run_worker(registry, worker_concurrency=1, claim_batch=2, worker_prefetch=1)
    first = await client.enqueue("hold", args=[3.0])  # longer than the 2 s visibility timeout
    second = await client.enqueue("hold", args=[0.0])
    assert (await first.result(timeout=20)).result == 1
    outcome = await second.result(timeout=20)
    assert outcome.result == 1  # attempt 1: never reclaimed while it waited
    assert (await second.info()).errors == []


async def test_worker_registry_and_metrics(client: Client, run_worker: Runner) -> None:
    registry = TaskRegistry()

    @registry.task(name="ok")
    async def ok(ctx: TaskContext) -> int:
        return 1

    worker = await run_worker(registry)
    await (await client.enqueue("ok")).result(timeout=10)
    workers = await Admin(client).workers()
    assert [w.id for w in workers] == [worker.consumer]
    routes = await read_routes(client.redis, client.keys)
    assert routes.handled["ok"] == {"default"}
    assert routes.declared["ok"] == "default"
    text = generate_latest(worker.metrics.registry).decode()
    assert 'dtq_tasks_total{queue="default",status="succeeded",task="ok"} 1.0' in text
    assert 'dtq_task_duration_seconds_count{queue="default",task="ok"} 1.0' in text
    assert "dtq_worker_inflight 0.0" in text


def test_canonical_log_line_is_json_with_the_task_fields() -> None:
    out = io.StringIO()
    TaskLog(enabled=True, json=True, stream=out).write(
        [
            {
                "task_id": "q:ab",
                "queue": "q",
                "task": "t",
                "attempt": 1,
                "status": "succeeded",
                "duration_ms": 1.5,
                "error": None,
                "trace_id": None,
            }
        ]
    )
    line = json.loads(out.getvalue())
    assert line["event"] == "task_executed"
    assert (line["task_id"], line["queue"], line["status"]) == ("q:ab", "q", "succeeded")
    assert line["level"] == "info"


async def test_trace_continues_from_enqueue_to_execution(
    client: Client, run_worker: Runner
) -> None:
    exporter = InMemorySpanExporter()
    tracing.configure_tracing("dtq-test", exporter=exporter)
    registry = TaskRegistry()

    @registry.task(name="traced")
    async def traced(ctx: TaskContext) -> None:
        return None

    try:
        await run_worker(registry)
        await (await client.enqueue("traced")).result(timeout=10)
        await wait_until(lambda: len(exporter.get_finished_spans()) >= 2, message="two spans")
    finally:
        tracing.disable()
    spans = {s.kind.name: s for s in exporter.get_finished_spans()}
    producer, consumer = spans["PRODUCER"], spans["CONSUMER"]
    assert producer.context.trace_id == consumer.context.trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.attributes is not None
    assert consumer.attributes["messaging.destination.name"] == "default"
