"""Traces across real processes: a REST, SDK or cron submit and every attempt of the task in
one trace, exported over OTLP/HTTP to a receiver in this process; logs carry the trace ids;
spans are flushed on SIGTERM; handlers (sync ones in threads too) run in their attempt's
context."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from dtq_core import (
    Client,
    TaskContext,
    TaskHandle,
    TaskRegistry,
    TaskRequest,
    TaskStatus,
)
from dtq_core.infra import tracing
from dtq_core.infra.log import current_task
from dtq_core.infra.settings import Settings
from dtq_core.ops.schedules import ScheduleSpec, ScheduleStore
from dtq_devtools.testing import free_port, wait_until, wait_until_sync
from dtq_devtools.testing.processes import (
    FAST_ENV,
    ServiceProcess,
    scheduler_process,
    services,
    worker_process,
)
from dtq_devtools.traceview import Span, TraceStore, serve
from dtq_worker.worker import Worker

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
# Exported spans arrive within a tenth of a second instead of the SDK's default 5 s.
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


class OtlpReceiver:
    """An OTLP/HTTP receiver in this process (``dtq_devtools.traceview``)."""

    def __init__(self) -> None:
        self.store = TraceStore()
        (self.server,) = serve(self.store, "127.0.0.1", [0])
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def find(self, **attrs: Any) -> list[Span]:
        return self.store.find(**attrs)

    def consumer_spans(self, task_id: str, count: int) -> list[Span] | None:
        spans = self.find(kind="CONSUMER", **{"messaging.message.id": task_id})
        if len(spans) < count:
            return None
        return sorted(spans, key=lambda s: s.attributes["dtq.task.attempt"])


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def json_lines(proc: ServiceProcess, event: str, **fields: Any) -> list[dict[str, Any]]:
    out = []
    for line in proc.log().splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record.get("event") == event and all(record.get(k) == v for k, v in fields.items()):
            out.append(record)
    return out


def api_process(redis_url: str, port: int, log: Path, env: dict[str, str]) -> ServiceProcess:
    return ServiceProcess(
        "dtq_ingest_api",
        [],
        {**FAST_ENV, "DTQ_REDIS_URL": redis_url, "DTQ_API_PORT": str(port), **env},
        log,
    )


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def assert_attempts(
    consumers: list[Span], parent: Span | ReadableSpan, trace_id: str, task_id: str
) -> None:
    """Attempt 1 failed (ERROR, exception event), attempt 2 succeeded, both children of the
    producer span, in its trace, with the messaging attributes."""
    if isinstance(parent, ReadableSpan):
        assert parent.context is not None
        parent_id = format(parent.context.span_id, "016x")
    else:
        parent_id = parent.span_id
    assert [c.attributes["dtq.task.attempt"] for c in consumers] == [1, 2]
    first, second = consumers
    for c in consumers:
        assert c.service == "dtq-worker"
        assert c.name == "process default"
        assert c.trace_id == trace_id
        assert c.parent_span_id == parent_id
        assert c.attributes["messaging.system"] == "dtq"
        assert c.attributes["messaging.operation.type"] == "process"
        assert c.attributes["messaging.destination.name"] == "default"
        assert c.attributes["messaging.message.id"] == task_id
        assert c.attributes["messaging.consumer.group.name"] == "workers"
        assert c.attributes["dtq.task.name"] == "flaky"
    assert first.status == "ERROR"
    assert first.attributes["dtq.task.outcome"] == "retry"
    assert first.attributes["error.type"] == "ValueError"
    assert "error.type" not in second.attributes
    exc = [attrs for name, attrs in first.events if name == "exception"]
    assert exc
    assert exc[0]["exception.type"] == "ValueError"
    assert exc[0]["exception.message"] == "attempt 1 fails"
    assert second.status != "ERROR"
    assert second.attributes["dtq.task.outcome"] == "ok"
    assert not second.events


def assert_logs(worker: ServiceProcess, consumers: list[Span], task_id: str) -> None:
    """The worker's canonical line and the handler's own line of each attempt carry the
    attempt's trace and span ids, the task id and the queue."""
    executed = sorted(
        json_lines(worker, "task_executed", task_id=task_id), key=lambda r: r["attempt"]
    )
    assert [r["status"] for r in executed] == ["retrying", "succeeded"]
    handler = sorted(
        json_lines(worker, "flaky_attempt", task_id=task_id), key=lambda r: r["attempt"]
    )
    assert len(handler) == 2
    for span, line, own in zip(consumers, executed, handler, strict=True):
        assert (line["trace_id"], line["span_id"]) == (span.trace_id, span.span_id)
        assert (own["trace_id"], own["span_id"]) == (span.trace_id, span.span_id)
        assert own["queue"] == line["queue"] == "default"
        assert own["attempt"] == line["attempt"] == span.attributes["dtq.task.attempt"]


