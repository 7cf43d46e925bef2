"""SyncClient, the SDK for code without an event loop, against a real redis-server."""

from __future__ import annotations

import pytest

from dtq_core import (
    BatchRefusedError,
    InvalidNameError,
    InvalidStateError,
    SyncClient,
    SyncTaskHandle,
    TaskNotFoundError,
    TaskRequest,
    TaskStatus,
)
from dtq_core.protocol.submit import new_rands
from dtq_devtools.testing.servers import flush_all


def test_sync_client_from_plain_code(redis_url: str) -> None:
    # A clean database, as the async `redis` fixture gives (no registered task names).
    flush_all(redis_url)
    queue = "sync-" + new_rands(1)[0][:8]
    with SyncClient(redis_url, max_queue_depth=100, reject_unknown_queues=False) as client:
        handle = client.enqueue("t", args=[1], queue=queue, priority=8)
        assert isinstance(handle, SyncTaskHandle)
        assert handle.queue == queue
        assert handle.created
        assert handle.status() is TaskStatus.QUEUED
        record = client.get(handle.id)
        assert record is not None
        assert (record.args, record.priority) == ([1], 8)
        assert handle.info().id == handle.id

        with pytest.raises(TimeoutError):
            handle.result(timeout=0.1)
        assert handle.cancel() is TaskStatus.CANCELLED
        assert client.wait(handle.id, timeout=1).status is TaskStatus.CANCELLED
        with pytest.raises(InvalidStateError):
            client.cancel(handle.id)
        with pytest.raises(TaskNotFoundError):
            client.retry(f"{queue}:" + "0" * 32)

        many = client.enqueue_many(
            [{"task": "t", "queue": queue}, {"task": "t", "queue": "bad:name"}],
            return_exceptions=True,
        )
        assert isinstance(many[0], SyncTaskHandle)
        assert isinstance(many[1], InvalidNameError)
        # Without return_exceptions a refusal raises, carrying what was submitted.
        with pytest.raises(BatchRefusedError) as refused:
            client.enqueue_many([{"task": "t", "queue": queue}, {"task": "t", "queue": "a:b"}])
        assert isinstance(refused.value.accepted[0], SyncTaskHandle)
        assert [i for i, _ in refused.value.refused] == [1]
        assert client.get("junk") is None
    client.close()  # closing twice is harmless


def test_sync_client_submits_task_requests(redis_url: str) -> None:
    flush_all(redis_url)
    with SyncClient(redis_url, reject_unknown_queues=False) as client:
        one = client.submit(TaskRequest(task="t", queue="q", priority=8))
        assert isinstance(one, SyncTaskHandle)
        assert one.status() is TaskStatus.QUEUED
        with pytest.raises(InvalidNameError):
            client.submit(TaskRequest(task="t", queue="bad:name"))
        many = client.submit([TaskRequest(task="t", queue="q"), {"task": "t", "queue": "a:b"}])
        assert isinstance(many[0], SyncTaskHandle)
        assert isinstance(many[1], InvalidNameError)
        record = client.get(one.id)
        assert record is not None
        assert record.priority == 8
