"""Operator routes through a real socket: queues, the dead-letter queue, workers, schedules;
every change is in the audit stream with the key's name and the request id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter  # type: ignore[import-untyped]  # croniter ships no type hints

from dtq_core.client import Client
from dtq_core.infra.connection import server_ms
from dtq_core.ops.schedules import LastTick, ScheduleSpec, ScheduleStore
from dtq_devtools.testing import announce_worker

API = "/api/v1"


def check(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


async def audit(sdk: Client) -> list[dict[str, str]]:
    return [fields for _, fields in await sdk.redis.xrange(sdk.keys.audit)]


async def submit(api: Any, queue: str, n: int, **extra: Any) -> list[str]:
    r = await api.http.post(
        f"{API}/tasks/batch", json={"tasks": [{"task": "t", "queue": queue, **extra}] * n}
    )
    assert r.status_code == 200
    return [item["task"]["id"] for item in r.json()["results"]]


async def test_queue_stats_pause_resume_and_purge(api: Any, worker: Any, sdk: Client) -> None:
    await submit(api, "emails", 3, priority=9)
    await submit(api, "emails", 1, delay_s=600)
    await submit(api, "other", 1)
    await worker.claim("emails", 1)

    listed = await api.http.get(f"{API}/queues")
    assert listed.status_code == 200
    assert [q["name"] for q in listed.json()["items"]] == ["emails", "other"]
    stats = (await api.http.get(f"{API}/queues/emails")).json()
    assert (stats["depth"], stats["delayed"], stats["in_flight"], stats["dead"]) == (2, 1, 1, 0)
    assert stats["depth_by_priority"]["9"] == 2
    assert stats["paused"] is False

    paused = await api.http.post(f"{API}/queues/emails/pause")
    assert paused.json() == {"queue": "emails", "paused": True}
    assert (await api.http.get(f"{API}/queues/emails")).json()["paused"] is True
    resumed = await api.http.post(f"{API}/queues/emails/resume")
    assert resumed.json() == {"queue": "emails", "paused": False}

    purged = await api.http.delete(f"{API}/queues/emails/tasks")
    assert purged.status_code == 200
    assert purged.json() == {"queue": "emails", "count": 3}  # 2 queued + 1 delayed
    after = (await api.http.get(f"{API}/queues/emails")).json()
    assert (after["depth"], after["delayed"], after["in_flight"]) == (0, 0, 1)

    entries = await audit(sdk)
    assert [(e["action"], e["queue"], e["actor"], e["count"]) for e in entries] == [
        ("queue.pause", "emails", "operator", "0"),
        ("queue.resume", "emails", "operator", "0"),
        ("queue.purge", "emails", "operator", "3"),
    ]
    assert entries[0]["request_id"] == paused.headers["x-request-id"]
    assert entries[2]["request_id"] == purged.headers["x-request-id"]


async def test_unknown_and_invalid_queues(api: Any) -> None:
    for method, path in [
        ("GET", "/queues/nope"),
        ("POST", "/queues/nope/pause"),
        ("POST", "/queues/nope/resume"),
        ("DELETE", "/queues/nope/tasks"),
        ("GET", "/queues/nope/dlq"),
        ("DELETE", "/queues/nope/dlq"),
    ]:
        check(await api.http.request(method, API + path), 404, "queue_not_found")
    check(await api.http.get(f"{API}/queues/a:b"), 422, "invalid_name")
    check(await api.http.get(f"{API}/queues/{'q' * 65}"), 422, "invalid_name")


async def test_times_in_a_dead_task_are_all_rfc3339(api: Any, worker: Any) -> None:
    """Error history, DLQ entries and the record's own times share one format."""
    await submit(api, "q", 1)
    (task_id,) = await worker.kill("q")
    task = (await api.http.get(f"{API}/tasks/{task_id}")).json()
    (listed,) = (await api.http.get(f"{API}/queues/q/dlq")).json()["items"]
    # The DLQ page is a summary: its last error carries the same time as the record's history.
    for record, error in ((task, task["errors"][0]), (listed, listed["last_error"])):
        assert error["ts"] == "2025-03-01T12:00:00.123456Z"
        for value in (record["created_at"], record["started_at"], record["finished_at"]):
            assert value.endswith("Z")
            assert datetime.fromisoformat(value).tzinfo is not None


