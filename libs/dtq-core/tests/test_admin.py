"""The admin API as a whole against a real redis-server: its audit entries (Redis time, one
transaction with a one-write change, right after it on a cluster) and Redis not answering.
Each part has its own file: ``test_admin_stats``, ``test_admin_queues``, ``test_admin_dlq``,
``test_admin_workers``."""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
import pytest
from redis.exceptions import ResponseError

from dtq_core.client import Client
from dtq_core.errors import (
    RedisUnavailableError,
    ValidationError,
)
from dtq_core.infra.cluster import is_cluster
from dtq_core.infra.connection import connect
from dtq_core.ops.admin import Admin
from dtq_core.ops.schedules import ScheduleSpec, ScheduleStore
from dtq_devtools.testing import free_port
from dtq_devtools.testing.lifecycle import audit_entries as audit
from dtq_devtools.testing.lifecycle import redis_ms
from dtq_devtools.testing.servers import acl_deluser, acl_setuser


async def test_audit_entries_carry_redis_time(client: Client) -> None:
    admin = Admin(client)
    await client.enqueue("t.a", queue="q")
    before = await redis_ms(client)
    await admin.pause("q")
    after = await redis_ms(client)
    (entry,) = await audit(client)
    assert entry["actor"] == "cli"
    assert before * 1000 <= int(entry["ts"]) <= (after + 1) * 1000
    with pytest.raises(ValidationError):
        await admin.resume("q", actor="")
    assert len(await audit(client)) == 1


async def test_admin_reports_redis_unavailable_when_nothing_answers() -> None:
    async with Client.from_url(f"redis://127.0.0.1:{free_port()}/0") as client:
        admin = Admin(client)
        with pytest.raises(RedisUnavailableError):
            await admin.queues()
        with pytest.raises(RedisUnavailableError):
            await admin.pause("q")


@pytest.fixture
async def auditless(client: Client, settings: Any) -> Any:
    """An Admin whose Redis user may change queues and schedules but not append to the audit
    stream: its XADD is refused, as a dropped connection would lose it."""
    ns = settings.namespace
    secret = secrets.token_hex(16)
    await acl_setuser(
        client.redis, "auditless", "reset", "on", f">{secret}", f"~{ns}:{{*", f"~{ns}:queues",
        f"~{ns}:schedules*", f"%R~{ns}:audit", "+@all",
    )  # fmt: skip
    redis = connect(settings, username="auditless", password=secret)
    limited = Client(redis, settings)
    yield Admin(limited)
    await limited.aclose()
    await redis.aclose()
    await acl_deluser(client.redis, "auditless")


async def test_a_change_is_not_made_when_its_audit_entry_cannot_be(
    client: Client, auditless: Admin
) -> None:
    """The change and its entry are one transaction: no pause without its audit entry. On a
    cluster the entry follows the change (the audit stream is in another slot): the change
    is made and the caller is told that its entry was not written."""
    await client.enqueue("t", queue="mail")
    with pytest.raises(ResponseError, match="no permissions"):
        await auditless.pause("mail", actor="ops")
    assert (await Admin(client).queue("mail")).paused is is_cluster(client.redis)
    assert await client.redis.xlen(client.keys.audit) == 0


async def test_a_schedule_change_is_not_made_when_its_audit_entry_cannot_be(
    client: Client, auditless: Admin
) -> None:
    """As above, for each change of a schedule."""
    store = ScheduleStore(client.redis, client.keys)
    limited = ScheduleStore(auditless.redis, auditless.keys)
    stamp = await auditless.stamp()
    atomic = not is_cluster(client.redis)

    def entry(spec: ScheduleSpec) -> Any:
        return stamp.entry("schedule.put", queue=spec.queue, actor="ops", count=1)

    nightly = ScheduleSpec(name="nightly", task="ops.report", every_s=60)
    with pytest.raises(ResponseError, match="no permissions"):
        await limited.put(nightly, audit_for=entry)
    assert await store.get("nightly") == (None if atomic else nightly)
    await store.put(nightly)
    with pytest.raises(ResponseError, match="no permissions"):
        await limited.pause("nightly", audit_for=entry)
    paused = msgspec.structs.replace(nightly, paused=True)
    assert await store.get("nightly") == (nightly if atomic else paused)
    await store.put(nightly)
    with pytest.raises(ResponseError, match="no permissions"):
        await limited.delete("nightly", audit_for=entry)
    assert await store.get("nightly") == (nightly if atomic else None)
    assert await client.redis.xlen(client.keys.audit) == 0
