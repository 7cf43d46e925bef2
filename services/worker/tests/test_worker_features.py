"""Worker features end to end, in-process, against real Redis."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dtq_core import Client, TaskContext, TaskRegistry, TaskStatus, UnknownTaskError
from dtq_core.infra import tracing
from dtq_core.protocol.routing import read_routes
from dtq_devtools.testing import wait_until
from dtq_worker.tasklog import TaskLog

if TYPE_CHECKING:
    from conftest import Runner


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
