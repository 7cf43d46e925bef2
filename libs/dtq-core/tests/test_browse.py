"""Listing recent tasks from the event streams (``dtq_core.ops.browse``) against a real Redis."""

from __future__ import annotations

import base64

import msgspec
import pytest

from dtq_core.client import Client
from dtq_core.errors import InvalidNameError, RedisUnavailableError, ValidationError
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id
from dtq_core.ops.browse import (
    LIST_LIMIT_MAX,
    Position,
    TaskPage,
    decode_cursor,
    encode_cursor,
    list_tasks,
    summaries,
)
from dtq_devtools.testing import free_port, wait_until
from dtq_devtools.testing.lifecycle import ERROR, claim, finish, redis_ms


async def submit(client: Client, queue: str, n: int, task: str = "t.a") -> list[str]:
    """``n`` tasks in one batch (one event entry); ids in submit order."""
    handles = await client.enqueue_many([{"task": task, "queue": queue} for _ in range(n)])
    ids = []
    for h in handles:
        assert not isinstance(h, Exception)
        ids.append(h.id)
    return ids


async def promote_all(client: Client, queue: str) -> int:
    promoted, _ = await client.scripts.promote(
        client.queue_keys(queue), epoch=1, limit=100, events_maxlen=1000, retention_ms=600_000
    )
    return promoted


async def next_ms(client: Client) -> None:
    start = await redis_ms(client)
    await wait_until(lambda: _later(client, start), interval=0.001, message="Redis time moved")


async def _later(client: Client, start: int) -> bool:
    return await redis_ms(client) > start


async def walk(client: Client, **filters: object) -> tuple[list[str], list[TaskPage]]:
    """Every page of a listing; the ids in the order they were listed."""
    pages: list[TaskPage] = []
    cursor: str | None = None
    while True:
        page = await list_tasks(client, cursor=cursor, **filters)  # type: ignore[arg-type]
        pages.append(page)
        if page.next_cursor is None:
            return [t.id for item in pages for t in item.items], pages
        cursor = page.next_cursor
        assert len(pages) < 1000, "the walk does not end"


async def test_lists_newest_first_and_pages_through_batches_without_gaps(client: Client) -> None:
    first = await submit(client, "q", 7)
    (single,) = await submit(client, "q", 1)
    second = await submit(client, "q", 5)
    expected = list(reversed([*first, single, *second]))

    page = await list_tasks(client, limit=50)
    assert [t.id for t in page.items] == expected
    assert page.next_cursor is None
    assert {t.status for t in page.items} == {TaskStatus.QUEUED}

    # Pages of 3 end in the middle of batches; together they list each task once, in order.
    ids, pages = await walk(client, limit=3)
    assert ids == expected
    assert [len(p.items) for p in pages] == [3, 3, 3, 3, 1]


async def test_several_queues_merge_newest_first_and_queue_filter(client: Client) -> None:
    order: list[str] = []
    for i in range(6):
        # Entries of two queues in the same ms tie and are ordered by queue name: let the
        # server's clock move on between submits so the order is the submit order.
        await next_ms(client)
        order += await submit(client, "alpha" if i % 2 else "beta", 2)
    ids, _ = await walk(client, limit=4)
    assert ids == list(reversed(order))

    alpha = await list_tasks(client, queue="alpha", limit=50)
    assert [t.id for t in alpha.items] == [i for i in reversed(order) if i.startswith("alpha:")]
    assert (await list_tasks(client, queue="nobody", limit=5)).items == []


async def test_status_and_task_filters(client: Client) -> None:
    await submit(client, "q", 3, task="t.a")
    b_ids = await submit(client, "q", 2, task="t.b")
    got = await claim(client, "q", 10)
    assert len(got) == 5
    dead = [c for c in got if make_task_id("q", c.rand) in b_ids][:1]
    assert await finish(client, "q", dead, "dead") == ["dead"]

    by_task = await list_tasks(client, task="t.b")
    assert [t.id for t in by_task.items] == list(reversed(b_ids))
    only_dead = await list_tasks(client, status="dead")
    assert [t.id for t in only_dead.items] == [make_task_id("q", dead[0].rand)]
    running_a = await list_tasks(client, status=TaskStatus.RUNNING, task="t.a")
    assert len(running_a.items) == 3
    assert all(t.task == "t.a" and t.status is TaskStatus.RUNNING for t in running_a.items)


async def test_promotions_and_requeues_are_not_listed_as_submits(client: Client) -> None:
    delayed = await client.enqueue("t.a", queue="q", delay_s=0.01)
    (retried,) = await submit(client, "q", 1)
    (started,) = await claim(client, "q", 1)
    assert await finish(client, "q", [started], "retry") == ["retrying"]
    # Both the delayed task (due in 10 ms, well inside the submit window) and the retry.
    await wait_until(lambda: _promoted(client, delayed.id, retried), message="both tasks promoted")
    claimed = await claim(client, "q", 10)
    assert {make_task_id("q", c.rand) for c in claimed} == {delayed.id, retried}
    assert await finish(client, "q", claimed[:1], "dead") == ["dead"]
    dead_id = make_task_id("q", claimed[0].rand)
    assert await client.retry(dead_id) is TaskStatus.QUEUED  # a task.queued with a reason
    (last,) = await submit(client, "q", 1)

    events = await client.redis.xrange(client.queue_keys("q").events)
    assert sum(f["type"] == "task.queued" for _, f in events) >= 4  # submit, promotes, requeue
    ids, _ = await walk(client, limit=1)
    assert ids == [last, retried, delayed.id]