async def test_dlq_browse_requeue_discard_purge(api: Any, worker: Any, sdk: Client) -> None:
    await submit(api, "q", 4)
    await submit(api, "q", 2, task="t")
    dead = await worker.kill("q")
    assert len(dead) == 6

    page = await api.http.get(f"{API}/queues/q/dlq", params={"limit": 4})
    assert page.status_code == 200
    body = page.json()
    assert len(body["items"]) == 4
    assert all(t["status"] == "dead" for t in body["items"])
    rest = (
        await api.http.get(f"{API}/queues/q/dlq", params={"cursor": body["next_cursor"]})
    ).json()
    assert len(rest["items"]) == 2
    assert rest["next_cursor"] is None
    listed = {t["id"] for t in body["items"] + rest["items"]}
    assert listed == set(dead)

    one = await api.http.post(f"{API}/queues/q/dlq/requeue", json={"ids": [dead[0]]})
    assert one.json() == {"queue": "q", "count": 1}
    again = await api.http.post(f"{API}/queues/q/dlq/requeue", json={"ids": [dead[0]]})
    assert check(again, 409, "invalid_state")["task_id"] == dead[0]
    by_task = await api.http.post(f"{API}/queues/q/dlq/requeue", json={"task": "t"})
    assert by_task.json()["count"] == 5  # every remaining dead task is named t

    redead = await worker.kill("q")
    discard = await api.http.delete(f"{API}/queues/q/dlq/{redead[0]}")
    assert discard.json() == {"queue": "q", "count": 1}
    assert (await api.http.get(f"{API}/tasks/{redead[0]}")).status_code == 404
    check(await api.http.delete(f"{API}/queues/q/dlq/{redead[0]}"), 404, "task_not_found")
    check(await api.http.delete(f"{API}/queues/q/dlq/junk"), 422, "validation_error")
    all_back = await api.http.post(f"{API}/queues/q/dlq/requeue", json={"all": True})
    assert all_back.json()["count"] == 5
    await worker.kill("q")
    purge = await api.http.delete(f"{API}/queues/q/dlq")
    assert purge.json() == {"queue": "q", "count": 5}
    assert (await api.http.get(f"{API}/queues/q/dlq")).json()["items"] == []

    for bad in ({}, {"all": True, "task": "t"}, {"ids": []}, {"all": False}):
        check(await api.http.post(f"{API}/queues/q/dlq/requeue", json=bad), 422, "validation_error")
    check(
        await api.http.post(f"{API}/queues/q/dlq/requeue", json={"id": "x"}), 422, "unknown_field"
    )

    actions = [(e["action"], e["actor"], e["count"]) for e in await audit(sdk)]
    assert actions == [
        ("dlq.requeue", "operator", "1"),
        ("dlq.requeue", "operator", "5"),
        ("dlq.discard", "operator", "1"),
        ("dlq.requeue", "operator", "5"),
        ("dlq.purge", "operator", "5"),
    ]


async def test_workers_come_from_the_registry(api: Any, sdk: Client) -> None:
    assert (await api.http.get(f"{API}/workers")).json() == {"items": []}
    now_ms = await server_ms(sdk.redis)
    # What a worker's heartbeat writes (the registry is the worker's contract with the API).
    await sdk.redis.zadd(sdk.keys.workers, {"w1": now_ms})
    await sdk.redis.hset(
        sdk.keys.worker("w1"),
        mapping={"id": "w1", "host": "box", "pid": "7", "queues": "q,emails", "concurrency": "8",
                 "inflight": "2", "processed": "10", "failed": "1", "state": "running"},
    )  # fmt: skip
    (w,) = (await api.http.get(f"{API}/workers")).json()["items"]
    assert (w["id"], w["host"], w["pid"], w["queues"]) == ("w1", "box", 7, ["q", "emails"])
    assert (w["concurrency"], w["in_flight"], w["processed"], w["state"]) == (8, 2, 10, "running")
    assert w["last_heartbeat"].endswith("Z")


