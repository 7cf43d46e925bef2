"""The dead-letter queue (``dtq_core.ops.admin.dlq``) against a real redis-server: list, requeue,
discard and purge."""

from __future__ import annotations

import msgspec
import pytest

from dtq_core.client import Client
from dtq_core.errors import (
    InvalidStateError,
    TaskNotFoundError,
    ValidationError,
)
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id, split_task_id
from dtq_core.ops.admin import Admin
from dtq_core.ops.browse import summaries
from dtq_devtools.testing.lifecycle import audit_entries as audit
from dtq_devtools.testing.lifecycle import claim, make_dead, status


async def test_a_dlq_page_stops_at_its_byte_cap(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = Admin(client)
    dead = (await make_dead(client, "q", 7))[::-1]
    size = len(msgspec.json.encode((await admin.dlq_list("q", limit=1)).items[0])) + 1
    monkeypatch.setattr(summaries, "PAGE_BYTES_MAX", 3 * size)
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await admin.dlq_list("q", limit=1000, cursor=cursor)
        pages.append([r.id for r in page.items])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == [dead[:3], dead[3:6], dead[6:]]


async def test_dlq_list_pages_newest_first(client: Client) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 5)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await admin.dlq_list("q", limit=2, cursor=cursor)
        pages += 1
        seen += [r.id for r in page.items]
        assert all(r.status is TaskStatus.DEAD for r in page.items)
        assert all(r.last_error and r.last_error.message == "boom" for r in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == dead[::-1]
    assert pages == 3

    everything = await admin.dlq_list("q")
    assert [r.id for r in everything.items] == dead[::-1]
    assert everything.next_cursor is None


async def test_dlq_list_filters_by_task_and_skips_expired_records(client: Client) -> None:
    admin = Admin(client)
    mails = await make_dead(client, "q", 3, task="mail.send")
    sms = await make_dead(client, "q", 2, task="sms.send")
    page = await admin.dlq_list("q", task="sms.send")
    assert [r.id for r in page.items] == sms[::-1]
    assert {r.task for r in page.items} == {"sms.send"}

    _, rand = split_task_id(mails[1]) or ("", "")
    await client.redis.delete(client.queue_keys("q").task(rand))
    page = await admin.dlq_list("q", task="mail.send", limit=1)
    assert [r.id for r in page.items] == [mails[2]]
    page = await admin.dlq_list("q", task="mail.send", limit=1, cursor=page.next_cursor)
    assert [r.id for r in page.items] == [mails[0]]
    assert page.next_cursor is None


async def test_dlq_list_validates_its_arguments(client: Client) -> None:
    admin = Admin(client)
    await make_dead(client, "q", 1)
    for kwargs in ({"limit": 0}, {"limit": 1001}, {"cursor": "nope"}, {"task": "a b"}):
        with pytest.raises(ValidationError):
            await admin.dlq_list("q", **kwargs)


async def test_dlq_requeue_by_ids_refuses_bad_ids_before_changing_anything(
    client: Client,
) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 3)
    other = await make_dead(client, "elsewhere", 1)
    queued = await client.enqueue("t.a", queue="q")
    missing = make_task_id("q", "0" * 32)
    cases: list[tuple[list[str], type[Exception]]] = [
        ([dead[0], "q:xyz"], ValidationError),
        ([dead[0], other[0]], TaskNotFoundError),
        ([dead[0], missing], TaskNotFoundError),
        ([dead[0], queued.id], InvalidStateError),
    ]
    for ids, error in cases:
        with pytest.raises(error):
            await admin.dlq_requeue("q", ids)
    assert (await admin.queue("q")).dead == 3
    assert await status(client, dead[0]) is TaskStatus.DEAD

    assert await admin.dlq_requeue("q", [dead[0], dead[2], dead[0]], actor="ops") == 2
    record = await client.get(dead[0])
    assert record is not None
    assert (record.status, record.attempts, len(record.errors)) == (TaskStatus.QUEUED, 0, 1)
    assert await status(client, dead[1]) is TaskStatus.DEAD
    stats = await admin.queue("q")
    assert (stats.dead, stats.depth) == (1, 3)
    entry = (await audit(client))[-1]
    assert (entry["action"], entry["count"], entry["actor"]) == ("dlq.requeue", "2", "ops")
    assert dead[2] in entry["detail"]


async def test_dlq_requeue_all_or_by_task_name(client: Client) -> None:
    admin = Admin(client)
    mails = await make_dead(client, "q", 130, task="mail.send")
    sms = await make_dead(client, "q", 2, task="sms.send")
    for kwargs in ({}, {"all": True, "task": "sms.send"}):
        with pytest.raises(ValidationError):
            await admin.dlq_requeue("q", **kwargs)
    with pytest.raises(ValidationError):
        await admin.dlq_requeue("q", [sms[0]], all=True)

    assert await admin.dlq_requeue("q", task="sms.send") == 2
    assert {await status(client, t) for t in sms} == {TaskStatus.QUEUED}
    assert (await admin.queue("q")).dead == 130

    assert await admin.dlq_requeue("q", all=True) == 130
    assert {await status(client, t) for t in mails} == {TaskStatus.QUEUED}
    stats = await admin.queue("q")
    assert (stats.dead, stats.depth) == (0, 132)
    details = [e["detail"] for e in await audit(client)]
    assert details == ["task=sms.send", "all"]


async def test_dlq_discard_deletes_only_the_given_dead_tasks(client: Client) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 3)
    await client.enqueue("t.a", queue="q")
    (running,) = await claim(client, "q", 1)
    with pytest.raises(InvalidStateError):
        await admin.dlq_discard("q", [dead[0], make_task_id("q", running.rand)])
    with pytest.raises(ValidationError):
        await admin.dlq_discard("q", [])
    assert (await admin.queue("q")).dead == 3

    assert await admin.dlq_discard("q", dead[:2]) == 2
    assert await client.get(dead[0]) is None
    assert await client.get(dead[1]) is None
    assert await status(client, dead[2]) is TaskStatus.DEAD
    assert (await admin.queue("q")).dead == 1
    assert (await audit(client))[-1]["action"] == "dlq.discard"


async def test_dlq_purge_empties_the_dlq_including_expired_records(client: Client) -> None:
    admin = Admin(client)
    dead = await make_dead(client, "q", 120)
    _, rand = split_task_id(dead[7]) or ("", "")
    await client.redis.delete(client.queue_keys("q").task(rand))
    survivor = await client.enqueue("t.a", queue="q")

    assert await admin.dlq_purge("q", actor="ops") == 120

    assert await client.redis.xlen(client.queue_keys("q").dlq) == 0
    assert await client.get(dead[0]) is None
    assert await status(client, survivor.id) is TaskStatus.QUEUED
    entry = (await audit(client))[-1]
    assert (entry["action"], entry["count"]) == ("dlq.purge", "120")
    assert await admin.dlq_purge("q") == 0