async def _promoted(client: Client, *task_ids: str) -> bool:
    await promote_all(client, "q")
    records = [await client.get(i) for i in task_ids]
    return all(r is not None and r.status is TaskStatus.QUEUED for r in records)


async def test_work_per_page_is_bounded_and_the_cursor_continues(client: Client) -> None:
    await submit(client, "q", 1, task="t.old")
    (old,) = await claim(client, "q", 1)
    assert await finish(client, "q", [old], "dead") == ["dead"]
    for _ in range(10):
        await submit(client, "q", 10)  # 100 newer tasks that are not dead

    page = await list_tasks(client, status="dead", limit=1)  # examines at most 20 positions
    assert page.items == []
    assert page.next_cursor is not None
    ids, pages = await walk(client, status="dead", limit=1)
    assert ids == [make_task_id("q", old.rand)]
    assert 5 <= len(pages) <= 10


async def test_expired_records_are_skipped(client: Client) -> None:
    ids = await submit(client, "q", 3)
    qk = client.queue_keys("q")
    assert await client.redis.delete(qk.task(ids[1].partition(":")[2])) == 1  # as on expiry
    page = await list_tasks(client)
    assert [t.id for t in page.items] == [ids[2], ids[0]]


async def test_the_list_covers_what_the_event_stream_retains(client: Client) -> None:
    old = await submit(client, "q", 2)
    await client.redis.xtrim(client.queue_keys("q").events, maxlen=0)
    new = await submit(client, "q", 2)
    page = await list_tasks(client)
    assert [t.id for t in page.items] == list(reversed(new))
    for task_id in old:
        assert await client.get(task_id) is not None  # still there, not listed


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"limit": 0}, ValidationError),
        ({"limit": LIST_LIMIT_MAX + 1}, ValidationError),
        ({"limit": True}, ValidationError),
        ({"status": "done"}, ValidationError),
        ({"queue": "a:b"}, InvalidNameError),
        ({"task": "{x}"}, InvalidNameError),
        ({"cursor": "0-0 COUNT 1000000"}, ValidationError),
        ({"cursor": "!!"}, ValidationError),
        ({"cursor": base64.urlsafe_b64encode(b"1|1-0|{q}|0").decode()}, ValidationError),
        ({"cursor": "x" * 500}, ValidationError),
    ],
)
async def test_bad_arguments_are_refused(
    client: Client, kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        await list_tasks(client, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValidationError)
    assert info.value.field in {"limit", "status", "queue", "task", "cursor"}


def test_cursor_round_trip_and_order() -> None:
    pos = Position(1_700_000_000_000, 3, "emails", 17)
    assert decode_cursor(encode_cursor(pos)) == pos
    assert Position(5, 0, "a", 9) < Position(5, 0, "b", 0) < Position(5, 1, "a", 0)


async def test_redis_down_is_redis_unavailable(settings: Settings) -> None:
    dead = load_settings({}, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    async with Client.from_settings(dead) as down:
        with pytest.raises(RedisUnavailableError):
            await list_tasks(down)
    assert settings.redis.url != dead.redis.url


async def test_a_page_stops_at_its_byte_cap_and_the_walk_goes_on(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PAGE_BYTES_MAX a page ends early with its cursor; paging still lists every task
    once, in order."""
    ids = list(reversed(await submit(client, "q", 12)))
    size = len(msgspec.json.encode((await list_tasks(client, limit=1)).items[0])) + 1
    monkeypatch.setattr(summaries, "PAGE_BYTES_MAX", 5 * size)
    page = await list_tasks(client, limit=50)
    assert [t.id for t in page.items] == ids[:5]
    assert page.next_cursor is not None
    listed, pages = await walk(client, limit=50)
    assert listed == ids
    assert [len(p.items) for p in pages] == [5, 5, 2]


async def test_summaries_carry_sizes_and_the_last_error_but_no_bodies(client: Client) -> None:
    handle = await client.enqueue("t.a", args=["x" * 5000], kwargs={"k": "v"}, queue="q")
    await finish(client, "q", await claim(client, "q"), "dead")
    (summary,) = (await list_tasks(client)).items
    assert summary.id == handle.id
    assert summary.args_bytes == len(msgspec.json.encode(["x" * 5000]))
    assert summary.kwargs_bytes == len(b'{"k":"v"}')
    assert (summary.result_bytes, summary.metadata_bytes) == (0, 0)
    assert summary.error_count == 1
    assert summary.errors_bytes == len(ERROR) + 2
    assert summary.last_error is not None
    assert summary.last_error.message == "boom"
    encoded = msgspec.json.decode(msgspec.json.encode(summary))
    assert not {"args", "kwargs", "metadata", "result", "errors"} & set(encoded)