async def test_schedules_crud_pause_resume(api: Any, sdk: Client) -> None:
    assert (await api.http.get(f"{API}/schedules")).json() == {"items": []}
    spec = {"task": "reports.daily", "queue": "reports", "cron": "0 6 * * *", "args": [1]}
    created = await api.http.put(f"{API}/schedules/daily", json=spec)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "daily"
    assert created.json()["cron"] == "0 6 * * *"
    replaced = await api.http.put(
        f"{API}/schedules/daily", json={"task": "reports.daily", "every_s": 60, "name": "daily"}
    )
    assert replaced.status_code == 200
    got = await api.http.get(f"{API}/schedules/daily")
    assert got.json()["every_s"] == 60
    assert "cron" not in got.json()
    assert [s["name"] for s in (await api.http.get(f"{API}/schedules")).json()["items"]] == [
        "daily"
    ]

    paused = await api.http.post(f"{API}/schedules/daily/pause")
    assert paused.json()["paused"] is True
    resumed = await api.http.post(f"{API}/schedules/daily/resume")
    assert resumed.json().get("paused", False) is False
    deleted = await api.http.delete(f"{API}/schedules/daily")
    assert deleted.json() == {"name": "daily", "deleted": True}

    for method, suffix in [("GET", ""), ("DELETE", ""), ("POST", "/pause"), ("POST", "/resume")]:
        check(
            await api.http.request(method, f"{API}/schedules/daily{suffix}"),
            404,
            "schedule_not_found",
        )
    for bad in (
        {"task": "t", "cron": "61 * * * *"},
        {"task": "t"},
        {"task": "t", "cron": "@hourly", "every_s": 5},
        {"task": "t", "every_s": 0.5},
        {"task": "t", "every_s": 5, "timezone": "Europe/Paris"},
        {"task": "t", "every_s": 5, "name": "other"},
    ):
        r = await api.http.put(f"{API}/schedules/s", json=bad)
        check(r, 422, "validation_error")
    check(
        await api.http.put(f"{API}/schedules/a:b", json={"task": "t", "every_s": 5}),
        422,
        "invalid_name",
    )
    check(
        await api.http.put(f"{API}/schedules/s", json={"task": "t", "every_s": 5, "x": 1}),
        422,
        "unknown_field",
    )

    entries = await audit(sdk)
    assert [(e["action"], e["actor"]) for e in entries] == [
        ("schedule.put", "operator"),
        ("schedule.put", "operator"),
        ("schedule.pause", "operator"),
        ("schedule.resume", "operator"),
        ("schedule.delete", "operator"),
    ]
    # What was scheduled (task, timing, arguments), and the queue of the deleted one.
    first = entries[0]
    assert first["queue"] == "reports"
    assert first["detail"].startswith("schedule=daily task=reports.daily cron 0 6 * * * ")
    assert first["detail"].endswith("args=[[1],{}]")
    assert "args_sha256=" in first["detail"]
    assert entries[-1]["queue"] == "default"  # the deleted schedule's, not ""
    assert entries[-1]["detail"].startswith("schedule=daily task=reports.daily every 60s")
    assert entries[-1]["request_id"] == deleted.headers["x-request-id"]


async def test_a_schedule_no_worker_can_run_is_refused_unless_allowed(
    api: Any, sdk: Client
) -> None:
    """Issue 16.4: a schedule whose every tick would be refused is refused at PUT, by the
    rules of a submit; without a queue it gets the task's registered queue."""
    await announce_worker(sdk.redis, "reporter", ["reports"], {"reports.build": "reports"})
    typo = await api.http.put(
        f"{API}/schedules/nightly", json={"task": "reports.buidl", "every_s": 60}
    )
    body = check(typo, 422, "unknown_task")
    assert "reports.buidl" in body["detail"]
    assert '"allow_unknown_task": true' in body["detail"]
    wrong = await api.http.put(
        f"{API}/schedules/nightly",
        json={"task": "reports.build", "queue": "default", "every_s": 60},
    )
    assert check(wrong, 422, "unknown_task")["queues"] == ["reports"]
    assert await sdk.redis.hlen(sdk.keys.schedules) == 0
    assert await audit(sdk) == []

    routed = await api.http.put(
        f"{API}/schedules/nightly", json={"task": "reports.build", "every_s": 60}
    )
    assert routed.status_code == 201, routed.text
    assert routed.json()["queue"] == "reports"
    allowed = await api.http.put(
        f"{API}/schedules/later",
        json={
            "task": "reports.next",
            "queue": "reports",
            "every_s": 60,
            "allow_unknown_task": True,
        },
    )
    assert allowed.status_code == 201, allowed.text
    assert "allow_unknown_task" not in allowed.json()


async def test_a_schedule_into_a_queue_nobody_created_is_refused(
    api_factory: Any, sdk: Client
) -> None:
    api = api_factory(reject_unknown_queues=True)
    r = await api.http.put(
        f"{API}/schedules/s", json={"task": "t", "queue": "nowhere", "every_s": 60}
    )
    check(r, 422, "unknown_queue")
    assert (await api.http.post(f"{API}/queues", json={"name": "nowhere"})).status_code == 201
    r = await api.http.put(
        f"{API}/schedules/s", json={"task": "t", "queue": "nowhere", "every_s": 60}
    )
    assert r.status_code == 201, r.text


