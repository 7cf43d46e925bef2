"""Routing: a task's registered queue is its default for every producer, a submit to a queue
whose live workers lack the task is refused, and only deliberate queues accept submits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core import (
    Client,
    QueueLimitError,
    TaskRequest,
    UnknownQueueError,
    UnknownTaskError,
)
from dtq_core.errors import QueueNotEmptyError, QueueNotFoundError
from dtq_core.infra.settings import Settings
from dtq_core.ops.admin import Admin
from dtq_core.protocol.routing import read_routes
from dtq_devtools.testing import announce_worker, wait_until

EXAMPLES = {"examples.add": "default"}
EMAILS = {"emails.send": "emails"}


@pytest.fixture
async def strict(redis: aioredis.Redis, settings: Settings) -> AsyncIterator[Client]:
    """A client with the production defaults: unknown tasks and unknown queues refused."""
    c = Client(redis, settings.with_overrides(reject_unknown_queues=True))
    yield c
    await c.aclose()


async def _two_workers(redis: aioredis.Redis) -> None:
    """docs/api.md's setting: the examples worker serves `default`, another serves `emails`."""
    await announce_worker(redis, "examples", ["default"], EXAMPLES)
    await announce_worker(redis, "mailer", ["emails"], EMAILS)


async def _keys(redis: aioredis.Redis) -> list[str]:
    return sorted([k async for k in redis.scan_iter(count=1000)])


# -- A: the registered queue is the default, and the queue's workers must have the task ------


async def test_a_submit_without_a_queue_goes_to_the_tasks_registered_queue(
    strict: Client,
) -> None:
    await _two_workers(strict.redis)
    handle = await strict.enqueue("emails.send", args=["a@b.c"])
    assert handle.queue == "emails"
    assert handle.id.startswith("emails:")
    assert (await strict.enqueue("examples.add", args=[1, 2])).queue == "default"


async def test_a_submit_to_a_queue_whose_workers_lack_the_task_is_refused(strict: Client) -> None:
    await _two_workers(strict.redis)
    before = await _keys(strict.redis)
    with pytest.raises(UnknownTaskError) as exc:
        await strict.enqueue("emails.send", queue="default")
    assert exc.value.detail["queues"] == ["emails"]
    assert "no live worker of queue 'default' handles task 'emails.send'" in str(exc.value)
    assert await _keys(strict.redis) == before
    with pytest.raises(UnknownTaskError, match="no live worker has registered task 'nope'"):
        await strict.enqueue("nope")


async def test_a_batch_routes_and_refuses_each_item_on_its_own(strict: Client) -> None:
    await _two_workers(strict.redis)
    results = await strict.enqueue_many(
        [
            {"task": "emails.send", "args": ["a@b.c"]},
            {"task": "emails.send", "queue": "default"},
            TaskRequest(task="examples.add", args=[1, 2]),
            {"task": "nope"},
        ],
        return_exceptions=True,
    )
    assert [getattr(r, "queue", type(r).__name__) for r in results] == [
        "emails",
        "UnknownTaskError",
        "default",
        "UnknownTaskError",
    ]
    records = [k async for k in strict.redis.scan_iter(match="dtq:{*}:t:*")]
    assert len(records) == 2


async def test_the_routes_of_a_dead_worker_expire_with_its_registration(
    redis: aioredis.Redis, settings: Settings
) -> None:
    await announce_worker(redis, "examples", ["default"], EXAMPLES)
    await announce_worker(redis, "mailer", ["emails"], EMAILS, ttl_s=0.3)
    assert (await read_routes(redis, Client(redis, settings).keys)).handled["emails.send"] == {
        "emails"
    }

    # No heartbeat renews it: the mailer's registration (and so its routes) expires.
    async def expired() -> bool:
        return await redis.exists("dtq:worker:mailer") == 0

    await wait_until(expired, timeout=5, message="registration expired")
    client = Client(redis, settings)
    with pytest.raises(
        UnknownTaskError, match=r"no live worker has registered task 'emails\.send'"
    ):
        await client.enqueue("emails.send", queue="emails")


async def test_several_workers_and_versions_of_one_task(strict: Client) -> None:
    """The most recently started worker's declaration is the default (a rolling upgrade that
    moves a task moves unqueued submits with it); every queue a live worker with the task
    serves accepts it."""
    await announce_worker(strict.redis, "v1", ["reports"], {"reports.build": "reports"})
    await announce_worker(strict.redis, "v2", ["reports-v2"], {"reports.build": "reports-v2"})
    assert (await strict.enqueue("reports.build")).queue == "reports-v2"
    assert (await strict.enqueue("reports.build", queue="reports")).queue == "reports"


