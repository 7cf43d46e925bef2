"""Bad input through the SDK is refused with a clear error, and nothing reaches Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from dtq_core import (
    Client,
    InvalidNameError,
    PayloadTooLargeError,
    UnknownTaskError,
    ValidationError,
)
from dtq_devtools.testing import announce_worker


async def _snapshot(r: aioredis.Redis) -> tuple[int, list[str]]:
    keys = sorted([k async for k in r.scan_iter(count=1000)])
    return await r.dbsize(), keys


BAD: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("queue with {", {"queue": "a{b"}, InvalidNameError, "queue name"),
    ("queue with }", {"queue": "a}b"}, InvalidNameError, "queue name"),
    ("queue with :", {"queue": "a:b"}, InvalidNameError, "queue name"),
    ("queue with space", {"queue": "a b"}, InvalidNameError, "queue name"),
    ("queue of 300 chars", {"queue": "q" * 300}, InvalidNameError, "at most 64"),
    ("task with {", {"task": "t{x}"}, InvalidNameError, "task name"),
    ("task with :", {"task": "t:x"}, InvalidNameError, "task name"),
    ("task with space", {"task": "t x"}, InvalidNameError, "task name"),
    ("task of 300 chars", {"task": "t" * 300}, InvalidNameError, "task name"),
    (
        "oversized payload",
        {"args": ["x" * 262_144]},
        PayloadTooLargeError,
        "DTQ_MAX_PAYLOAD_BYTES=262144",
    ),
    (
        "unknown task",
        {"task": "never.registered"},
        UnknownTaskError,
        "no live worker has registered task 'never.registered'",
    ),
    ("priority 10", {"priority": 10}, ValidationError, "priority must be an integer from 0 to 9"),
    ("priority -1", {"priority": -1}, ValidationError, "priority"),
    ("priority as text", {"priority": "5"}, ValidationError, "priority"),
]


@pytest.mark.parametrize(("case", "options", "error", "says"), BAD, ids=[b[0] for b in BAD])
async def test_bad_submit_is_refused_and_writes_nothing(
    client: Client, case: str, options: dict[str, Any], error: type[Exception], says: str
) -> None:
    # A worker has registered its tasks, so unknown names are refused.
    await announce_worker(client.redis, "w1", ["warm", "default"], {"known.task": "default"})
    await client.enqueue("known.task", queue="warm")  # the queue's keys exist already
    before = await _snapshot(client.redis)
    task = options.pop("task", "known.task")
    with pytest.raises(error) as exc:
        await client.enqueue(task, **options)
    assert says in str(exc.value)
    assert await _snapshot(client.redis) == before


async def test_batch_refuses_bad_items_and_submits_the_rest(client: Client) -> None:
    await announce_worker(client.redis, "w1", ["q"], {"known.task": "q"})
    results = await client.enqueue_many(
        [
            {"task": "known.task", "queue": "q"},
            {"task": "known.task", "queue": "bad name"},
            {"task": "unknown.task", "queue": "q"},
            {"task": "known.task", "queue": "q", "priority": 42},
            {"task": "known.task", "queue": "q", "args": ["x" * 300_000]},
        ],
        return_exceptions=True,
    )
    assert not isinstance(results[0], Exception)
    assert [type(r) for r in results[1:]] == [
        InvalidNameError,
        UnknownTaskError,
        ValidationError,
        PayloadTooLargeError,
    ]
    # Exactly one task record exists: the valid one.
    records = [k async for k in client.redis.scan_iter(match="dtq:{q}:t:*")]
    assert len(records) == 1