async def test_a_schedule_shows_its_last_tick(api: Any, sdk: Client) -> None:
    store = ScheduleStore(sdk.redis, sdk.keys)
    await store.put(ScheduleSpec(name="typo", task="reports.buidl", queue="reports", every_s=60))
    assert "last_tick" not in (await api.http.get(f"{API}/schedules/typo")).json()
    tick = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    await store.record_tick(
        "typo",
        LastTick(
            tick=tick,
            at=tick + timedelta(milliseconds=40),
            outcome="refused",
            code="unknown_task",
            reason="no live worker has registered task 'reports.buidl'",
        ),
    )
    expected = {
        "tick": "2026-12-01T14:00:00Z",
        "at": "2026-12-01T14:00:00.040000Z",
        "outcome": "refused",
        "code": "unknown_task",
        "reason": "no live worker has registered task 'reports.buidl'",
    }
    assert (await api.http.get(f"{API}/schedules/typo")).json()["last_tick"] == expected
    (item,) = (await api.http.get(f"{API}/schedules")).json()["items"]
    assert item["last_tick"] == expected


async def test_a_schedule_shows_when_it_last_fired(api: Any, sdk: Client) -> None:
    store = ScheduleStore(sdk.redis, sdk.keys)
    await store.put(ScheduleSpec(name="good", task="reports.build", queue="reports", every_s=60))
    assert (await api.http.get(f"{API}/schedules/good")).json()["last_fired_at"] is None
    tick = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    await store.record_tick(
        "good", LastTick(tick=tick, at=tick, outcome="fired", task_id="reports:" + "ab" * 16)
    )
    assert (await api.http.get(f"{API}/schedules/good")).json()["last_fired_at"] == (
        "2026-12-01T14:00:00Z"
    )
    await store.record_tick("good", LastTick(tick=tick, at=tick, outcome="skipped"))
    (item,) = (await api.http.get(f"{API}/schedules")).json()["items"]
    assert item["last_fired_at"] is None


CRON_FORMS = {
    "last-day": "0 0 L * *",
    "second-monday": "0 0 * * 1#2",
    "any-day-mondays": "0 12 ? * MON",
    "nearest-weekday": "0 9 14W * *",
}
"""Cron forms croniter accepts that the dashboard's own parser once showed as "–"."""


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


async def test_every_accepted_cron_form_has_its_next_fire_time(api: Any, sdk: Client) -> None:
    for name, cron in CRON_FORMS.items():
        r = await api.http.put(f"{API}/schedules/{name}", json={"task": "t", "cron": cron})
        assert r.status_code == 201, r.text
    r = await api.http.put(
        f"{API}/schedules/paused", json={"task": "t", "cron": "0 0 L * *", "paused": True}
    )
    assert r.status_code == 201, r.text

    before = await server_ms(sdk.redis, sdk.keys.schedules) / 1000
    items = {s["name"]: s for s in (await api.http.get(f"{API}/schedules")).json()["items"]}
    one = {name: (await api.http.get(f"{API}/schedules/{name}")).json() for name in CRON_FORMS}
    after = await server_ms(sdk.redis, sdk.keys.schedules) / 1000

    for name, cron in CRON_FORMS.items():
        expected = {_iso(croniter(cron, t).get_next(float)) for t in (before, after)}
        assert items[name]["next_fire_at"] in expected, (name, items[name])
        assert one[name]["next_fire_at"] in expected, (name, one[name])
        assert items[name]["last_fired_at"] is None
    assert items["paused"]["paused"] is True
    assert items["paused"]["next_fire_at"] is None
    assert (await api.http.get(f"{API}/schedules/paused")).json()["next_fire_at"] is None
    resumed = await api.http.post(f"{API}/schedules/paused/resume")
    assert resumed.status_code == 200
    assert (await api.http.get(f"{API}/schedules/paused")).json()["next_fire_at"] == (
        items["last-day"]["next_fire_at"]
    )


