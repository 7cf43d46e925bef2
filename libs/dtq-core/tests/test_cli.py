"""The ``dtq`` CLI run as a subprocess against a real redis-server: output and exit codes."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from croniter import croniter  # type: ignore[import-untyped]  # croniter ships no type hints

from dtq_core.client import Client
from dtq_core.infra.auth import Scope, authenticate, parse_api_keys
from dtq_core.messages import TaskStatus
from dtq_core.names import make_task_id
from dtq_core.ops.schedules import LastTick, ScheduleSpec, ScheduleStore
from dtq_core.protocol.scripts import Claimed
from dtq_devtools.testing import announce_worker, free_port, wait_until
from dtq_devtools.testing.lifecycle import ERROR, claim, finish, make_dead, status


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


async def dtq(url: str, *args: str, **env: str) -> Run:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DTQ_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dtq_core.ops.cli",
        *args,
        env={**clean, "DTQ_REDIS_URL": url, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    return run


async def test_status_shows_queues_and_workers(client: Client, redis_url: str) -> None:
    empty = await dtq(redis_url, "status")
    assert empty.code == 0
    assert "no queues yet" in empty.out
    assert "no workers" in empty.out

    await client.enqueue_many([{"task": "t.a", "queue": "emails", "priority": 9}] * 2)
    await client.enqueue("t.a", queue="emails", priority=2)
    await client.enqueue("t.a", queue="emails", delay_s=300)
    await claim(client, "emails", 1)
    await make_dead(client, "reports", 1)
    seconds, _ = await client.redis.time()
    await client.redis.zadd(client.keys.workers, {"box-1": int(seconds) * 1000})
    await client.redis.hset(
        client.keys.worker("box-1"),
        mapping={"id": "box-1", "host": "box", "pid": "7", "queues": "emails", "state": "running"},
    )

    table = await dtq(redis_url, "status")
    assert table.code == 0
    lines = table.out.splitlines()
    assert lines[0].split()[:3] == ["QUEUE", "PAUSED", "DEPTH"]
    emails = next(line for line in lines if line.startswith("emails"))
    assert emails.split()[:5] == ["emails", "no", "2", "p9:1", "p2:1"]
    worker = next(line for line in lines if line.startswith("box-1"))
    assert worker.split()[:4] == ["box-1", "box", "7", "emails"]
    assert "running" in worker

    as_json = await dtq(redis_url, "status", "--json")
    assert as_json.code == 0
    doc = msgspec.json.decode(as_json.out)
    by_name = {q["name"]: q for q in doc["queues"]}
    assert by_name["emails"]["depth"] == 2
    assert by_name["emails"]["depth_by_priority"]["9"] == 1
    assert (by_name["emails"]["delayed"], by_name["emails"]["in_flight"]) == (1, 1)
    assert by_name["reports"]["dead"] == 1
    assert [w["id"] for w in doc["workers"]] == ["box-1"]


async def test_enqueue_prints_the_id_and_task_prints_the_record(
    client: Client, redis_url: str
) -> None:
    for queue in ("emails", "default"):
        assert (await dtq(redis_url, "queue", "create", queue)).code == 0
    run = await dtq(
        redis_url, "enqueue", "emails.send", "--queue", "emails", "--args", '["a@b.c"]',
        "--kwargs", '{"subject": "hi"}', "--priority", "7", "--idempotency-key", "k1",
    )  # fmt: skip
    assert run.code == 0, run.err
    task_id = run.out.strip()
    record = await client.get(task_id)
    assert record is not None
    assert (record.task, record.queue, record.priority) == ("emails.send", "emails", 7)
    assert (record.args, record.kwargs) == (["a@b.c"], {"subject": "hi"})

    replay = await dtq(
        redis_url, "enqueue", "emails.send", "--queue", "emails", "--args", '["a@b.c"]',
        "--kwargs", '{"subject": "hi"}', "--priority", "7", "--idempotency-key", "k1",
    )  # fmt: skip
    assert (replay.code, replay.out.strip()) == (0, task_id)
    assert "idempotent replay" in replay.err

    delayed = await dtq(redis_url, "enqueue", "t.later", "--delay", "300")
    assert delayed.code == 0
    assert await status(client, delayed.out.strip()) is TaskStatus.SCHEDULED

    shown = await dtq(redis_url, "task", task_id)
    assert shown.code == 0
    doc = msgspec.json.decode(shown.out)
    assert (doc["id"], doc["status"], doc["args"]) == (task_id, "queued", ["a@b.c"])


async def test_enqueue_wait_prints_the_outcome(client: Client, redis_url: str) -> None:
    for queue in ("q", "r"):
        assert (await dtq(redis_url, "queue", "create", queue)).code == 0
    proc = asyncio.create_task(dtq(redis_url, "enqueue", "t.add", "--queue", "q", "--wait", "30"))

    async def started() -> list[Claimed]:
        return await claim(client, "q", 1)

    got = await wait_until(started, timeout=30, message="the CLI's task was submitted")
    await finish(client, "q", got, "ok", payload='{"sum": 3}')
    run = await proc
    assert run.code == 0, run.err
    outcome = msgspec.json.decode(run.out)
    assert outcome["id"] == make_task_id("q", got[0].rand)
    assert (outcome["status"], outcome["result"]) == ("succeeded", {"sum": 3})

    failing = asyncio.create_task(
        dtq(redis_url, "enqueue", "t.bad", "--queue", "r", "--wait", "30")
    )
    got = await wait_until(lambda: claim(client, "r", 1), timeout=30, message="submitted")
    await finish(client, "r", got, "dead", payload=ERROR)
    run = await failing
    assert run.code == 1
    assert msgspec.json.decode(run.out)["status"] == "dead"


async def test_enqueue_wait_times_out_with_exit_1(client: Client, redis_url: str) -> None:
    assert (await dtq(redis_url, "queue", "create", "default")).code == 0
    run = await dtq(redis_url, "enqueue", "t.slow", "--wait", "0.2")
    assert run.code == 1
    assert "did not finish within 0.2 s" in run.err
    assert await client.redis.scard(client.keys.queues) == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["enqueue", "t.a", "--queue", "bad queue"], 1, "queue name 'bad queue' is invalid"),
        (["enqueue", "t.a", "--priority", "12"], 1, "priority must be an integer from 0 to 9"),
        (["enqueue", "t.a", "--args", "{"], 2, "not valid JSON"),
        (["enqueue", "t.a", "--kwargs", "[1]"], 2, "must be a JSON object"),
        (["task", "nope"], 1, "'nope' is not a task id"),
        (["task", "q:" + "0" * 32], 1, "not found"),
        (["queue", "pause", "ghost"], 1, "queue 'ghost' is not known"),
        (["queue", "pause", "a:b"], 1, "queue name 'a:b' is invalid"),
        (["queue", "purge", "q"], 2, "this cancels every waiting task of queue q"),
        (["dlq", "purge", "q"], 2, "this deletes every dead task of queue q"),
        (["dlq", "requeue", "q"], 2, "give exactly one of"),
        (["dlq", "requeue", "q", "--all", "--task", "t.a"], 2, "give exactly one of"),
        (["dlq", "list", "q", "--limit", "0"], 1, "limit must be from 1 to 1000"),
        (["bogus"], 2, "invalid choice"),
    ],
)
async def test_bad_input_gets_a_one_line_message(
    client: Client, redis_url: str, args: list[str], code: int, message: str
) -> None:
    await client.enqueue("t.a", queue="q")
    run = await dtq(redis_url, *args)
    assert run.code == code
    assert message in run.err
    assert run.out == ""
    if code == 1:
        assert run.err.count("\n") == 1
    # Nothing was written: no new queue, no audit entry, the one task still waiting.
    assert await client.redis.smembers(client.keys.queues) == {"q"}
    assert await client.redis.exists(client.keys.audit) == 0
    assert await client.redis.hget(client.queue_keys("q").meta, "paused") is None


async def test_each_purge_warns_of_what_it_does(redis_url: str) -> None:
    """``queue purge`` cancels (the tasks stay, as cancelled); only ``dlq purge`` deletes."""
    queue = await dtq(redis_url, "queue", "purge", "q")
    assert "cancels every waiting task" in queue.err
    assert "for good" not in queue.err
    assert "delete" not in queue.err
    assert "add --yes" in queue.err
    dlq = await dtq(redis_url, "dlq", "purge", "q")
    assert "deletes every dead task of queue q and its record for good" in dlq.err
    assert "add --yes" in dlq.err


async def test_the_next_page_hint_keeps_the_filter_and_the_page_size(
    client: Client, redis_url: str
) -> None:
    mails = await make_dead(client, "q", 3, task="mail.send")
    await make_dead(client, "q", 2, task="sms.send")
    first = await dtq(redis_url, "dlq", "list", "q", "--task", "mail.send", "--limit", "2")
    hint = first.out.splitlines()[-1]
    assert hint.startswith("more: dtq dlq list q --limit 2 --task mail.send --cursor ")
    following = await dtq(redis_url, *shlex.split(hint.removeprefix("more: dtq ")))
    assert following.code == 0
    assert [r.split()[0] for r in following.out.splitlines()[1:]] == [mails[0]]  # no sms.send
    default = await dtq(redis_url, "dlq", "list", "q", "--limit", "50")
    assert "more:" not in default.out


async def test_queue_pause_resume_and_purge(client: Client, redis_url: str) -> None:
    handles = await client.enqueue_many([{"task": "t.a", "queue": "q"}] * 3)
    meta = client.queue_keys("q").meta

    run = await dtq(redis_url, "--actor", "alice", "queue", "pause", "q")
    assert run.code == 0
    assert "paused" in run.out
    assert await client.redis.hget(meta, "paused") == "1"
    run = await dtq(redis_url, "queue", "resume", "q")
    assert run.code == 0
    assert await client.redis.hget(meta, "paused") == "0"

    (running,) = await claim(client, "q", 1)
    run = await dtq(redis_url, "queue", "purge", "q", "--yes")
    assert run.code == 0
    assert "purged 2 waiting tasks" in run.out
    statuses = {await status(client, h.id) for h in handles if not isinstance(h, Exception)}
    assert statuses == {TaskStatus.RUNNING, TaskStatus.CANCELLED}
    assert await status(client, make_task_id("q", running.rand)) is TaskStatus.RUNNING

    audit = [f for _, f in await client.redis.xrange(client.keys.audit)]
    assert [(e["action"], e["actor"]) for e in audit] == [
        ("queue.pause", "alice"),
        ("queue.resume", "cli"),
        ("queue.purge", "cli"),
    ]


async def test_dlq_list_requeue_discard_and_purge(client: Client, redis_url: str) -> None:
    mails = await make_dead(client, "q", 3, task="mail.send")
    sms = await make_dead(client, "q", 2, task="sms.send")

    table = await dtq(redis_url, "dlq", "list", "q", "--limit", "4")
    assert table.code == 0
    rows = table.out.splitlines()
    assert rows[0].split()[:3] == ["ID", "TASK", "ATTEMPTS"]
    assert [r.split()[0] for r in rows[1:5]] == [*sms[::-1], *mails[::-1][:2]]
    assert "ValueError: boom" in rows[1]
    assert rows[5].startswith("more: dtq dlq list q --limit 4 --cursor ")
    following = await dtq(redis_url, "dlq", "list", "q", "--cursor", rows[5].split()[-1])
    assert following.code == 0
    assert [r.split()[0] for r in following.out.splitlines()[1:]] == [mails[0]]

    as_json = await dtq(redis_url, "dlq", "list", "q", "--task", "sms.send", "--json")
    page: dict[str, Any] = msgspec.json.decode(as_json.out)
    assert [r["id"] for r in page["items"]] == sms[::-1]
    assert page["next_cursor"] is None

    run = await dtq(redis_url, "dlq", "requeue", "q", "--task", "sms.send")
    assert (run.code, run.out.strip()) == (0, "requeued 2 dead tasks of queue q")
    run = await dtq(redis_url, "dlq", "requeue", "q", mails[0])
    assert (run.code, run.out.strip()) == (0, "requeued 1 dead tasks of queue q")
    assert await status(client, mails[0]) is TaskStatus.QUEUED
    run = await dtq(redis_url, "dlq", "requeue", "q", sms[0])
    assert run.code == 1
    assert f"task {sms[0]} is queued, not dead" in run.err

    run = await dtq(redis_url, "dlq", "discard", "q", mails[1])
    assert (run.code, run.out.strip()) == (0, "discarded 1 dead tasks of queue q")
    assert await client.get(mails[1]) is None
    run = await dtq(redis_url, "dlq", "discard", "q", make_task_id("other", "a" * 32))
    assert run.code == 1
    assert "is not in queue 'q'" in run.err

    run = await dtq(redis_url, "dlq", "purge", "q", "--yes")
    assert (run.code, run.out.strip()) == (0, "removed 1 entries from the dead-letter queue of q")
    assert await client.redis.xlen(client.queue_keys("q").dlq) == 0
    empty = await dtq(redis_url, "dlq", "list", "q")
    assert (empty.code, empty.out.strip()) == (0, "no dead tasks in queue q")

    run = await dtq(redis_url, "dlq", "requeue", "q", "--all")
    assert (run.code, run.out.strip()) == (0, "requeued 0 dead tasks of queue q")


async def test_redis_that_does_not_answer_gives_one_line_and_exit_1() -> None:
    port = free_port()
    run = await dtq(f"redis://:s3cret@127.0.0.1:{port}/0", "status")
    assert run.code == 1
    said = f"dtq: Redis at redis://127.0.0.1:{port}/0 did not answer: Error 111 connecting to"
    assert run.err.startswith(said), run.err
    assert run.err.count("\n") == 1
    assert "s3cret" not in run.err
    run = await dtq(f"redis://127.0.0.1:{port}/0", "enqueue", "t.a")
    assert (run.code, run.out) == (1, "")
    assert run.err.startswith(said), run.err


async def test_invalid_settings_exit_2_naming_the_variable(redis_url: str) -> None:
    run = await dtq(redis_url, "status", DTQ_HEARTBEAT_INTERVAL_S="soon")
    assert run.code == 2
    assert "DTQ_HEARTBEAT_INTERVAL_S" in run.err
    run = await dtq("nosuch://host", "status")
    assert run.code == 2
    assert "DTQ_REDIS_URL='nosuch://host' is invalid" in run.err


async def test_enqueue_without_a_queue_uses_the_tasks_registered_queue(
    client: Client, redis_url: str
) -> None:
    await announce_worker(client.redis, "examples", ["default"], {"examples.add": "default"})
    await announce_worker(client.redis, "mailer", ["emails"], {"emails.send": "emails"})
    run = await dtq(redis_url, "enqueue", "emails.send", "--args", '["a@b.c"]')
    assert run.code == 0, run.err
    assert run.out.startswith("emails:")
    refused = await dtq(redis_url, "enqueue", "emails.send", "--queue", "default")
    assert refused.code == 1
    assert "no live worker of queue 'default' handles task 'emails.send'" in refused.err


async def test_queue_create_and_delete(client: Client, redis_url: str) -> None:
    refused = await dtq(redis_url, "enqueue", "t", "--queue", "reports")
    assert refused.code == 1
    assert "dtq queue create reports" in refused.err
    created = await dtq(redis_url, "--actor", "alice", "queue", "create", "reports")
    assert (created.code, created.out) == (0, "queue reports created: it accepts submits\n")
    again = await dtq(redis_url, "queue", "create", "reports")
    assert "exists already" in again.out
    assert (await dtq(redis_url, "enqueue", "t", "--queue", "reports")).code == 0
    busy = await dtq(redis_url, "queue", "delete", "reports")
    assert busy.code == 1
    assert "is not empty (waiting tasks)" in busy.err
    assert (await dtq(redis_url, "queue", "purge", "reports", "--yes")).code == 0
    deleted = await dtq(redis_url, "queue", "delete", "reports")
    assert deleted.code == 0, deleted.err
    assert not await client.redis.sismember(client.keys.queues, "reports")
    assert (await dtq(redis_url, "queue", "create", "one")).code == 0
    limited = await dtq(redis_url, "queue", "create", "more", DTQ_MAX_QUEUES="1")
    assert limited.code == 1
    assert "DTQ_MAX_QUEUES=1" in limited.err


async def test_schedule_list_shows_each_next_fire_and_last_tick(
    client: Client, redis_url: str
) -> None:
    assert (await dtq(redis_url, "schedule", "list")).out == "no schedules\n"
    store = ScheduleStore(client.redis, client.keys)
    await store.put(
        ScheduleSpec(name="good", task="reports.build", queue="reports", every_s=60, paused=True)
    )
    await store.put(
        ScheduleSpec(name="typo", task="reports.buidl", queue="reports", cron="0 0 L * *")
    )
    tick = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    task_id = make_task_id("reports", "ab" * 16)
    await store.record_tick("good", LastTick(tick=tick, at=tick, outcome="fired", task_id=task_id))
    reason = "no live worker has registered task 'reports.buidl'"
    await store.record_tick(
        "typo", LastTick(tick=tick, at=tick, outcome="refused", code="unknown_task", reason=reason)
    )
    before = await store.now_ms() / 1000
    run = await dtq(redis_url, "schedule", "list")
    after = await store.now_ms() / 1000
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    header = ["SCHEDULE", "TASK", "QUEUE", "WHEN", "STATE", "NEXT", "FIRE", "LAST", "TICK"]
    assert lines[0].split() == header
    assert "paused  - " in lines[1]
    assert f"fired {task_id} at 2026-12-01T14:00:00+00:00" in lines[1]
    assert "cron 0 0 L * *" in lines[2]
    last_days = {
        datetime.fromtimestamp(croniter("0 0 L * *", t).get_next(float), UTC).isoformat()
        for t in (before, after)
    }
    assert any(f"active  {day}" in lines[2] for day in last_days), lines[2]
    assert f"refused at 2026-12-01T14:00:00+00:00: unknown_task: {reason}" in lines[2]
    listed = msgspec.json.decode((await dtq(redis_url, "schedule", "list", "--json")).out)
    assert [(s["name"], s["last_tick"]["outcome"]) for s in listed] == [
        ("good", "fired"),
        ("typo", "refused"),
    ]


async def test_keys_new_prints_a_secret_and_its_entry_without_redis() -> None:
    nobody = f"redis://127.0.0.1:{free_port()}"  # nothing listens: the command needs no Redis
    run = await dtq(nobody, "keys", "new", "ci-bot", "read+submit")
    assert run.code == 0, run.err
    lines = dict(line.split(": ", 1) for line in run.out.strip().splitlines())
    secret = lines["secret (give it to the client, shown once)"].strip()
    entry = lines["DTQ_API_KEYS entry (for the server)"].strip()
    assert secret not in entry
    (key,) = parse_api_keys(entry)
    assert (key.name, key.scopes) == ("ci-bot", frozenset({Scope.READ, Scope.SUBMIT}))
    assert authenticate((key,), secret) == key

    bad = await dtq(nobody, "keys", "new", "ci-bot", "nope")
    assert (bad.code, bad.out) == (2, "")
    assert (
        bad.err
        == "dtq: SCOPES 'nope' is invalid: it must be submit, read or admin, joined with +\n"
    )


async def test_queue_configure_and_show(client: Client, redis_url: str) -> None:
    await client.enqueue("t.a", queue="hot")
    run = await dtq(redis_url, "queue", "configure", "hot", "--partitions", "3")
    assert (run.code, run.out.strip()) == (
        0,
        "queue hot: 3 partitions, max_depth DTQ_MAX_QUEUE_DEPTH, rate no limit, "
        "concurrency no limit, group_concurrency no limit, group_rate no limit",
    )
    run = await dtq(
        redis_url, "queue", "configure", "hot", "--rate", "100/s", "--concurrency", "5",
        "--group-concurrency", "2", "--group-rate", "10/s",
    )  # fmt: skip
    assert run.code == 0
    assert run.out.strip().endswith(
        "rate 100/s, concurrency 5, group_concurrency 2, group_rate 10/s"
    )
    run = await dtq(redis_url, "queue", "configure", "hot", "--group-rate", "10/x")
    assert run.code == 1
    assert "group_rate must look like 100/s" in run.err
    run = await dtq(redis_url, "queue", "configure", "hot", "--rate", "100/x")
    assert run.code == 1
    assert "rate must look like 100/s" in run.err
    run = await dtq(redis_url, "queue", "configure", "hot", "--rate", "none")
    assert run.code == 0
    assert "rate no limit" in run.out
    run = await dtq(redis_url, "queue", "show", "hot")
    assert run.code == 0
    shown = msgspec.json.decode(run.out)
    assert (shown["name"], shown["partitions"], shown["depth"]) == ("hot", 3, 1)
    assert (shown["rate"], shown["concurrency"]) == (None, 5)
    assert (shown["group_concurrency"], shown["group_rate"]) == (2, "10/s")
    run = await dtq(redis_url, "queue", "configure", "hot", "--partitions", "2")
    assert run.code == 1
    assert "partitions may only grow: queue 'hot' has 3" in run.err
    run = await dtq(redis_url, "queue", "configure", "hot")
    assert run.code == 2
    assert "nothing to change" in run.err


async def test_enqueue_with_a_dedup_mode(client: Client, redis_url: str) -> None:
    assert (await dtq(redis_url, "queue", "create", "dd")).code == 0
    args = ["enqueue", "t.a", "--queue", "dd", "--dedup", "until_finished", "--dedup-key", "r7"]
    first = await dtq(redis_url, *args, DTQ_REJECT_UNKNOWN_TASKS="false")
    assert first.code == 0
    again = await dtq(redis_url, *args, DTQ_REJECT_UNKNOWN_TASKS="false")
    assert (again.code, again.out) == (0, first.out)
    assert f"deduplicated: {first.out.strip()} is the key's task" in again.err
    bad = await dtq(
        redis_url, "enqueue", "t.a", "--dedup", "debounce", "--dedup-key", "k",
        DTQ_REJECT_UNKNOWN_TASKS="false",
    )  # fmt: skip
    assert bad.code == 1
    assert "dedup=debounce needs debounce_s" in bad.err


async def test_group_list_show_pause_resume_and_weight(client: Client, redis_url: str) -> None:
    for group in ("acme", "globex"):
        await client.enqueue("t.a", queue="exports", group=group)
        await client.enqueue("t.a", queue="exports", group=group)
    run = await dtq(redis_url, "group", "pause", "exports", "acme")
    assert run.code == 0, run.err
    assert "group acme of queue exports paused" in run.out
    run = await dtq(redis_url, "group", "weight", "exports", "globex", "3")
    assert (run.code, run.out.strip()) == (0, "group globex of queue exports: weight 3")
    run = await dtq(redis_url, "group", "list", "exports")
    assert run.code == 0
    lines = run.out.split()
    assert lines[:6] == ["GROUP", "WAITING", "QUEUED", "RUNNING", "WEIGHT", "PAUSED"]
    assert lines[6:12] == ["acme", "1", "1", "0", "1", "paused"]
    assert lines[12:18] == ["globex", "0", "2", "0", "3", "-"]
    run = await dtq(redis_url, "group", "list", "exports", "--limit", "1")
    assert "more: dtq group list exports --cursor acme" in run.out
    run = await dtq(redis_url, "group", "show", "exports", "acme")
    assert msgspec.json.decode(run.out)["paused"] is True
    run = await dtq(redis_url, "group", "resume", "exports", "acme")
    assert run.code == 0
    assert (
        msgspec.json.decode((await dtq(redis_url, "group", "show", "exports", "acme")).out)[
            "paused"
        ]
        is False
    )
    run = await dtq(redis_url, "group", "weight", "exports", "globex", "0")
    assert run.code == 1
    assert "weight must be an integer from 1 to 100" in run.err
    run = await dtq(redis_url, "group", "pause", "nope", "acme")
    assert run.code == 1
    run = await dtq(redis_url, "enqueue", "t.a", "--queue", "exports", "--group", "a/b")
    assert run.code == 1
    assert "group must be a string" in run.err


async def test_workflow_submit_show_list_and_cancel(
    client: Client, redis_url: str, tmp_path: Path
) -> None:
    assert (await dtq(redis_url, "queue", "create", "default")).code == 0
    definition = tmp_path / "etl.json"
    definition.write_text(
        '{"name": "etl", "workflow": {"chain": [{"task": "etl.extract", "args": [1]}, '
        '{"task": "etl.load"}]}}'
    )
    run = await dtq(redis_url, "workflow", "submit", str(definition))
    assert run.code == 0, run.err
    workflow_id = run.out.strip()
    record = await client.workflows.get(workflow_id)
    assert record is not None
    assert (record.name, [s.task for s in record.steps]) == ("etl", ["etl.extract", "etl.load"])

    shown = await dtq(redis_url, "workflow", "show", workflow_id)
    assert shown.code == 0, shown.err
    assert "status running  steps 0/2 ended" in shown.out
    assert "etl.load" in shown.out
    assert "pending" in shown.out
    as_json = msgspec.json.decode(
        (await dtq(redis_url, "workflow", "show", workflow_id, "--json")).out
    )
    assert [s["status"] for s in as_json["steps"]] == ["queued", "pending"]
    listed = await dtq(redis_url, "workflow", "list", "--status", "running")
    assert workflow_id in listed.out

    cancelled = await dtq(redis_url, "workflow", "cancel", workflow_id)
    assert (cancelled.code, cancelled.out.strip()) == (0, f"workflow {workflow_id} cancelled")
    again = await dtq(redis_url, "workflow", "cancel", workflow_id)
    assert again.code == 1
    assert "already ended (cancelled)" in again.err
    missing = await dtq(redis_url, "workflow", "show", "0" * 32)
    assert (missing.code, "not found" in missing.err) == (1, True)


async def test_workflow_submit_refuses_a_bad_file_in_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"workflow": {"chain": [{"task": "a"}, {"taks": "b"}]}}')
    run = await dtq(redis_url, "workflow", "submit", str(bad))
    assert run.code == 1
    assert "workflow.chain[1]" in run.err
    assert len(run.err.strip().splitlines()) == 1
    assert (await dtq(redis_url, "workflow", "submit", str(tmp_path / "none.json"))).code == 1


async def test_batch_create_add_seal_show_and_cancel(
    client: Client, redis_url: str, tmp_path: Path
) -> None:
    assert (await dtq(redis_url, "queue", "create", "default")).code == 0
    spec = tmp_path / "batch.json"
    spec.write_text('{"name": "exports", "on_complete": {"task": "report", "pass_result": false}}')
    created = await dtq(redis_url, "batch", "create", str(spec))
    assert created.code == 0, created.err
    batch_id = created.out.strip()
    tasks = tmp_path / "tasks.json"
    tasks.write_text('[{"task": "export", "args": [1]}, {"task": "export", "args": [2]}]')
    added = await dtq(redis_url, "batch", "add", batch_id, str(tasks))
    assert added.code == 0, added.err
    ids = added.out.split()
    assert len(ids) == 2
    records = [await client.get(i) for i in ids]
    assert [r.task if r is not None else None for r in records] == ["export"] * 2
    shown = await dtq(redis_url, "batch", "show", batch_id)
    assert shown.code == 0, shown.err
    assert "status running  open" in shown.out
    assert "tasks 2: 2 pending, 0 succeeded, 0 failed" in shown.out
    as_json = msgspec.json.decode((await dtq(redis_url, "batch", "show", batch_id, "--json")).out)
    assert (as_json["name"], as_json["on_complete"]) == ("exports", "pending")

    await finish(client, "default", await claim(client, "default"), "ok")
    sealed = await dtq(redis_url, "batch", "seal", batch_id)
    assert sealed.code == 0, sealed.err
    assert "sealed" in sealed.out
    again = await dtq(redis_url, "batch", "add", batch_id, str(tasks))
    assert again.code == 1
    assert "sealed" in again.err

    other = (await dtq(redis_url, "batch", "create")).out.strip()
    cancelled = await dtq(redis_url, "batch", "cancel", other)
    assert (cancelled.code, cancelled.out.strip()) == (0, f"batch {other} cancelled")
    missing = await dtq(redis_url, "batch", "show", "0" * 32)
    assert (missing.code, "not found" in missing.err) == (1, True)
    bad = tmp_path / "bad.json"
    bad.write_text('[{"group": [{"task": "a"}, {"task": "b"}]}]')
    refused = await dtq(redis_url, "batch", "add", batch_id, str(bad))
    assert refused.code == 1
    assert "single steps" in refused.err
