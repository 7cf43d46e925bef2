"""Task routes through a real socket: submit, batch, look-up, list, long-poll, cancel, retry."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from dtq_core.client import Client
from dtq_devtools.testing import announce_worker, wait_until
from dtq_devtools.testing.servers import clients

TASKS = "/api/v1/tasks"
UNKNOWN_ID = "q:" + "0" * 32


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """Assert an RFC 9457 problem with ``status`` and ``code``; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"] == f"urn:dtq:problem:{code}"
    assert body["title"]
    assert body["detail"]
    assert body["request_id"] == response.headers["x-request-id"]
    return body


async def stream_entries(sdk: Client, queue: str) -> int:
    qk = sdk.queue_keys(queue)
    return sum([int(await sdk.redis.xlen(s)) for s in qk.streams])


async def blocked_reads(sdk: Client) -> int:
    """Clients of the test Redis blocked in XREAD (the long-poll's wait on the event stream)."""
    return sum(1 for c in await clients(sdk.redis) if c.get("cmd") == "xread" and "b" in c["flags"])


async def test_submit_answers_201_with_location_and_the_task_reads_back(
    api: Any, sdk: Client
) -> None:
    r = await api.http.post(
        TASKS,
        json={
            "task": "emails.send",
            "queue": "emails",
            "args": ["a@b.c"],
            "kwargs": {"subject": "hi"},
            "priority": 7,
            "max_attempts": 3,
            "timeout_s": 5,
            "ttl_s": 600,
            "metadata": {"team": "growth"},
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body == {"id": body["id"], "status": "queued", "queue": "emails", "created": True}
    assert r.headers["location"] == f"{TASKS}/{body['id']}"

    got = await api.http.get(r.headers["location"])
    assert got.status_code == 200
    task = got.json()
    for key, value in {
        "id": body["id"],
        "task": "emails.send",
        "queue": "emails",
        "status": "queued",
        "priority": 7,
        "attempts": 0,
        "max_attempts": 3,
        "timeout_s": 5.0,
        "args": ["a@b.c"],
        "kwargs": {"subject": "hi"},
        "metadata": {"team": "growth"},
        "result": None,
        "result_truncated": False,
        "errors": [],
        "progress": None,
        "started_at": None,
        "finished_at": None,
    }.items():
        assert task[key] == value, key
    assert task["created_at"].endswith("Z")
    assert task["expires_at"] is not None
    record = await sdk.get(body["id"])
    assert record is not None
    assert record.priority == 7


async def test_delay_and_eta_schedule_the_task(api: Any, sdk: Client) -> None:
    delayed = await api.http.post(TASKS, json={"task": "t", "delay_s": 60})
    eta = (datetime.now(UTC) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    at_eta = await api.http.post(TASKS, json={"task": "t", "eta": eta})
    assert [delayed.status_code, at_eta.status_code] == [201, 201]
    assert delayed.json()["status"] == at_eta.json()["status"] == "scheduled"
    assert int(await sdk.redis.zcard(sdk.queue_keys("default").delayed)) == 2
    both = await api.http.post(TASKS, json={"task": "t", "delay_s": 1, "eta": eta})
    body = problem(both, 422, "validation_error")
    assert body["errors"][0]["field"] == "eta"


async def test_unknown_and_malformed_ids_are_404(api: Any) -> None:
    for task_id in [UNKNOWN_ID, "junk", "dtq:{q}:p5", "*", "q:" + "0" * 31, "a" * 300]:
        for method, suffix in [
            ("GET", ""),
            ("GET", "/result"),
            ("POST", "/cancel"),
            ("POST", "/retry"),
        ]:
            r = await api.http.request(method, f"{TASKS}/{task_id}{suffix}")
            body = problem(r, 404, "task_not_found")
            assert len(body["detail"]) < 200


async def test_idempotent_replay_returns_the_original_and_a_different_request_conflicts(
    api: Any, sdk: Client
) -> None:
    request = {"task": "t", "queue": "q", "args": [1], "idempotency_key": "order-42"}
    first = await api.http.post(TASKS, json=request)
    again = await api.http.post(TASKS, json=request)
    as_header = await api.http.post(
        TASKS,
        json={"task": "t", "queue": "q", "args": [1]},
        headers={"Idempotency-Key": "order-42"},
    )
    assert (first.status_code, again.status_code, as_header.status_code) == (201, 200, 200)
    assert first.json()["id"] == again.json()["id"] == as_header.json()["id"]
    assert again.json()["created"] is False
    assert again.headers["location"] == first.headers["location"]

    conflict = await api.http.post(TASKS, json={**request, "args": [2]})
    body = problem(conflict, 409, "idempotency_conflict")
    assert body["task_id"] == first.json()["id"]
    mismatch = await api.http.post(TASKS, json=request, headers={"Idempotency-Key": "other"})
    assert problem(mismatch, 422, "validation_error")["errors"][0]["field"] == "idempotency_key"
    assert await stream_entries(sdk, "q") == 1


async def test_twenty_concurrent_identical_submits_make_one_task(api: Any, sdk: Client) -> None:
    request = {"task": "t", "queue": "q", "idempotency_key": "burst"}
    replies = await asyncio.gather(*(api.http.post(TASKS, json=request) for _ in range(20)))
    assert Counter(r.status_code for r in replies) == {201: 1, 200: 19}
    assert len({r.json()["id"] for r in replies}) == 1
    assert await stream_entries(sdk, "q") == 1
    assert (
        len([k async for k in sdk.redis.scan_iter(match=sdk.queue_keys("q").task_prefix + "*")])
        == 1
    )


async def test_full_queue_answers_429_with_retry_after_counting_delayed_tasks(
    api_factory: Any, sdk: Client, worker: Any
) -> None:
    api = api_factory(max_queue_depth=3)
    for delay in (3600, 3600, 0):
        assert (
            await api.http.post(TASKS, json={"task": "t", "queue": "q", "delay_s": delay})
        ).status_code == 201
    keys_before = await sdk.redis.dbsize()
    full = await api.http.post(TASKS, json={"task": "t", "queue": "q"})
    body = problem(full, 429, "queue_full")
    assert full.headers["retry-after"] == "5"
    assert body["retry_after_s"] == 5
    assert body["limit"] == 3
    assert "DTQ_MAX_QUEUE_DEPTH=3" in body["detail"]
    assert await sdk.redis.dbsize() == keys_before
    # It recovers as a worker takes the queued task.
    assert len(await worker.claim("q")) == 1
    assert (await api.http.post(TASKS, json={"task": "t", "queue": "q"})).status_code == 201


async def test_unknown_task_is_422_once_workers_registered_their_tasks(
    api: Any, sdk: Client
) -> None:
    await announce_worker(sdk.redis, "w1", ["default"], {"known.task": "default"})
    refused = await api.http.post(TASKS, json={"task": "other.task"})
    body = problem(refused, 422, "unknown_task")
    assert "known.task" in body["detail"]
    assert (await api.http.post(TASKS, json={"task": "known.task"})).status_code == 201


async def test_batch_answers_per_item_and_writes_only_valid_items(api: Any, sdk: Client) -> None:
    items: list[dict[str, Any]] = [
        {"task": "t", "queue": "q"},
        {"task": "{bad}", "queue": "q"},
        {"task": "t", "queue": "q", "priority": 11},
        {"task": "t", "queue": "q", "status": "succeeded"},
        {"task": "t", "queue": "q", "idempotency_key": "k"},
        {"task": "t", "queue": "q", "idempotency_key": "k"},
        {"task": "t", "queue": "other", "args": ["x" * 300_000]},
        {"task": "t", "queue": "other", "delay_s": 30},
    ]
    r = await api.http.post(f"{TASKS}/batch", json={"tasks": items})
    assert r.status_code == 200, r.text
    body = r.json()
    statuses = [item["status"] for item in body["results"]]
    assert statuses == [201, 422, 422, 422, 201, 200, 413, 201]
    assert [item["index"] for item in body["results"]] == list(range(8))
    assert (body["created"], body["replayed"], body["refused"]) == (3, 1, 4)
    errors = [item.get("error") for item in body["results"]]
    assert errors[1]["code"] == "invalid_name"
    assert errors[1]["errors"][0]["pointer"] == "/tasks/1/task"
    assert errors[2]["code"] == "validation_error"
    assert errors[2]["errors"][0]["pointer"] == "/tasks/2/priority"
    assert errors[3]["code"] == "unknown_field"
    assert errors[3]["errors"][0]["pointer"] == "/tasks/3/status"
    assert errors[6]["code"] == "payload_too_large"
    assert body["results"][5]["task"]["id"] == body["results"][4]["task"]["id"]
    assert body["results"][7]["task"]["status"] == "scheduled"
    # Exactly the three created tasks exist.
    created = {item["task"]["id"] for item in body["results"] if item["status"] in {200, 201}}
    records = [k async for k in sdk.redis.scan_iter(match="dtq:{*}:t:*")]
    assert len(records) == len(created) == 3
    assert await stream_entries(sdk, "q") == 2
    assert await stream_entries(sdk, "other") == 0


async def test_batch_limits(api_factory: Any, sdk: Client) -> None:
    api = api_factory(max_payload_bytes=1024)
    too_many = await api.http.post(f"{TASKS}/batch", json={"tasks": [{"task": "t"}] * 1001})
    body = problem(too_many, 422, "validation_error")
    assert body["errors"][0]["pointer"] == "/tasks"
    empty = await api.http.post(f"{TASKS}/batch", json={"tasks": []})
    problem(empty, 422, "validation_error")
    # 4 payloads of 1 KiB plus 1 KiB per possible item: about 1 MB.
    huge = await api.http.post(
        f"{TASKS}/batch", json={"tasks": [{"task": "t", "args": ["x" * 2000]}] * 600}
    )
    body = problem(huge, 413, "payload_too_large")
    assert body["limit"] == 4 * 1024 + 1000 * 1024
    assert await sdk.redis.dbsize() == 0


async def test_list_tasks_newest_first_with_filters_and_cursor(
    api: Any, worker: Any, sdk: Client
) -> None:
    ids = []
    for i in range(5):
        r = await api.http.post(
            TASKS, json={"task": "t.even" if i % 2 == 0 else "t.odd", "queue": "q"}
        )
        ids.append(r.json()["id"])
    await worker.claim("q", 1)  # the oldest starts running
    first = await api.http.get(TASKS, params={"limit": 2})
    assert first.status_code == 200
    page = first.json()
    assert [t["id"] for t in page["items"]] == ids[::-1][:2]
    seen = [t["id"] for t in page["items"]]
    while page["next_cursor"]:
        nxt = await api.http.get(TASKS, params={"limit": 2, "cursor": page["next_cursor"]})
        page = nxt.json()
        seen += [t["id"] for t in page["items"]]
    assert seen == ids[::-1]

    running = (await api.http.get(TASKS, params={"status": "running"})).json()["items"]
    assert [t["id"] for t in running] == [ids[0]]
    odd = (await api.http.get(TASKS, params={"task": "t.odd", "queue": "q"})).json()["items"]
    assert [t["id"] for t in odd] == [ids[3], ids[1]]
    assert (await api.http.get(TASKS, params={"queue": "empty"})).json()["items"] == []

    problem(
        await api.http.get(TASKS, params={"cursor": "0-0 COUNT 1000000"}), 422, "validation_error"
    )
    problem(await api.http.get(TASKS, params={"status": "done"}), 422, "validation_error")
    problem(await api.http.get(TASKS, params={"limit": 0}), 422, "validation_error")
    problem(await api.http.get(TASKS, params={"queue": "a:b"}), 422, "invalid_name")
    assert await stream_entries(sdk, "q") == 5


async def test_long_poll_answers_as_soon_as_the_task_finishes(
    api: Any, worker: Any, sdk: Client
) -> None:
    task_id = (await api.http.post(TASKS, json={"task": "t", "queue": "q"})).json()["id"]
    (claimed,) = await worker.claim("q")
    baseline = await blocked_reads(sdk)
    started = time.monotonic()
    poll = asyncio.create_task(api.http.get(f"{TASKS}/{task_id}/result", params={"wait": 30}))
    await wait_until(lambda: _more(sdk, baseline), message="the long-poll blocks on the events")
    assert not poll.done()
    finished_at = time.monotonic()
    assert await worker.finish("q", [claimed], "ok", '{"sent": 3}') == ["succeeded"]
    r = await poll
    answered_after = time.monotonic() - finished_at
    assert r.status_code == 200, r.text
    assert r.json() == {
        "id": task_id,
        "status": "succeeded",
        "attempts": 1,
        "result": {"sent": 3},
        "result_truncated": False,
        "error": None,
    }
    print(f"long-poll answered {answered_after:.3f} s after the finish")
    # Woken by the finish's event, not by its 30 s wait: a generous bound.
    assert answered_after < 10, f"answered {answered_after:.3f} s after the finish"
    assert finished_at - started < 10


async def _more(sdk: Client, baseline: int) -> bool:
    return await blocked_reads(sdk) > baseline


async def test_result_without_outcome_is_202_and_dead_tasks_report_their_error(
    api: Any, worker: Any
) -> None:
    task_id = (await api.http.post(TASKS, json={"task": "t", "queue": "q"})).json()["id"]
    now = await api.http.get(f"{TASKS}/{task_id}/result")
    assert now.status_code == 202
    assert now.json() == {"id": task_id, "status": "queued", "attempts": 0, "progress": None}
    started = time.monotonic()
    later = await api.http.get(f"{TASKS}/{task_id}/result", params={"wait": 0.3})
    assert later.status_code == 202
    assert time.monotonic() - started >= 0.3
    await worker.kill("q")
    dead = await api.http.get(f"{TASKS}/{task_id}/result", params={"wait": 5})
    assert dead.status_code == 200
    assert dead.json()["status"] == "dead"
    assert dead.json()["error"]["message"] == "boom"
    for wait in (-1, 61, "soon"):
        r = await api.http.get(f"{TASKS}/{task_id}/result", params={"wait": wait})
        assert problem(r, 422, "validation_error")["errors"][0]["field"] == "wait"


async def test_cancel_and_retry_follow_the_lifecycle_and_are_audited(
    api: Any, worker: Any, sdk: Client
) -> None:
    queued = (await api.http.post(TASKS, json={"task": "t", "queue": "q"})).json()["id"]
    cancel = await api.http.post(f"{TASKS}/{queued}/cancel")
    assert cancel.status_code == 200
    assert cancel.json() == {"id": queued, "status": "cancelled"}
    again = await api.http.post(f"{TASKS}/{queued}/cancel")
    assert problem(again, 409, "invalid_state")["task_id"] == queued

    running = (await api.http.post(TASKS, json={"task": "t", "queue": "q"})).json()["id"]
    await worker.claim("q")
    requested = await api.http.post(f"{TASKS}/{running}/cancel")
    assert requested.json() == {"id": running, "status": "running"}

    dead = (await api.http.post(TASKS, json={"task": "t", "queue": "dq"})).json()["id"]
    problem(await api.http.post(f"{TASKS}/{dead}/retry"), 409, "invalid_state")
    assert await worker.kill("dq") == [dead]
    retried = await api.http.post(f"{TASKS}/{dead}/retry")
    assert retried.status_code == 200
    assert retried.json() == {"id": dead, "status": "queued"}

    entries = [f for _, f in await sdk.redis.xrange(sdk.keys.audit)]
    assert [(e["action"], e["actor"], e["detail"]) for e in entries] == [
        ("task.cancel", "operator", f"ids={queued}"),
        ("task.cancel", "operator", f"ids={running}"),
        ("task.retry", "operator", f"ids={dead}"),
    ]
    assert entries[-1]["request_id"] == retried.headers["x-request-id"]
    assert entries[-1]["queue"] == "dq"


async def test_rest_routes_each_submit_to_the_tasks_registered_queue(api: Any, sdk: Client) -> None:
    """docs/api.md's batch example: `emails.send` without a queue goes to `emails`, where its
    worker is, not to `default`, whose worker would fail it ten times into the DLQ."""
    await announce_worker(sdk.redis, "examples", ["default"], {"examples.add": "default"})
    await announce_worker(sdk.redis, "mailer", ["emails"], {"emails.send": "emails"})
    one = await api.http.post(TASKS, json={"task": "emails.send", "args": ["a@b.c"]})
    assert one.status_code == 201, one.text
    assert one.json()["queue"] == "emails"
    refused = await api.http.post(TASKS, json={"task": "emails.send", "queue": "default"})
    body = problem(refused, 422, "unknown_task")
    assert body["queues"] == ["emails"]
    assert body["queue"] == "default"
    assert "no live worker of queue 'default' handles task 'emails.send'" in body["detail"]
    batch = await api.http.post(
        f"{TASKS}/batch",
        json={
            "tasks": [
                {"task": "emails.send", "args": ["a@b.c"]},
                {"task": "emails.send", "queue": "default"},
                {"task": "examples.add", "args": [1, 2]},
            ]
        },
    )
    results = batch.json()["results"]
    assert [r["status"] for r in results] == [201, 422, 201]
    assert results[0]["task"]["queue"] == "emails"
    assert results[1]["error"]["code"] == "unknown_task"
    assert results[1]["error"]["queues"] == ["emails"]
    assert results[2]["task"]["queue"] == "default"
    assert await stream_entries(sdk, "default") == 1
    assert await stream_entries(sdk, "emails") == 2


async def test_rest_refuses_queues_nobody_created_until_an_admin_creates_one(
    api_factory: Any, sdk: Client, keys: Any
) -> None:
    api = api_factory(reject_unknown_queues=True)
    submit = api.client(keys.header("submit"))
    refused = await submit.post(TASKS, json={"task": "t", "queue": "reports"})
    body = problem(refused, 422, "unknown_queue")
    assert body["queue"] == "reports"
    assert "POST /api/v1/queues" in body["detail"]
    # Creating a queue is an admin action.
    assert (await submit.post("/api/v1/queues", json={"name": "reports"})).status_code == 403
    created = await api.http.post("/api/v1/queues", json={"name": "reports"})
    assert (created.status_code, created.json()) == (201, {"queue": "reports", "created": True})
    again = await api.http.post("/api/v1/queues", json={"name": "reports"})
    assert (again.status_code, again.json()) == (200, {"queue": "reports", "created": False})
    problem(await api.http.post("/api/v1/queues", json={"name": "a b"}), 422, "invalid_name")
    assert (await submit.post(TASKS, json={"task": "t", "queue": "reports"})).status_code == 201
    assert (await api.http.get("/api/v1/queues/reports")).json()["depth"] == 1


async def test_rest_deletes_only_empty_queues(api: Any, sdk: Client) -> None:
    assert (await api.http.post("/api/v1/queues", json={"name": "tmp"})).status_code == 201
    submitted = await api.http.post(TASKS, json={"task": "t", "queue": "tmp"})
    assert submitted.status_code == 201
    busy = problem(await api.http.delete("/api/v1/queues/tmp"), 409, "queue_not_empty")
    assert "waiting" in busy["detail"]
    assert (await api.http.delete("/api/v1/queues/tmp/tasks")).json()["count"] == 1
    deleted = await api.http.delete("/api/v1/queues/tmp")
    assert (deleted.status_code, deleted.json()) == (200, {"queue": "tmp", "deleted": True})
    problem(await api.http.get("/api/v1/queues/tmp"), 404, "queue_not_found")
    problem(await api.http.delete("/api/v1/queues/tmp"), 404, "queue_not_found")
    names = [q["name"] for q in (await api.http.get("/api/v1/queues")).json()["items"]]
    assert "tmp" not in names
    actions = [e[1]["action"] for e in await sdk.redis.xrange(sdk.keys.audit)]
    assert actions == ["queue.create", "queue.purge", "queue.delete"]


async def test_one_submit_key_cannot_create_unlimited_queues(
    api_factory: Any, sdk: Client, keys: Any
) -> None:
    """Issue 18.2: two batches of 1,000 tasks, each task in a new queue. With the defaults
    no queue is created; with the escape hatch the registry stops at DTQ_MAX_QUEUES."""

    async def abuse(api: Any, tag: str) -> tuple[Counter[int], int, int, int]:
        submit = api.client(keys.header("submit"))
        before = int((await sdk.redis.info("memory"))["used_memory"])
        statuses: Counter[int] = Counter()
        for batch in range(2):
            items = [{"task": "t", "queue": f"{tag}-{batch}-{i}"} for i in range(1000)]
            r = await submit.post(f"{TASKS}/batch", json={"tasks": items})
            assert r.status_code == 200, r.text
            statuses.update(item["status"] for item in r.json()["results"])
        after = int((await sdk.redis.info("memory"))["used_memory"])
        t0 = time.perf_counter()
        listed = len((await api.http.get("/api/v1/queues")).json()["items"])
        list_ms = (time.perf_counter() - t0) * 1000
        figure = {
            "test": "18.2 queue flood",
            "mode": tag,
            "statuses": dict(statuses),
            "queues": await sdk.redis.scard(sdk.keys.queues),
            "redis_used_memory_before": before,
            "redis_used_memory_after": after,
            "get_queues_items": listed,
            "get_queues_ms": round(list_ms, 1),
        }
        print(json.dumps(figure))
        return statuses, await sdk.redis.scard(sdk.keys.queues), before, after

    strict = api_factory(reject_unknown_queues=True)
    statuses, queues, _, _ = await abuse(strict, "strict")
    assert statuses == Counter({422: 2000})
    assert queues == 0
    assert [k async for k in sdk.redis.scan_iter(match="dtq:{strict-*")] == []

    lax = api_factory(reject_unknown_queues=False, max_queues=50)
    statuses, queues, _, _ = await abuse(lax, "lax")
    assert statuses == Counter({201: 50, 409: 1950})
    assert queues == 50


async def test_arguments_that_do_not_fit_the_published_signature_are_422(
    api: Any, sdk: Client
) -> None:
    schema = {
        "type": "object",
        "properties": {"to": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["to"],
        "additionalProperties": False,
        "x-positional": ["to", "count"],
        "x-variadic": False,
    }
    await announce_worker(
        sdk.redis, "w1", ["default"], {"mail.send": "default"}, schemas={"mail.send": schema}
    )
    refused = await api.http.post(TASKS, json={"task": "mail.send", "args": [1]})
    body = problem(refused, 422, "validation_error")
    assert "to: expected string, got integer" in body["detail"]
    assert body["errors"][0]["field"] == "args"
    ok = await api.http.post(
        TASKS, json={"task": "mail.send", "args": ["a@b.c"], "kwargs": {"count": 2}}
    )
    assert ok.status_code == 201, ok.text
    listed = (await api.http.get("/api/v1/task-types")).json()["task_types"]
    assert listed == [
        {"name": "mail.send", "queue": "default", "queues": ["default"], "args_schema": schema}
    ]