async def test_a_queue_is_partitioned_over_rest(api: Any, sdk: Client) -> None:
    await submit(api, "hot", 1)
    r = await api.http.put(f"{API}/queues/hot", json={"partitions": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["name"], body["partitions"], body["depth"]) == ("hot", 4, 1)
    assert body["depth_by_partition"] == [1, 0, 0, 0]
    ids = await submit(api, "hot", 8)
    assert {i.split(":")[0] for i in ids} == {"hot", "hot~1", "hot~2", "hot~3"}
    task = (await api.http.get(f"{API}/tasks/{ids[1]}")).json()
    assert task["queue"] == "hot"
    assert (await api.http.get(f"{API}/queues/hot")).json()["depth"] == 9
    assert [q["name"] for q in (await api.http.get(f"{API}/queues")).json()["items"]] == ["hot"]

    check(await api.http.put(f"{API}/queues/hot", json={"partitions": 2}), 422, "validation_error")
    for bad in ({"partitions": 0}, {"partitions": 65}, {"partitions": "4"}, {"parts": 4}):
        r = await api.http.put(f"{API}/queues/hot", json=bad)
        assert r.status_code in {400, 422}, (bad, r.text)
    check(await api.http.put(f"{API}/queues/nope", json={"partitions": 2}), 404, "queue_not_found")
    assert (await api.http.get(f"{API}/queues/hot")).json()["partitions"] == 4
    entries = [e for e in await audit(sdk) if e["action"] == "queue.configure"]
    assert [(e["queue"], e["actor"], e["detail"]) for e in entries] == [
        ("hot", "operator", "partitions=1->4")
    ]


async def test_groups_over_rest(api: Any, sdk: Client) -> None:
    r = await api.http.put(f"{API}/queues/crm", json={"group_concurrency": 2, "group_rate": "10/s"})
    check(r, 404, "queue_not_found")
    ids = await submit(api, "crm", 3, group="customer:42")
    await submit(api, "crm", 1, group="customer:7")
    r = await api.http.put(f"{API}/queues/crm", json={"group_concurrency": 2, "group_rate": "10/s"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["group_concurrency"], body["group_rate"], body["groups"]) == (2, "10/s", 2)
    assert (body["depth"], body["waiting_in_groups"]) == (2, 2)
    task = (await api.http.get(f"{API}/tasks/{ids[2]}")).json()
    assert task["group"] == "customer:42"
    assert task["waiting"]["reason"] == "group_turn"

    listed = (await api.http.get(f"{API}/queues/crm/groups")).json()
    assert [(g["name"], g["waiting"], g["queued"]) for g in listed["groups"]] == [
        ("customer:42", 2, 1),
        ("customer:7", 0, 1),
    ]
    page = (await api.http.get(f"{API}/queues/crm/groups", params={"limit": 1})).json()
    assert page["next_cursor"] == "customer:42"
    r = await api.http.put(
        f"{API}/queues/crm/groups/customer:42", json={"paused": True, "weight": 3}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["paused"], r.json()["weight"]) == (True, 3)
    got = (await api.http.get(f"{API}/queues/crm/groups/customer:42")).json()
    assert (got["paused"], got["weight"], got["waiting"] + got["queued"]) == (True, 3, 3)
    task = (await api.http.get(f"{API}/tasks/{ids[2]}")).json()
    assert task["waiting"]["reason"] == "group_paused"

    for bad in ({"weight": 0}, {"weight": 101}, {"paused": "yes"}, {"colour": 1}):
        r = await api.http.put(f"{API}/queues/crm/groups/customer:42", json=bad)
        assert r.status_code in {400, 422}, (bad, r.text)
    check(await api.http.put(f"{API}/queues/crm/groups/g", json={}), 422, "validation_error")
    check(
        await api.http.put(f"{API}/queues/nope/groups/g", json={"paused": True}),
        404,
        "queue_not_found",
    )
    for bad in ({"group": ""}, {"group": "a/b"}, {"group": "x" * 129}, {"group": 5}):
        r = await api.http.post(f"{API}/tasks", json={"task": "t", "queue": "crm", **bad})
        assert r.status_code in {400, 422}, (bad, r.text)
    for bad in ({"group_concurrency": 0}, {"group_rate": "1/x"}, {"group_rate": "0/s"}):
        r = await api.http.put(f"{API}/queues/crm", json=bad)
        assert r.status_code in {400, 422}, (bad, r.text)
    r = await api.http.put(f"{API}/queues/crm", json={"group_concurrency": None})
    assert r.json()["group_concurrency"] is None
    actions = [
        (e["action"], e.get("detail")) for e in await audit(sdk) if e["action"].startswith("group")
    ]
    assert actions == [("group.pause", "group=customer:42 paused=true weight=3")]