async def test_a_worker_registered_a_moment_ago_is_not_refused(strict: Client) -> None:
    await announce_worker(strict.redis, "examples", ["default"], EXAMPLES)
    assert (await strict.enqueue("examples.add")).queue == "default"
    await announce_worker(strict.redis, "mailer", ["emails"], EMAILS)
    # The cached routes lack the new worker; the miss rereads them (after half a second).
    handle = await wait_until(
        lambda: _try(strict.enqueue("emails.send")), timeout=5, message="routes reread"
    )
    assert handle.queue == "emails"


async def _try(coro: Any) -> Any:
    try:
        return await coro
    except UnknownTaskError:
        return None


async def test_the_escape_hatch_sends_unqueued_names_to_default(
    redis: aioredis.Redis, settings: Settings
) -> None:
    await _two_workers(redis)
    lax = Client(redis, settings.with_overrides(reject_unknown_tasks=False))
    assert (await lax.enqueue("emails.send")).queue == "default"
    assert (await lax.enqueue("never.registered", queue="emails")).queue == "emails"


async def test_nothing_is_refused_before_any_worker_registered_tasks(strict: Client) -> None:
    await Admin(strict).create_queue("default")
    assert (await strict.enqueue("emails.send")).queue == "default"


# -- C: only deliberate queues accept submits; the registry is bounded ------------------------


async def test_a_submit_into_a_queue_nobody_created_is_refused_and_writes_nothing(
    strict: Client,
) -> None:
    before = await _keys(strict.redis)
    with pytest.raises(UnknownQueueError) as exc:
        await strict.enqueue("t", queue="brand-new")
    assert "dtq queue create brand-new" in str(exc.value)
    results = await strict.enqueue_many(
        [{"task": "t", "queue": f"new-{i}"} for i in range(50)], return_exceptions=True
    )
    assert all(isinstance(r, UnknownQueueError) for r in results)
    assert await _keys(strict.redis) == before


async def test_queues_a_worker_registered_or_an_admin_created_accept_submits(
    strict: Client,
) -> None:
    admin = Admin(strict)
    assert await admin.create_queue("reports", actor="alice")
    assert not await admin.create_queue("reports", actor="alice")  # exists: nothing changes
    assert (await strict.enqueue("t", queue="reports")).queue == "reports"
    await announce_worker(strict.redis, "w", ["served"], {})
    assert (await strict.enqueue("t", queue="served")).queue == "served"
    entries = await strict.redis.xrange(strict.keys.audit)
    assert [(e[1]["action"], e[1]["queue"], e[1]["actor"]) for e in entries] == [
        ("queue.create", "reports", "alice")
    ]


async def test_the_queue_registry_is_bounded(redis: aioredis.Redis, settings: Settings) -> None:
    lax = Client(redis, settings.with_overrides(max_queues=3))
    for q in ("a", "b", "c"):
        await lax.enqueue("t", queue=q)
    with pytest.raises(QueueLimitError, match="DTQ_MAX_QUEUES=3"):
        await lax.enqueue("t", queue="d")
    with pytest.raises(QueueLimitError):
        await Admin(lax).create_queue("d")
    assert await redis.scard(lax.keys.queues) == 3
    assert (await lax.enqueue("t", queue="a")).queue == "a"  # known queues still accept


async def test_an_empty_queue_is_deleted_and_a_busy_one_is_not(strict: Client) -> None:
    admin = Admin(strict)
    await admin.create_queue("tmp")
    handle = await strict.enqueue("t", queue="tmp")
    await strict.enqueue("t", queue="tmp", delay_s=60)
    before = await _keys(strict.redis)
    with pytest.raises(QueueNotEmptyError, match="1 delayed"):
        await admin.delete_queue("tmp")
    assert await _keys(strict.redis) == before
    await admin.purge("tmp")
    await admin.delete_queue("tmp", actor="alice")
    assert not await strict.redis.sismember(strict.keys.queues, "tmp")
    qk = strict.queue_keys("tmp")
    left = [k async for k in strict.redis.scan_iter(match="dtq:{tmp}:*")]
    assert all(k == qk.meta or k.startswith(qk.task_prefix) for k in left), left
    with pytest.raises(QueueNotFoundError):
        await admin.queue("tmp")
    with pytest.raises(UnknownQueueError):
        await strict.enqueue("t", queue="tmp")
    assert (await strict.get(handle.id)) is not None  # the cancelled record keeps its TTL
    with pytest.raises(QueueNotFoundError):
        await admin.delete_queue("tmp")


async def test_a_queue_a_live_worker_serves_comes_back_after_the_registry_lost_it(
    strict: Client,
) -> None:
    """Redis restarted without its data, or an admin deleted the queue: the worker's next
    heartbeat republishes its routes, and a submit into its queue registers the queue again."""
    await announce_worker(strict.redis, "w", ["served"], {"t": "served"})
    await strict.redis.delete(strict.keys.queues)
    assert (await strict.enqueue("t")).queue == "served"
    assert await strict.redis.sismember(strict.keys.queues, "served")