async def test_a_rest_submit_continues_the_callers_trace_through_every_attempt(
    redis: Any, redis_url: str, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """Configured by the standard variables: the API by OTEL_EXPORTER_OTLP_ENDPOINT (the
    traces path appended), named by OTEL_SERVICE_NAME with OTEL_RESOURCE_ATTRIBUTES; the
    worker by OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which wins over a DTQ_OTLP_ENDPOINT that
    leads nowhere."""
    url, port = redis_url, free_port()
    api_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "orders-api",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,service.instance.id=api-1",
        **QUICK_EXPORT,
    }
    worker_env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/v1/traces",
        "DTQ_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        **QUICK_EXPORT,
    }
    api = api_process(url, port, tmp_path / "api.log", api_env)
    worker = worker_process(url, tmp_path / "worker.log", env=worker_env)
    with services(api, worker, scheduler_process(url, tmp_path / "scheduler.log")):
        wait_until_sync(lambda: answers(port), timeout=30, message="the API answers")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            r = await http.post(
                "/api/v1/tasks",
                json={"task": "flaky", "kwargs": {"fail_until": 2}},
                headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
            )
            assert r.status_code == 201, r.text
            task_id = r.json()["id"]
            consumers = await wait_until(
                lambda: receiver.consumer_spans(task_id, 2), timeout=30, message="two attempts"
            )
            record = (await http.get(f"/api/v1/tasks/{task_id}")).json()
        producers = await wait_until(
            lambda: receiver.find(kind="PRODUCER", **{"messaging.message.id": task_id}),
            timeout=10,
            message="the producer span",
        )
        servers = await wait_until(
            lambda: receiver.find(kind="SERVER", name="POST /api/v1/tasks"),
            timeout=10,
            message="the submit's server span",
        )
        await wait_until(
            lambda: len(json_lines(worker, "task_executed", task_id=task_id)) == 2,
            timeout=10,
            message="two execution lines",
        )
    (server,) = servers
    assert server.service == "orders-api"
    assert server.resource["deployment.environment"] == "test"
    assert server.resource["service.instance.id"] == "api-1"
    assert server.trace_id == CALLER_TRACE
    assert server.parent_span_id == CALLER_SPAN
    assert server.attributes["http.route"] == "/api/v1/tasks"
    assert server.attributes["http.response.status_code"] == 201
    (producer,) = producers
    assert producer.service == "orders-api"
    assert producer.name == "send default"
    assert producer.trace_id == CALLER_TRACE
    assert producer.parent_span_id == server.span_id
    assert producer.status != "ERROR"
    assert producer.attributes == {
        "messaging.system": "dtq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "default",
        "messaging.message.id": task_id,
        "dtq.task.name": "flaky",
    }
    assert_attempts(consumers, producer, CALLER_TRACE, task_id)
    assert_logs(worker, consumers, task_id)
    assert record["trace_id"] == CALLER_TRACE
    (submitted,) = json_lines(api, "request_handled", route="/api/v1/tasks")
    assert (submitted["task_id"], submitted["queue"]) == (task_id, "default")
    assert submitted["trace_id"] == CALLER_TRACE
    (looked_up,) = json_lines(api, "request_handled", route="/api/v1/tasks/{task_id}")
    assert looked_up["trace_id"] == receiver.find(name="GET /api/v1/tasks/{task_id}")[0].trace_id
    (shadowed,) = json_lines(worker, "tracing_endpoint_shadowed")
    assert (shadowed["ignored"], shadowed["used"]) == (
        "DTQ_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    )


async def test_sdk_submits_single_and_batch_are_traced_into_the_worker(
    client: Client, redis_url: str, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    tracing.configure_tracing("dtq-sdk-test", exporter=exporter)
    url = redis_url
    env = {"DTQ_OTLP_ENDPOINT": receiver.url, **QUICK_EXPORT}
    try:
        with services(
            worker_process(url, tmp_path / "worker.log", env=env),
            scheduler_process(url, tmp_path / "scheduler.log"),
        ) as (worker, _):
            single = await client.enqueue("flaky", kwargs={"fail_until": 2})
            batch = await client.enqueue_many(
                [
                    TaskRequest(task="flaky", kwargs={"fail_until": 2}),
                    TaskRequest(task="flaky", kwargs={"fail_until": 2}),
                    TaskRequest(task="no such name!"),
                ],
                return_exceptions=True,
            )
            handles = [h for h in batch if isinstance(h, TaskHandle)]
            assert len(handles) == 2
            assert isinstance(batch[2], Exception)
            attempts = {}
            for h in (single, *handles):
                attempts[h.id] = await wait_until(
                    lambda h=h: receiver.consumer_spans(h.id, 2), timeout=30, message=h.id
                )
            await wait_until(
                lambda: len(json_lines(worker, "task_executed")) == 6,
                timeout=10,
                message="six execution lines",
            )
    finally:
        tracing.shutdown()
    spans = exporter.get_finished_spans()
    producers = {s.attributes["messaging.message.id"]: s for s in spans if _is(s, "PRODUCER")}

    send = producers[single.id]
    assert send.name == "send default"
    assert send.resource.attributes["service.name"] == "dtq-sdk-test"
    assert send.parent is None  # no span around the call: the submit starts the trace
    assert single.trace_id == format(send.context.trace_id, "032x")
    assert_attempts(attempts[single.id], send, single.trace_id, single.id)
    assert_logs(worker, attempts[single.id], single.id)

    (batch_span,) = [s for s in spans if _is(s, "CLIENT")]
    assert batch_span.name == "send default"
    assert batch_span.attributes is not None
    assert batch_span.attributes["messaging.batch.message_count"] == 2
    for h in handles:
        create = producers[h.id]
        assert create.name == "create default"
        assert create.attributes is not None
        assert create.attributes["messaging.operation.type"] == "create"
        assert create.parent is not None
        assert create.parent.span_id == batch_span.context.span_id
        assert h.trace_id == format(batch_span.context.trace_id, "032x")
        assert_attempts(attempts[h.id], create, h.trace_id, h.id)
        assert_logs(worker, attempts[h.id], h.id)
    refused = [
        s for s in spans if s.name == "create default" and s.status.status_code.name == "ERROR"
    ]
    assert len(refused) == 1


def _is(span: ReadableSpan, kind: str) -> bool:
    return span.kind is SpanKind[kind]


async def test_spans_are_flushed_when_the_api_and_the_worker_stop(
    client: Client, redis_url: str, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    url, port = redis_url, free_port()
    # Batches would leave only every 10 minutes: what arrives was flushed by the shutdown.
    env = {"DTQ_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    api = api_process(url, port, tmp_path / "api.log", env)
    worker = worker_process(url, tmp_path / "worker.log", env=env)
    with services(api, worker):
        wait_until_sync(lambda: answers(port), timeout=30, message="the API answers")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            r = await http.post("/api/v1/tasks", json={"task": "noop"})
        task_id = r.json()["id"]
        assert (await client.wait(task_id, timeout=20)).status is TaskStatus.SUCCEEDED
        await wait_until(
            lambda: json_lines(worker, "task_executed", task_id=task_id), message="the log line"
        )
        assert receiver.find(**{"messaging.message.id": task_id}) == []
        for proc in (api, worker):
            proc.signal(signal.SIGTERM)
            # uvicorn shuts down gracefully, then re-raises the signal it caught.
            assert proc.wait(timeout=30) in {0, -signal.SIGTERM}
    (producer,) = receiver.find(kind="PRODUCER", **{"messaging.message.id": task_id})
    (consumer,) = receiver.find(kind="CONSUMER", **{"messaging.message.id": task_id})
    assert consumer.parent_span_id == producer.span_id
    assert (producer.service, consumer.service) == ("dtq-ingest-api", "dtq-worker")


@pytest.mark.parametrize(
    "env",
    [
        {"DTQ_OTLP_ENDPOINT": ""},
        {"DTQ_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
    ],
    ids=["no-endpoint", "sdk-disabled"],
)
async def test_a_worker_without_tracing_still_logs_the_producers_trace_id(
    client: Client, redis_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    tracing.configure_tracing("dtq-sdk-test", exporter=InMemorySpanExporter())
    try:
        with services(worker_process(redis_url, tmp_path / "w.log", env=env)) as (w,):
            handle = await client.enqueue("noop")
            assert handle.trace_id is not None
            (line,) = await wait_until(
                lambda: json_lines(w, "task_executed", task_id=handle.id), message="the line"
            )
    finally:
        tracing.shutdown()
    assert line["trace_id"] == handle.trace_id
    assert line["span_id"] is None  # no process span: this worker traces nothing
    assert not json_lines(w, "tracing_on")
    assert bool(json_lines(w, "tracing_disabled")) == ("OTEL_SDK_DISABLED" in env)


async def test_a_cron_fired_task_starts_a_trace_in_the_scheduler(
    client: Client, redis_url: str, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    store = ScheduleStore(
        client.redis, client.keys, max_payload_bytes=client.settings.tasks.max_payload_bytes
    )
    await store.put(ScheduleSpec(name="tick", task="noop", every_s=1))
    url = redis_url
    env = {"DTQ_OTLP_ENDPOINT": receiver.url, **QUICK_EXPORT}
    with services(
        worker_process(url, tmp_path / "worker.log", env=env),
        scheduler_process(url, tmp_path / "scheduler.log", env=env),
    ):
        producers = await wait_until(
            lambda: receiver.find(kind="PRODUCER", service="dtq-scheduler"),
            timeout=30,
            message="a fired tick's span",
        )
        task_id = producers[0].attributes["messaging.message.id"]
        (consumer,) = await wait_until(
            lambda: receiver.consumer_spans(task_id, 1), timeout=30, message="its attempt"
        )
    assert producers[0].name == "send default"
    assert producers[0].parent_span_id == ""  # the tick is the root of its trace
    assert (consumer.trace_id, consumer.parent_span_id) == (
        producers[0].trace_id,
        producers[0].span_id,
    )


async def test_sync_and_async_handlers_run_in_their_attempts_context(
    client: Client, settings: Settings
) -> None:
    exporter = InMemorySpanExporter()
    tracing.configure_tracing("dtq-worker-test", exporter=exporter)
    seen: dict[str, tuple[str | None, str | None, int]] = {}
    registry = TaskRegistry()

    def record(kind: str) -> None:
        task = current_task.get()
        seen[kind] = (
            task.task_id if task else None,
            tracing.current_trace_id(),
            threading.get_ident(),
        )

    @registry.task(name="in_thread")
    def in_thread(ctx: TaskContext) -> None:
        record("sync")

    @registry.task(name="on_loop")
    async def on_loop(ctx: TaskContext) -> None:
        record("async")

    worker = Worker(settings, registry, ["default"])
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        sync, on_loop_handle = await client.enqueue("in_thread"), await client.enqueue("on_loop")
        for h in (sync, on_loop_handle):
            assert (await h.result(timeout=10)).status is TaskStatus.SUCCEEDED
    finally:
        stop.set()
        await asyncio.wait_for(running, 20)
        tracing.shutdown()
    assert seen["sync"][2] != threading.get_ident()  # it did run in a thread
    assert seen["sync"][:2] == (sync.id, sync.trace_id)
    assert seen["async"][:2] == (on_loop_handle.id, on_loop_handle.trace_id)
    assert current_task.get() is None  # set in the attempts' own contexts only


async def test_a_workflow_is_one_trace_each_step_a_child_of_its_span(
    client: Client, redis_url: str, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    from dtq_core import chain, group, step  # noqa: PLC0415 - the SDK's workflow primitives

    exporter = InMemorySpanExporter()
    tracing.configure_tracing("dtq-sdk-test", exporter=exporter)
    env = {"DTQ_OTLP_ENDPOINT": receiver.url, **QUICK_EXPORT}
    try:
        with services(
            worker_process(redis_url, tmp_path / "worker.log", env=env),
            scheduler_process(redis_url, tmp_path / "scheduler.log", env=env),
        ):
            handle = await client.enqueue_workflow(
                chain(step("echo", [1]), group(step("echo"), step("echo"))), name="traced"
            )
            await handle.result(timeout=30)
            steps = await handle.steps()
            consumers = {
                s.task_id: await wait_until(
                    lambda s=s: receiver.consumer_spans(s.task_id, 1), timeout=30
                )
                for s in steps
            }
            creates = await wait_until(
                lambda: (
                    [
                        c
                        for s in steps[1:]
                        if (
                            c := receiver.find(
                                kind="PRODUCER", **{"messaging.message.id": s.task_id}
                            )
                        )
                    ]
                    if len(steps) > 1
                    else None
                ),
                timeout=30,
                message="the leader's create spans",
            )
    finally:
        tracing.shutdown()
    (root,) = [s for s in exporter.get_finished_spans() if s.name == "workflow traced"]
    trace_id = format(root.context.trace_id, "032x")
    assert root.attributes["dtq.workflow.id"] == handle.id
    for spans in consumers.values():
        assert {s.trace_id for s in spans} == {trace_id}
    # The later steps' create spans, made by the leader, are children of the workflow's span.
    root_id = format(root.context.span_id, "016x")
    assert all(c[0].parent_span_id == root_id for c in creates)
    assert all(c[0].service == "dtq-scheduler" for c in creates)
