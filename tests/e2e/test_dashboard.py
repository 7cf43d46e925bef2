"""The dashboard in a real headless Chromium against the real stack (see conftest.py): every
view renders real data, live updates arrive without a reload, actions taken in the browser
change the state in Redis (checked through the API), the connection indicator follows a
gateway restart, keys and scopes are honoured, and the layout holds at phone width.

Screenshots of every view land in tests/e2e/artifacts/ (and in docs/dashboard/ with
UPDATE_DASHBOARD_SCREENSHOTS=1).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from playwright.sync_api import Route, WebSocketRoute, expect

from dtq_core import SyncClient
from dtq_core.infra import tracing
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.workers import WorkerRecord
from dtq_devtools.testing import RedisServer, wait_until_sync

if TYPE_CHECKING:  # conftest.py is not importable under --import-mode=importlib
    from conftest import Session, Stack

# Network errors Chromium logs by itself, whatever the page does, while a server is down or
# refuses a request on purpose.
WS_DOWN = r"WebSocket connection to .* failed"
HTTP_401 = r"Failed to load resource: the server responded with a status of 401"


def test_overview_shows_real_data_and_a_task_submitted_live(session: Session, stack: Stack) -> None:
    for i in range(12):
        stack.submit("sleep", args=[0.05 * (i % 4)])
    stack.submit("fail", max_attempts=1, args=["overview"])
    page = session.open("/")
    session.wait_live()
    expect(page.locator("tr[data-queue='default']")).to_be_visible()
    expect(page.locator(".card", has_text="Workers alive")).to_contain_text("1 / 1")

    # Submitted through the API after the page opened: its events arrive without a reload.
    task_id = stack.submit("echo", args=["live"])
    page.wait_for_selector(f".feed-item[data-type='task.succeeded'][data-task='{task_id}']")
    for i in range(8):
        stack.submit("sleep", args=[0.02 * i])
    expect(page.locator(".feed-item").nth(19)).to_be_visible()
    expect(page.locator(".card", has_text="Throughput")).not_to_contain_text("0/s")
    session.screenshot("overview")


def test_failures_of_the_last_five_minutes_include_those_before_the_page_opened(
    session: Session, stack: Stack
) -> None:
    """The overview's five-minute figures start five minutes back, not when the page opens:
    a task that died a moment before is counted (and a retried attempt is told apart)."""
    dead_id = stack.submit("fail", max_attempts=2, args=["before the page"])
    stack.wait_status(dead_id, "dead")
    page = session.open("/")
    session.wait_live()
    # The gateway's reader is past the death once a later event reached this page: a page
    # opened now would see it only by looking back.
    echo_id = stack.submit("echo", args=["after the death"])
    page.wait_for_selector(f".feed-item[data-type='task.succeeded'][data-task='{echo_id}']")
    page.reload()
    session.wait_live()
    card = page.locator(".card", has_text="Failed, last 5 min")
    expect(card.locator(".card-value")).not_to_have_text("0")
    expect(card.locator(".card-hint")).not_to_contain_text(" 0 attempts retried")
    expect(
        page.locator(f".feed-item[data-type='task.dead'][data-task='{dead_id}']")
    ).to_be_visible()


def test_tasks_list_follows_a_new_task_live_and_filters(session: Session, stack: Stack) -> None:
    page = session.open("/tasks")
    session.wait_live()
    expect(page.locator("h1")).to_have_text("Tasks")
    task_id = stack.submit("sleep", args=[0.4], queue="reports")
    row = page.locator(f"tr[data-task-id='{task_id}']")
    expect(row).to_be_visible()
    expect(row).to_have_attribute("data-status", "succeeded", timeout=10_000)
    session.screenshot("tasks")

    page.locator("select[name='status']").select_option("succeeded")
    expect(page).to_have_url(f"{stack.url}/tasks?status=succeeded")
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-status", "succeeded")
    page.locator("select[name='queue']").select_option("reports")
    expect(page.locator(f"tr[data-task-id='{task_id}']")).to_be_visible()
    assert page.locator("tr[data-task-id]").count() >= 1
    for queue in page.locator("tr[data-task-id] td:nth-child(3)").all_inner_texts():
        assert queue == "reports"

    # Search by id opens the task.
    page.fill("#task-id", task_id)
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{stack.url}/tasks/{task_id}")
    expect(page.locator("#task-title")).to_contain_text("sleep")


def test_a_task_submitted_while_the_list_loads_appears(session: Session, stack: Stack) -> None:
    """The list's read and the task's events cross: the read answers as it was before the
    submit, the events arrive before that answer. The page must read the list again, not drop
    the events."""
    page = session.open("/tasks")
    session.wait_live()
    submitted: list[str] = []

    def hold_the_answer(route: Route) -> None:
        if submitted:
            route.continue_()
            return
        submitted.append(stack.submit("sleep", args=[0], queue="reports"))
        stack.wait_status(submitted[0], "succeeded")  # its events have been published
        route.fulfill(json={"items": [], "next_cursor": None})  # as read before the submit

    page.route(re.compile(r".*/api/v1/tasks\?.*queue=reports.*"), hold_the_answer)
    page.locator("select[name='queue']").select_option("reports")
    expect(page).to_have_url(f"{stack.url}/tasks?queue=reports")
    # The route handler runs while the page is waited on: poll until it has submitted.
    deadline = time.monotonic() + 15
    while not submitted and time.monotonic() < deadline:
        page.wait_for_timeout(20)
    assert submitted, "the list's read never reached the route"
    expect(page.locator(f"tr[data-task-id='{submitted[0]}']")).to_be_visible()


def test_a_reread_of_the_list_that_crosses_a_new_tasks_events_keeps_its_row(
    session: Session, stack: Stack
) -> None:
    """The list is loaded; a re-read leaves (here after a gap: events may have been missed),
    a task is submitted, its row appears from its events, and then the re-read answers as it
    was before the submit. The row must stay and follow its task (it vanished: the answer
    replaced the live rows, and the task's later events had no row to update)."""
    sockets: list[WebSocketRoute] = []

    def through(ws: WebSocketRoute) -> None:
        ws.connect_to_server()  # frames pass both ways untouched
        sockets.append(ws)

    session.page.route_web_socket(re.compile(r".*/ws/events.*"), through)
    page = session.open("/tasks?queue=reports")
    session.wait_live()
    expect(page.locator("h1")).to_have_text("Tasks")
    held: list[Route] = []

    def hold(route: Route) -> None:
        held.append(route)

    page.route(re.compile(r".*/api/v1/tasks\?.*queue=reports.*"), hold)
    # A gap frame, as the gateway sends when a reader fell behind: the page reads the list again.
    sockets[-1].send('{"type": "gap", "cursor": null, "reason": "lagging"}')
    deadline = time.monotonic() + 10
    while not held:
        assert time.monotonic() < deadline, "the gap did not make the page read the list again"
        page.wait_for_timeout(20)  # lets playwright dispatch the route; not a barrier
    before_the_submit = held[0].fetch().json()
    # One row only this answer has: once it shows, the answer has replaced the list.
    before_the_submit["items"].append(_summary(LANDED, "reports"))

    task_id = stack.submit("sleep", args=[0.2], queue="reports")
    row = page.locator(f"tr[data-task-id='{task_id}']")
    expect(row).to_have_attribute("data-status", "succeeded", timeout=10_000)
    held[0].fulfill(json=before_the_submit)
    expect(page.locator(f"tr[data-task-id='{LANDED}']")).to_be_visible()
    expect(row).to_have_attribute("data-status", "succeeded")


LANDED = "reports:00000000000000000000000000000000"


def _summary(task_id: str, queue: str) -> dict[str, object]:
    """A task summary as GET /api/v1/tasks lists it, for a task that ended long ago."""
    return {
        "id": task_id,
        "task": "sleep",
        "queue": queue,
        "status": "succeeded",
        "priority": 5,
        "attempts": 1,
        "max_attempts": None,
        "created_at": "2026-01-01T00:00:00Z",
        "started_at": "2026-01-01T00:00:01Z",
        "finished_at": "2026-01-01T00:00:02Z",
        "timeout_s": None,
        "cancel_requested": False,
        "result_truncated": False,
        "args_bytes": 0,
        "kwargs_bytes": 0,
        "metadata_bytes": 0,
        "result_bytes": 0,
        "errors_bytes": 0,
        "error_count": 0,
    }


def test_task_detail_shows_errors_and_retry_and_cancel_change_redis(
    session: Session, stack: Stack
) -> None:
    dead_id = stack.submit("fail", args=["disk full"], max_attempts=2)
    stack.wait_status(dead_id, "dead")
    page = session.open(f"/tasks/{dead_id}")
    expect(page.locator("#task-title .badge")).to_have_text("dead")
    errors = page.locator("ol.errors > li")
    expect(errors).to_have_count(2)
    expect(errors.first).to_contain_text("disk full")
    expect(page.locator("pre.json").first).to_contain_text("disk full")
    expect(page.locator("ol.timeline li", has_text="attempt 1 failed")).to_be_visible()
    session.screenshot("task-detail")

    page.get_by_role("button", name="Retry").click()
    # It runs again (and fails again): the error history in Redis grows past two attempts.
    wait_until_sync(lambda: len(stack.task(dead_id)["errors"]) >= 3, timeout=15, message="retry")
    expect(page.locator("ol.timeline li.live").first).to_be_visible()

    waiting = stack.submit("echo", args=["later"], delay_s=120)
    page = session.open(f"/tasks/{waiting}")
    expect(page.locator("#task-title .badge")).to_have_text("scheduled")
    expect(page.get_by_role("button", name="Retry")).to_be_disabled()
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#task-title .badge")).to_have_text("cancelled")
    assert stack.status(waiting) == "cancelled"


def test_a_traced_task_links_to_its_trace(
    session: Session, stack: Stack, redis_server: RedisServer
) -> None:
    tracing.configure_tracing("e2e-producer", exporter=InMemorySpanExporter(), env={})
    try:
        with SyncClient.from_url(redis_server.url, reject_unknown_queues=False) as client:
            traced = client.enqueue("echo", args=["traced"])
    finally:
        tracing.shutdown()
    assert traced.trace_id is not None
    plain = stack.submit("echo", args=["plain"])  # the stack's API traces nothing
    page = session.open(f"/tasks/{traced.id}")
    link = page.locator("[data-fact=trace] a")
    expect(link).to_have_text(traced.trace_id)
    expect(link).to_have_attribute("href", f"http://127.0.0.1:16686/trace/{traced.trace_id}")
    expect(link).to_have_attribute("target", "_blank")
    page = session.open(f"/tasks/{plain}")
    expect(page.locator("#task-title .badge")).to_be_visible()
    expect(page.locator("[data-fact=trace]")).to_have_count(0)


def test_results_and_errors_render_as_text(session: Session, stack: Stack) -> None:
    payload = "<img src=x onerror=document.body.dataset.owned=1><script>1</script>"
    task_id = stack.submit("echo", args=[payload])
    stack.wait_status(task_id, "succeeded")
    page = session.open(f"/tasks/{task_id}")
    expect(page.locator("pre.result")).to_contain_text(payload)
    assert page.locator("main img").count() == 0
    assert page.evaluate("document.body.dataset.owned") is None


def test_a_partitioned_queue_is_one_row_with_its_partitions_as_a_detail(
    session: Session, stack: Stack
) -> None:
    assert stack.api.put("/api/v1/queues/wide", json={"partitions": 3}).status_code == 200
    ids = [stack.submit("echo", queue="wide", delay_s=300) for _ in range(3)]
    page = session.open(f"/tasks/{ids[2]}")
    expect(page.locator("p.waiting[data-reason='scheduled']")).to_contain_text(
        "Waiting: scheduled until"
    )
    page = session.open("/queues")
    row = page.locator("tr[data-queue='wide']")
    badge = row.locator(".badge.partitions")
    expect(badge).to_have_text("3 partitions")
    expect(badge).to_have_attribute("title", "Waiting by partition: #0 0, #1 0, #2 0")
    expect(row.locator("td").nth(2)).to_have_text("3")  # delayed, over every partition
    assert page.locator("tr[data-queue^='wide~']").count() == 0


def test_queue_limits_are_set_and_shown_from_the_browser(session: Session, stack: Stack) -> None:
    page = session.open("/queues")
    row = page.locator("tr[data-queue='flaky']")
    row.get_by_role("button", name="Limits…").click()
    dialog = page.locator("dialog[open]")
    dialog.locator("input[name='concurrency']").fill("5")
    dialog.locator("input[name='rate']").fill("600/m")
    dialog.get_by_role("button", name="Save limits").click()
    expect(page.locator(".toast", has_text="Limits of flaky saved")).to_be_visible()
    expect(row.locator(".badge[data-limit='concurrency']")).to_have_text("≤ 5 running")
    expect(row.locator(".badge[data-limit='rate']")).to_have_text("600/m")
    stats = stack.api.get("/api/v1/queues/flaky").json()
    assert (stats["concurrency"], stats["rate"], stats["max_depth"]) == (5, "600/m", None)

    # A bad value is refused whole: the error shows, nothing changes.
    session.console.allow(r"status of 422 .*/api/v1/queues/flaky\)")
    row.get_by_role("button", name="Limits…").click()
    dialog.locator("input[name='rate']").fill("600/x")
    dialog.locator("input[name='concurrency']").fill("")
    dialog.get_by_role("button", name="Save limits").click()
    expect(page.locator(".toast[role='alert']")).to_be_visible()
    assert stack.api.get("/api/v1/queues/flaky").json()["concurrency"] == 5

    row.get_by_role("button", name="Limits…").click()
    dialog.locator("input[name='rate']").fill("")
    dialog.locator("input[name='concurrency']").fill("")
    dialog.get_by_role("button", name="Save limits").click()
    expect(row.locator(".badge.limit")).to_have_count(0)


def test_queues_pause_resume_and_purge_from_the_browser(session: Session, stack: Stack) -> None:
    for _ in range(3):
        stack.submit("echo", queue="reports", delay_s=300)
    page = session.open("/queues")
    row = page.locator("tr[data-queue='reports']")
    expect(row).to_be_visible()

    row.get_by_role("button", name="Pause").click()
    expect(row.locator(".badge.paused")).to_be_visible()
    assert stack.api.get("/api/v1/queues/reports").json()["paused"] is True
    # Waiting while paused: the depth per priority shows up live.
    for priority in (9, 7, 7, 5, 5, 5, 2):
        stack.submit("echo", queue="reports", priority=priority)
    expect(row.locator("td").nth(0)).to_have_text("7")
    expect(row.locator(".prio")).to_have_attribute("aria-label", re.compile(r"p9: 1, p8: 0, p7: 2"))
    session.screenshot("queues")

    row.get_by_role("button", name="Resume").click()
    expect(row.get_by_role("button", name="Pause")).to_be_visible()
    assert stack.api.get("/api/v1/queues/reports").json()["paused"] is False
    expect(row.locator("td").nth(0)).to_have_text("0")

    assert stack.api.get("/api/v1/queues/reports").json()["delayed"] == 3
    row.get_by_role("button", name="Purge…").click()
    dialog = page.locator("dialog.confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("reports")
    dialog.get_by_role("button", name="Purge waiting tasks").click()
    expect(page.locator(".toast", has_text="Purged 3 tasks")).to_be_visible()
    assert stack.api.get("/api/v1/queues/reports").json()["delayed"] == 0


def test_dlq_requeue_and_discard_from_the_browser(session: Session, stack: Stack) -> None:
    ids = [stack.submit("fail", queue="flaky", args=[f"bad {i}"], max_attempts=1) for i in range(3)]
    for task_id in ids:
        stack.wait_status(task_id, "dead")
    # Paused, so that a requeued task stays queued and the check below is exact.
    assert stack.api.post("/api/v1/queues/flaky/pause").status_code == 200
    try:
        page = session.open("/dlq?queue=flaky")
        for task_id in ids:
            expect(page.locator(f"tr[data-task-id='{task_id}']")).to_be_visible()
        expect(page.locator("tr[data-task-id]").first).to_contain_text("ValueError")
        session.screenshot("dlq")

        page.get_by_label(f"Select {ids[0]}").check()
        page.get_by_role("button", name="Requeue selected").click()
        expect(page.locator(f"tr[data-task-id='{ids[0]}']")).to_have_count(0)
        assert stack.status(ids[0]) == "queued"

        page.get_by_label(f"Select {ids[1]}").check()
        page.get_by_role("button", name="Discard selected…").click()
        page.locator("dialog.confirm").get_by_role("button", name="Discard").click()
        expect(page.locator(f"tr[data-task-id='{ids[1]}']")).to_have_count(0)
        dead = stack.api.get("/api/v1/queues/flaky/dlq").json()["items"]
        assert [t["id"] for t in dead] == [ids[2]]

        page.get_by_role("button", name="Purge…").click()
        page.locator("dialog.confirm").get_by_role("button", name="Purge").click()
        expect(page.get_by_text("No dead tasks in flaky")).to_be_visible()
        assert stack.api.get("/api/v1/queues/flaky/dlq").json()["items"] == []
    finally:
        stack.api.post("/api/v1/queues/flaky/resume")


def test_workers_view_lists_the_running_worker(session: Session, stack: Stack) -> None:
    page = session.open("/workers")
    row = page.locator("tr[data-worker^='e2e-worker-1']")
    expect(row).to_be_visible()
    expect(row).to_have_attribute("data-state", "running")
    expect(row).to_contain_text("default, reports, flaky")
    expect(row).to_contain_text("/ 8")
    expect(row).to_contain_text("ago")
    session.screenshot("workers")


def test_workers_view_shows_a_worker_of_two_processes_with_a_line_each(
    session: Session, stack: Stack
) -> None:
    """``dtq-worker --processes 2`` registers a record per process (``<group>/<slot>``, as
    its processes write them: tests/chaos/test_processes.py runs the real thing); the view
    shows one worker with both."""
    group = "e2e-procs:0a1b2c"
    keys = Keys()
    seconds, micros = stack.redis.time()
    now_ms = seconds * 1000 + micros // 1000
    ids = [f"{group}/0", f"{group}/1.1"]
    for slot, worker_id in enumerate(ids):
        record = WorkerRecord(
            id=worker_id,
            worker_id="e2e-procs",
            host="box",
            pid=4700 + slot,
            queues=("default",),
            concurrency=4,
            inflight=slot,
            processed=10,
            started_at=now_ms * 1000,
            state="running",
            version="0.1.0",
            slot=slot,
            slots=2,
            restarts=slot,
            supervisor=4699,
        )
        stack.redis.zadd(keys.workers, {worker_id: now_ms})
        stack.redis.hset(keys.worker(worker_id), mapping=record.to_fields())
        stack.redis.pexpire(keys.worker(worker_id), 60_000)
    try:
        page = session.open("/workers")
        row = page.locator(f"tr[data-worker='{group}']")
        expect(row).to_contain_text("2 / 2")
        expect(row).to_contain_text("1 / 8")  # in flight over both processes' concurrency
        expect(row).to_contain_text("pid 4699")  # the supervisor's
        first = page.locator(f"tr[data-process='{group}/0']")
        expect(first).to_contain_text("/0")
        expect(first).to_contain_text("pid 4700")
        second = page.locator(f"tr[data-process='{group}/1.1']")
        expect(second).to_contain_text("restarted 1")
        expect(second).to_have_attribute("data-state", "running")
        session.screenshot("workers-processes")
    finally:
        stack.redis.zrem(keys.workers, *ids)
        stack.redis.delete(*(keys.worker(i) for i in ids))


def test_schedules_add_pause_and_delete_from_the_browser(session: Session, stack: Stack) -> None:
    stack.api.put(
        "/api/v1/schedules/hourly-cleanup",
        json={"task": "noop", "cron": "0 * * * *", "queue": "default"},
    )
    page = session.open("/schedules")
    cleanup = page.locator("tr[data-schedule='hourly-cleanup']")
    expect(cleanup).to_contain_text("in ")
    expect(cleanup.locator("td.num")).to_have_text("5")
    form = page.locator("form.add-schedule")
    form.get_by_label("Name").fill("report-every-10-min")
    form.get_by_label("Task").fill("echo")
    form.get_by_label("Runs").select_option("every")
    form.get_by_label("Every (seconds)").fill("600")
    form.get_by_label("kwargs (JSON object)").fill('{"kind": "daily"}')
    form.get_by_role("button", name="Save schedule").click()
    row = page.locator("tr[data-schedule='report-every-10-min']")
    expect(row).to_be_visible()
    saved = stack.api.get("/api/v1/schedules/report-every-10-min").json()
    assert saved["every_s"] == 600
    assert saved["kwargs"] == {"kind": "daily"}
    session.screenshot("schedules")

    row.get_by_role("button", name="Pause").click()
    expect(row).to_have_attribute("data-paused", "true")
    assert stack.api.get("/api/v1/schedules/report-every-10-min").json()["paused"] is True

    row.get_by_role("button", name="Delete…").click()
    page.locator("dialog.confirm").get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)
    assert stack.api.get("/api/v1/schedules/report-every-10-min").status_code == 404
    stack.api.delete("/api/v1/schedules/hourly-cleanup")


def test_a_last_day_of_month_schedule_shows_the_api_next_fire_time(
    session: Session, stack: Stack
) -> None:
    """Cron forms croniter accepts (`L`, `W`, `?`, `1#2`) used to show "–": the dashboard
    parsed cron itself. It shows the API's `next_fire_at` now."""
    r = stack.api.put(
        "/api/v1/schedules/month-end",
        json={"task": "noop", "cron": "0 0 L * *", "queue": "default"},
    )
    assert r.status_code == 201, r.text
    try:
        next_fire_at = stack.api.get("/api/v1/schedules/month-end").json()["next_fire_at"]
        assert next_fire_at is not None
        page = session.open("/schedules")
        cell = page.locator("tr[data-schedule='month-end'] td[data-next-fire]")
        expect(cell).to_have_attribute("data-next-fire", next_fire_at)
        expect(cell).not_to_have_text("–")
        expect(cell).to_contain_text("in ")
        shown = cell.locator("time").get_attribute("datetime")
        assert shown is not None
        assert datetime.fromisoformat(shown) == datetime.fromisoformat(next_fire_at)
    finally:
        stack.api.delete("/api/v1/schedules/month-end")


def test_a_schedule_whose_ticks_are_refused_shows_failing_with_the_reason(
    session: Session, stack: Stack
) -> None:
    """Issue 16.4: a schedule for a task no worker has used to look "active, next fire in
    51 s" while every tick failed in the scheduler's log only."""
    refused = stack.api.put("/api/v1/schedules/typo", json={"task": "no.such.task", "every_s": 1})
    assert refused.status_code == 422
    assert refused.json()["code"] == "unknown_task"
    stored = stack.api.put(
        "/api/v1/schedules/typo",
        json={"task": "no.such.task", "every_s": 1, "allow_unknown_task": True},
    )
    assert stored.status_code == 201, stored.text
    try:
        page = session.open("/schedules")
        row = page.locator("tr[data-schedule='typo']")
        expect(row.locator("td[data-last-tick]")).to_have_attribute(
            "data-last-tick", "refused", timeout=30_000
        )
        expect(row).to_contain_text("failing")
        expect(row).to_contain_text("no live worker has registered task 'no.such.task'")
        last = stack.api.get("/api/v1/schedules/typo").json()["last_tick"]
        assert (last["outcome"], last["code"]) == ("refused", "unknown_task")
    finally:
        stack.api.delete("/api/v1/schedules/typo")


def test_connection_indicator_recovers_after_a_gateway_restart_without_a_hole(
    session: Session, stack: Stack
) -> None:
    session.console.allow(WS_DOWN)
    page = session.open("/")
    session.wait_live()
    before = stack.submit("echo", args=["before"])
    page.wait_for_selector(f".feed-item[data-type='task.succeeded'][data-task='{before}']")

    stack.gateway.signal(signal.SIGKILL)
    stack.gateway.wait(10)
    expect(page.locator(".conn")).to_have_attribute("data-state", "reconnecting", timeout=10_000)
    expect(page.locator(".conn")).to_contain_text("Disconnected")
    missed = [stack.submit("echo", args=[f"missed {i}"]) for i in range(3)]
    for task_id in missed:
        stack.wait_status(task_id, "succeeded")
    session.screenshot("disconnected")

    stack.restart_gateway()
    expect(page.locator(".conn")).to_have_attribute("data-state", "live", timeout=15_000)
    # Resumed from the last cursor: every event of the outage is replayed, none twice.
    for task_id in missed:
        for kind in ("task.queued", "task.started", "task.succeeded"):
            expect(
                page.locator(f".feed-item[data-type='{kind}'][data-task='{task_id}']")
            ).to_have_count(1)
    after = stack.submit("echo", args=["after"])
    page.wait_for_selector(f".feed-item[data-type='task.succeeded'][data-task='{after}']")


def test_a_key_is_asked_for_and_a_read_only_key_hides_admin_actions(
    make_session: Callable[..., Session], stack: Stack
) -> None:
    dead_id = stack.submit("fail", queue="flaky", max_attempts=1)
    stack.wait_status(dead_id, "dead")
    session = make_session(None)
    try:
        session.console.allow(HTTP_401)
        page = session.page
        page.goto(stack.url + "/queues")
        expect(page.locator("#login-title")).to_be_visible()
        assert page.locator("nav").count() == 0
        session.screenshot("sign-in")

        page.fill("#api-key", "dtq_not-a-key")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_contain_text("not valid")

        page.fill("#api-key", stack.keys["submit"])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_contain_text("read scope")

        page.fill("#api-key", stack.keys["read"])
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator(".who")).to_contain_text("viewer")
        expect(page.locator(".badge.read-only")).to_be_visible()
        expect(page.locator("tr[data-queue='flaky']")).to_be_visible()
        assert page.get_by_role("button", name="Pause").count() == 0
        assert page.get_by_role("button", name="Purge…").count() == 0

        page.goto(f"{stack.url}/tasks/{dead_id}")
        expect(page.locator("#task-title .badge")).to_have_text("dead")
        assert page.get_by_role("button", name="Retry").count() == 0
        page.goto(f"{stack.url}/dlq?queue=flaky")
        expect(page.locator(f"tr[data-task-id='{dead_id}']")).to_be_visible()
        assert page.locator("[aria-label='Bulk actions']").count() == 0
        page.goto(f"{stack.url}/schedules")
        expect(page.locator("#schedules-title")).to_be_visible()
        assert page.locator("form.add-schedule").count() == 0

        # The key lives in this tab's sessionStorage only; signing out forgets it.
        assert page.evaluate("window.sessionStorage.getItem('dtq.apiKey')") == stack.keys["read"]
        assert page.evaluate("window.localStorage.length") == 0
        page.get_by_role("button", name="Sign out").click()
        expect(page.locator("#login-title")).to_be_visible()
        assert page.evaluate("window.sessionStorage.getItem('dtq.apiKey')") is None
    finally:
        stack.api.delete("/api/v1/queues/flaky/dlq")


def test_groups_are_paused_resumed_and_limited_from_the_browser(
    make_session: Callable[..., Session], stack: Stack
) -> None:
    """Grouped tasks wait in a paused queue; their groups show on the queue's row and in its
    groups view, where one group is paused and resumed (checked through the API); a task
    waiting in the paused group says so on its page; the per-group concurrency is set in the
    Limits dialog; a read-only key sees the groups without their actions."""
    session = make_session(stack.keys["admin"])
    assert stack.api.post("/api/v1/queues/reports/pause").status_code == 200
    try:
        ids = {
            group: [
                stack.submit("echo", queue="reports", group=group, args=[f"{group} {i}"])
                for i in range(3)
            ]
            for group in ("acme:1", "acme:2")
        }
        stats = stack.api.get("/api/v1/queues/reports").json()
        assert stats["groups"] == 2
        assert stats["waiting_in_groups"] > 0
        page = session.open("/queues")
        row = page.locator("tr[data-queue='reports']")
        expect(row.locator(".badge.groups")).to_have_text("2 groups")
        expect(row.locator(".badge.group-waiting")).to_have_text(
            f"{stats['waiting_in_groups']} waiting in groups"
        )

        row.locator(".badge.groups").click()
        expect(page).to_have_url(f"{stack.url}/queues/reports/groups")
        expect(page.locator("#groups-title")).to_have_text("Groups of reports")
        expect(page.locator("tr[data-group]")).to_have_count(2)
        acme = page.locator("tr[data-group='acme:1']")
        expect(acme.locator("td").nth(3)).to_have_text("1")  # weight
        expect(acme).to_have_attribute("data-paused", "false")
        acme.get_by_role("button", name="Pause").click()
        expect(page.locator(".toast", has_text="Group acme:1 paused")).to_be_visible()
        expect(acme).to_have_attribute("data-paused", "true")
        expect(acme.locator(".badge.paused")).to_have_text("paused")
        expect(page.locator("tr[data-group='acme:2']")).to_have_attribute("data-paused", "false")
        assert stack.api.get("/api/v1/queues/reports/groups/acme%3A1").json()["paused"] is True
        assert stack.api.get("/api/v1/queues/reports/groups/acme%3A2").json()["paused"] is False
        session.screenshot("groups")

        # The queue runs again; the paused group's waiting tasks stay, the other group's end.
        assert stack.api.post("/api/v1/queues/reports/resume").status_code == 200
        for task_id in ids["acme:2"]:
            stack.wait_status(task_id, "succeeded")
        held = ids["acme:1"][-1]
        assert stack.task(held)["waiting"]["reason"] == "group_paused"
        page = session.open(f"/tasks/{held}")
        expect(page.locator("[data-fact='group'] dd")).to_have_text("acme:1")
        expect(page.locator("p.waiting[data-reason='group_paused']")).to_have_text(
            "Waiting: its group is paused (group acme:1)"
        )

        page.locator("[data-fact='group'] a").click()
        expect(page).to_have_url(f"{stack.url}/queues/reports/groups")
        acme = page.locator("tr[data-group='acme:1']")
        # A weight out of range is refused whole: the error shows, the weight stays.
        session.console.allow(r"status of 422 .*/api/v1/queues/reports/groups/acme%3A1\)")
        acme.get_by_role("button", name="Weight…").click()
        dialog = page.locator("dialog[open]")
        dialog.locator("input[name='weight']").fill("101")
        dialog.get_by_role("button", name="Save weight").click()
        expect(page.locator(".toast[role='alert']")).to_contain_text("weight")
        assert stack.api.get("/api/v1/queues/reports/groups/acme%3A1").json()["weight"] == 1
        acme.get_by_role("button", name="Weight…").click()
        dialog.locator("input[name='weight']").fill("3")
        dialog.get_by_role("button", name="Save weight").click()
        expect(acme.locator("td").nth(3)).to_have_text("3")
        assert stack.api.get("/api/v1/queues/reports/groups/acme%3A1").json()["weight"] == 3

        # Weighted, the group stays listed once its tasks have run.
        acme.get_by_role("button", name="Resume").click()
        expect(page.locator(".toast", has_text="Group acme:1 resumed")).to_be_visible()
        expect(acme).to_have_attribute("data-paused", "false")
        assert stack.api.get("/api/v1/queues/reports/groups/acme%3A1").json()["paused"] is False
        for task_id in ids["acme:1"]:
            stack.wait_status(task_id, "succeeded")
        expect(acme.locator("td").nth(0)).to_have_text("0")  # waiting, read again live

        page = session.open("/queues")
        row = page.locator("tr[data-queue='reports']")
        row.get_by_role("button", name="Limits…").click()
        dialog = page.locator("dialog[open]")
        dialog.locator("input[name='group_concurrency']").fill("2")
        dialog.locator("input[name='group_rate']").fill("10/s")
        dialog.get_by_role("button", name="Save limits").click()
        expect(page.locator(".toast", has_text="Limits of reports saved")).to_be_visible()
        expect(row.locator(".badge[data-limit='group_concurrency']")).to_have_text(
            "≤ 2 running per group"
        )
        expect(row.locator(".badge[data-limit='group_rate']")).to_have_text("10/s per group")
        limits = stack.api.get("/api/v1/queues/reports").json()
        assert (limits["group_concurrency"], limits["group_rate"]) == (2, "10/s")
        assert (limits["concurrency"], limits["rate"]) == (None, None)

        # A group rate the pattern refuses changes nothing.
        session.console.allow(r"status of 422 .*/api/v1/queues/reports\)")
        row.get_by_role("button", name="Limits…").click()
        expect(dialog.locator("input[name='group_concurrency']")).to_have_value("2")
        dialog.locator("input[name='group_rate']").fill("10/x")
        dialog.locator("input[name='group_concurrency']").fill("")
        dialog.get_by_role("button", name="Save limits").click()
        expect(page.locator(".toast[role='alert']")).to_be_visible()
        assert stack.api.get("/api/v1/queues/reports").json()["group_concurrency"] == 2

        viewer = make_session(stack.keys["read"])
        view = viewer.open("/queues/reports/groups")
        expect(view.locator("tr[data-group='acme:1'] td").nth(3)).to_have_text("3")
        expect(view.get_by_text("Your key is read-only")).to_be_visible()
        assert view.get_by_role("button", name="Pause").count() == 0
        assert view.get_by_role("button", name="Weight…").count() == 0
    finally:
        stack.api.post("/api/v1/queues/reports/resume")
        for group in ("acme%3A1", "acme%3A2"):
            stack.api.put(
                f"/api/v1/queues/reports/groups/{group}", json={"paused": False, "weight": 1}
            )
        stack.api.put(
            "/api/v1/queues/reports", json={"group_concurrency": None, "group_rate": None}
        )


def test_the_groups_view_pages_by_name(session: Session, stack: Stack) -> None:
    """More groups than a page holds: the next page goes on by name from where the first
    stopped, and back again."""
    names = [f"page-{i:02d}" for i in range(53)]
    for name in names:
        assert (
            stack.api.put(f"/api/v1/queues/wide/groups/{name}", json={"weight": 2}).status_code
            == 200
        )
    page = session.open("/queues/wide/groups")
    rows = page.locator("tr[data-group^='page-']")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-group", "page-00")
    expect(page.get_by_role("button", name="← Previous")).to_be_disabled()
    page.get_by_role("button", name="Next →").click()
    expect(rows).to_have_count(3)
    expect(rows.first).to_have_attribute("data-group", "page-50")
    expect(page.get_by_role("button", name="Next →")).to_be_disabled()
    page.get_by_role("button", name="← Previous").click()
    expect(rows).to_have_count(50)


def _submit_workflow(stack: Stack, body: dict[str, object]) -> str:
    r = stack.api.post("/api/v1/workflows", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _workflow(stack: Stack, workflow_id: str) -> dict[str, Any]:
    r = stack.api.get(f"/api/v1/workflows/{workflow_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_workflows_are_drawn_followed_to_their_tasks_and_cancelled(
    session: Session, stack: Stack
) -> None:
    """A chain with a chord inside is drawn by depth and followed live to its result; a node
    opens its step's task, whose page links back; a slow workflow is cancelled with the button
    (checked through the API); the list shows both, and filters by status."""
    done_id = _submit_workflow(
        stack,
        {
            "name": "e2e-chord",
            "workflow": {
                "chain": [
                    {"task": "echo", "args": ["start"]},
                    {
                        "chord": {
                            "header": [{"task": "echo", "args": [n]} for n in range(3)],
                            "callback": {"task": "echo"},
                        }
                    },
                    {"task": "echo", "kwargs": {"done": True}},
                ]
            },
        },
    )
    page = session.open(f"/workflows/{done_id}")
    session.wait_live()
    nodes = page.locator(".wf-nodes > li")
    expect(nodes).to_have_count(6)
    expect(page.locator("#workflow-title .badge")).to_have_text("succeeded", timeout=20_000)
    for step, depth in enumerate([0, 1, 1, 1, 2, 3]):
        node = page.locator(f".wf-nodes > li[data-step='{step}']")
        expect(node).to_have_attribute("data-status", "succeeded")
        expect(node).to_have_attribute("data-depth", str(depth))
        expect(node).to_contain_text(f"#{step}")
        expect(node).to_contain_text("echo")
        expect(node.locator(".wf-node-status")).to_contain_text("✓ succeeded")
    assert page.locator(".wf-edge").count() == 3 + 3 + 1
    expect(page.locator("[data-fact='steps'] dd")).to_contain_text("6 of 6")
    expect(page.locator("pre.result")).to_contain_text('"done": true')
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    session.screenshot("workflow")

    record = _workflow(stack, done_id)
    callback = record["steps"][4]["task_id"]
    page.locator(".wf-nodes > li[data-step='4'] a").click()
    expect(page).to_have_url(f"{stack.url}/tasks/{callback}")
    expect(page.locator("#task-title")).to_contain_text("echo")
    link = page.locator("[data-fact='workflow'] a")
    expect(link).to_have_text(f"step 4 of workflow {done_id}")
    link.click()
    expect(page).to_have_url(f"{stack.url}/workflows/{done_id}")
    expect(page.locator("#workflow-title")).to_contain_text("e2e-chord")

    slow_id = _submit_workflow(
        stack,
        {
            "name": "e2e-slow",
            "workflow": {"chain": [{"task": "sleep", "args": [30]}, {"task": "echo"}]},
        },
    )
    try:
        page = session.open(f"/workflows/{slow_id}")
        expect(page.locator("#workflow-title .badge")).to_have_text("running")
        expect(page.locator(".wf-nodes > li[data-step='0']")).to_have_attribute(
            "data-status", "running"
        )
        expect(page.locator(".wf-nodes > li[data-step='1']")).to_have_attribute(
            "data-status", "pending"
        )
        expect(page.locator(".wf-nodes > li[data-step='1'] a")).to_have_count(0)
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator(".toast", has_text="the workflow is now cancelled")).to_be_visible()
        expect(page.locator("#workflow-title .badge")).to_have_text("cancelled")
        expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
        assert _workflow(stack, slow_id)["status"] == "cancelled"
        sleeper = str(_workflow(stack, slow_id)["steps"][0]["task_id"])
        stack.wait_status(sleeper, "cancelled")
        expect(page.locator(".wf-nodes > li[data-step='0']")).to_have_attribute(
            "data-status", "cancelled"
        )
        expect(page.locator(".wf-nodes > li[data-step='1']")).to_have_attribute(
            "data-status", "cancelled"
        )
    finally:
        stack.api.post(f"/api/v1/workflows/{slow_id}/cancel")

    page.get_by_role("link", name="Workflows", exact=True).first.click()
    expect(page).to_have_url(f"{stack.url}/workflows")
    expect(page.locator("#workflows-title")).to_have_text("Workflows")
    done_row = page.locator(f"tr[data-workflow-id='{done_id}']")
    slow_row = page.locator(f"tr[data-workflow-id='{slow_id}']")
    expect(done_row).to_have_attribute("data-status", "succeeded")
    expect(done_row).to_contain_text("e2e-chord")
    expect(done_row.locator("[data-steps]")).to_have_attribute("data-steps", "6/6")
    expect(slow_row).to_have_attribute("data-status", "cancelled")
    expect(slow_row.locator(".badge")).to_have_text("cancelled")
    # Newest first.
    ids = page.locator("tr[data-workflow-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.workflowId)"
    )
    assert ids.index(slow_id) < ids.index(done_id)
    expect(page.locator(".toast")).to_have_count(0, timeout=10_000)
    session.screenshot("workflows")

    page.locator("select[name='status']").select_option("cancelled")
    expect(page).to_have_url(f"{stack.url}/workflows?status=cancelled")
    expect(slow_row).to_be_visible()
    expect(done_row).to_have_count(0)
    slow_row.get_by_role("link").click()
    expect(page).to_have_url(f"{stack.url}/workflows/{slow_id}")


def test_a_failed_workflow_shows_its_error_and_the_step_that_failed_it(
    session: Session, stack: Stack
) -> None:
    failed_id = _submit_workflow(
        stack,
        {
            "name": "e2e-failing",
            "workflow": {
                "chain": [
                    {"task": "echo", "args": ["in"]},
                    {
                        "task": "fail",
                        "args": ["disk full"],
                        "max_attempts": 1,
                        "pass_result": False,
                    },
                    {"task": "echo"},
                ]
            },
        },
    )
    page = session.open(f"/workflows/{failed_id}")
    expect(page.locator("#workflow-title .badge")).to_have_text("failed", timeout=20_000)
    failing = page.locator(".wf-nodes > li[data-step='1']")
    expect(failing.locator(".wf-node.failed-step")).to_be_visible()
    expect(failing).to_contain_text("failed it")
    expect(failing.locator(".wf-node-status")).to_contain_text("✕")
    assert page.locator(".wf-node.failed-step").count() == 1
    expect(page.locator(".wf-nodes > li[data-step='2'] .wf-node-status")).not_to_contain_text(
        "succeeded"
    )
    expect(page.locator("#outcome-title")).to_have_text("Error")
    expect(page.locator("[data-failed-step='1']")).to_contain_text(
        "Step 1 (fail) failed the workflow"
    )
    expect(page.locator("pre.error-value")).to_contain_text("disk full")
    record = _workflow(stack, failed_id)
    assert record["failed_step"] == 1
    page.locator("[data-failed-step='1'] a").click()
    expect(page).to_have_url(f"{stack.url}/tasks/{record['steps'][1]['task_id']}")
    expect(page.locator("#task-title .badge")).to_have_text("dead")


def _batch(stack: Stack, batch_id: str) -> dict[str, Any]:
    r = stack.api.get(f"/api/v1/batches/{batch_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _add_to_batch(stack: Stack, batch_id: str, tasks: list[dict[str, object]]) -> None:
    r = stack.api.post(f"/api/v1/batches/{batch_id}/tasks", json={"tasks": tasks})
    assert r.status_code == 201, r.text


def test_a_batch_shows_its_live_counts_is_sealed_with_the_button_and_runs_its_callbacks(
    session: Session, make_session: Callable[..., Session], stack: Stack
) -> None:
    """A batch made through the API: its page counts its tasks live (one added while the page
    is open included), lists its steps instead of drawing them, and Seal ends it: both
    callbacks run and show their state; a read-only key sees no Seal; the list marks it a
    batch."""
    r = stack.api.post(
        "/api/v1/batches",
        json={
            "name": "e2e-batch",
            "on_success": {"task": "echo", "kwargs": {"all": "ok"}},
            "on_complete": {"task": "echo", "kwargs": {"done": True}},
        },
    )
    assert r.status_code == 201, r.text
    batch_id = str(r.json()["id"])
    _add_to_batch(stack, batch_id, [{"task": "echo", "args": [n]} for n in range(2)])

    page = session.open(f"/workflows/{batch_id}")
    session.wait_live()
    expect(page.locator("#workflow-title")).to_contain_text("e2e-batch")
    expect(page.locator("#workflow-title .kind-batch")).to_have_text("batch")
    expect(page.locator("#workflow-title .badge.status-running")).to_have_text("running")
    expect(page.locator("[data-fact='batch-sealed'] dd")).to_have_text("open")
    expect(page.locator("[data-fact='batch-succeeded'] dd")).to_have_text("2", timeout=15_000)
    expect(page.locator("[data-fact='batch-total'] dd")).to_have_text("2")
    expect(page.locator("[data-fact='batch-pending'] dd")).to_have_text("0")
    expect(page.locator("[data-fact='batch-on-complete'] .badge")).to_have_text("pending")
    # Not drawn: a table of its steps, the callbacks first.
    expect(page.locator(".wf-nodes")).to_have_count(0)
    rows = page.locator("table.batch-steps tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.nth(0)).to_contain_text("on_success")
    expect(rows.nth(1)).to_contain_text("on_complete")
    expect(rows.nth(2)).to_have_attribute("data-status", "succeeded")

    # Added while the page is open: the counts are read again while it runs.
    _add_to_batch(stack, batch_id, [{"task": "echo", "args": [2]}])
    expect(page.locator("[data-fact='batch-total'] dd")).to_have_text("3", timeout=10_000)
    expect(page.locator("[data-fact='batch-succeeded'] dd")).to_have_text("3", timeout=15_000)
    expect(rows).to_have_count(5, timeout=15_000)
    assert _batch(stack, batch_id)["status"] == "running"

    viewer = make_session(stack.keys["read"]).open(f"/workflows/{batch_id}")
    expect(viewer.locator("[data-fact='batch-total'] dd")).to_have_text("3")
    assert viewer.get_by_role("button", name="Seal").count() == 0

    seal = page.get_by_role("button", name="Seal")
    expect(seal).to_be_enabled()
    seal.click()
    expect(page.locator(".toast", has_text="the batch is sealed with 3 tasks")).to_be_visible()
    expect(page.locator("[data-fact='batch-sealed'] dd")).to_have_text("sealed")
    expect(seal).to_be_disabled()
    expect(page.locator("#workflow-title .badge.status-succeeded")).to_have_text(
        "succeeded", timeout=20_000
    )
    complete = page.locator("[data-fact='batch-on-complete']")
    expect(complete.locator(".badge")).to_have_text("succeeded", timeout=10_000)
    expect(page.locator("[data-fact='batch-on-success'] .badge")).to_have_text("succeeded")
    record = _batch(stack, batch_id)
    assert record["sealed"] is True
    assert record["status"] == "succeeded"
    assert (record["total"], record["succeeded"], record["failed"]) == (3, 3, 0)
    assert record["on_complete"] == "succeeded"
    expect(rows.nth(1)).to_have_attribute("data-status", "succeeded")

    # The callback's task got the batch's summary.
    callback_id = _workflow(stack, batch_id)["steps"][1]["task_id"]
    complete.get_by_role("link").click()
    expect(page).to_have_url(f"{stack.url}/tasks/{callback_id}")
    expect(page.locator("pre.result")).to_contain_text(batch_id)
    expect(page.locator("[data-fact='workflow'] a")).to_have_text(f"step 1 of workflow {batch_id}")

    page = session.open("/workflows")
    row = page.locator(f"tr[data-workflow-id='{batch_id}']")
    expect(row).to_have_attribute("data-kind", "batch")
    expect(row.locator(".kind-batch")).to_have_text("batch")
    expect(row.locator("[data-steps]")).to_have_attribute("data-steps", "5/5")


def test_a_large_batch_is_listed_in_pages_not_drawn(session: Session, stack: Stack) -> None:
    """1,000 tasks: 50 rows a page, paged and filtered by status; no graph is drawn."""
    r = stack.api.post("/api/v1/batches", json={"name": "e2e-large-batch"})
    assert r.status_code == 201, r.text
    batch_id = str(r.json()["id"])
    _add_to_batch(stack, batch_id, [{"task": "noop"} for _ in range(1000)])
    _add_to_batch(stack, batch_id, [{"task": "fail", "args": ["no"], "max_attempts": 1}])
    assert stack.api.post(f"/api/v1/batches/{batch_id}/seal").status_code == 200
    wait_until_sync(
        lambda: _batch(stack, batch_id)["status"] != "running",
        timeout=60,
        message="the batch of 1,001 ended",
    )
    page = session.open(f"/workflows/{batch_id}")
    expect(page.locator("[data-fact='batch-total'] dd")).to_have_text("1,001")
    expect(page.locator("[data-fact='batch-failed'] dd")).to_have_text("1")
    expect(page.locator("[data-fact='batch-on-complete'] dd")).to_have_text("none")
    expect(page.get_by_role("button", name="Seal")).to_be_disabled()
    expect(page.locator(".wf-nodes")).to_have_count(0)
    rows = page.locator("table.batch-steps tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-step", "0")
    pages = page.get_by_role("navigation", name="Step pages")
    expect(pages).to_contain_text("1–50 of 1,001")
    pages.get_by_role("button", name="Next →").click()
    expect(rows.first).to_have_attribute("data-step", "50")
    expect(pages).to_contain_text("51–100 of 1,001")
    page.locator("select[name='step-status']").select_option("dead")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-step", "1000")
    expect(pages).to_contain_text("1–1 of 1")
    expect(pages.get_by_role("button", name="Next →")).to_be_disabled()


def test_a_task_that_spawns_children_links_to_them_and_they_link_back(
    session: Session, stack: Stack
) -> None:
    """A parent's page links to the workflow of the children its handler spawned, whose page
    names the parent with a link back."""
    parent = stack.submit("spawner", args=[3, 0])
    children = str(
        wait_until_sync(
            lambda: stack.task(parent).get("children_workflow_id"),
            timeout=15,
            message="the parent spawned its children",
        )
    )
    wait_until_sync(
        lambda: _workflow(stack, children)["status"] == "succeeded",
        timeout=20,
        message="the children ended",
    )
    page = session.open(f"/tasks/{parent}")
    link = page.locator("[data-fact='children'] a")
    expect(link).to_have_text("children")
    expect(link).to_have_attribute("href", f"/workflows/{children}")
    link.click()
    expect(page).to_have_url(f"{stack.url}/workflows/{children}")
    back = page.locator("[data-fact='parent'] a")
    expect(page.locator("[data-fact='parent']")).to_contain_text(f"children of task {parent}")
    expect(page.locator(".wf-nodes > li")).to_have_count(len(_workflow(stack, children)["steps"]))
    expect(page.locator(".wf-nodes > li[data-status='succeeded']")).to_have_count(
        len(_workflow(stack, children)["steps"])
    )
    back.click()
    expect(page).to_have_url(f"{stack.url}/tasks/{parent}")
    expect(page.locator("#task-title")).to_contain_text("spawner")


def test_a_chord_of_200_wraps_its_column_and_pages_in_the_list(
    session: Session, stack: Stack
) -> None:
    """200 members side by side: their column wraps into sub-columns that overlap neither one
    another nor the callback, the drawing scrolls inside its frame and the page does not; the
    list pages back in time with next_before_ms."""
    wide_id = _submit_workflow(
        stack,
        {
            "name": "e2e-wide",
            "workflow": {
                "chord": {
                    "header": [{"task": "noop"} for _ in range(200)],
                    "callback": {"task": "noop", "pass_result": False},
                }
            },
        },
    )
    wait_until_sync(
        lambda: _workflow(stack, wide_id)["status"] == "succeeded",
        timeout=60,
        message="the chord of 200 succeeded",
    )
    page = session.open(f"/workflows/{wide_id}")
    expect(page.locator(".wf-nodes > li")).to_have_count(201)
    expect(page.locator(".wf-nodes > li[data-status='succeeded']")).to_have_count(201)
    boxes = page.locator(".wf-nodes > li").evaluate_all(
        "items => items.map(i => [i.offsetLeft, i.offsetTop, i.offsetWidth, i.offsetHeight])"
    )
    for i, (x, y, w, h) in enumerate(boxes):
        for x2, y2, w2, h2 in boxes[i + 1 :]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, "nodes overlap"
    callback = page.locator(".wf-nodes > li[data-step='200']")
    expect(callback).to_have_attribute("data-depth", "1")
    # One line per row of the wrapped column, from its right side into the callback.
    assert page.locator(".wf-edge").count() == 20
    frame = page.locator(".wf-graph")
    assert frame.evaluate("f => f.scrollWidth > f.clientWidth")
    assert (
        page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        <= 0
    )
    frame_height = frame.evaluate("f => f.getBoundingClientRect().height")
    assert frame_height <= 0.75 * 860 + 2

    # Pages of two: "Older" asks for the workflows before the first page's next_before_ms.
    for n in range(2):
        _submit_workflow(stack, {"name": f"e2e-small-{n}", "workflow": {"task": "noop"}})
    first = stack.api.get("/api/v1/workflows", params={"limit": 2}).json()
    assert first["next_before_ms"] is not None
    second = stack.api.get(
        "/api/v1/workflows", params={"limit": 2, "before_ms": first["next_before_ms"]}
    ).json()
    page.route(
        re.compile(r".*/api/v1/workflows\?.*"),
        lambda route: route.continue_(url=re.sub(r"limit=\d+", "limit=2", route.request.url)),
    )
    page = session.open("/workflows")
    rows = page.locator("tr[data-workflow-id]")

    def shown() -> list[str]:
        return list(rows.evaluate_all("rows => rows.map(r => r.dataset.workflowId)"))

    expect(rows).to_have_count(2)
    assert shown() == [w["id"] for w in first["workflows"]]
    expect(page.get_by_role("button", name="← Newer")).to_be_disabled()
    page.get_by_role("button", name="Older →").click()
    expect(page.locator(".pager")).to_contain_text("Page 2")
    expect(rows.first).to_have_attribute("data-workflow-id", second["workflows"][0]["id"])
    assert shown() == [w["id"] for w in second["workflows"]]
    page.get_by_role("button", name="← Newer").click()
    expect(rows.first).to_have_attribute("data-workflow-id", first["workflows"][0]["id"])


VIEWS = ["/", "/queues", "/tasks", "/workflows", "/dlq", "/workers", "/schedules"]


def test_phone_width_has_no_horizontal_overflow(
    make_session: Callable[..., Session], stack: Stack
) -> None:
    stack.submit("echo", args=["phone"])
    session = make_session(stack.keys["admin"], width=390, height=844)
    for path in VIEWS:
        page = session.open(path)
        page.wait_for_selector("main h1")
        page.wait_for_selector("main :is(table, .empty)")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, (path, overflow)
    session.open("/")
    session.wait_live()
    session.screenshot("phone-overview")


def test_keyboard_reaches_the_nav_and_the_actions(session: Session, stack: Stack) -> None:
    stack.submit("echo", queue="reports")
    page = session.open("/queues")
    expect(page.locator("tr[data-queue='reports']")).to_be_visible()
    page.locator("body").focus()
    reached: list[str] = []
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.append(
            page.evaluate(
                "(() => { const e = document.activeElement;"
                " return e ? e.tagName + ':' + (e.textContent || '').trim() : '' })()"
            )
        )
    assert "A:Skip to content" in reached
    assert "A:Schedules" in reached
    assert "A:Workers" in reached
    assert "BUTTON:Pause" in reached
    # Enter on a focused link follows it.
    page.get_by_role("link", name="Workers").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{stack.url}/workers")
    # A focused action works from the keyboard too; Escape closes its dialog.
    page.goto(f"{stack.url}/queues")
    purge = page.locator("tr[data-queue='reports']").get_by_role("button", name="Purge…")
    purge.focus()
    page.keyboard.press("Enter")
    expect(page.locator("dialog.confirm")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("dialog.confirm")).to_be_hidden()


def _count_in(label: str | None, what: str) -> int:
    match = re.search(rf"([\d,]+) {what}", label or "")
    return int(match.group(1).replace(",", "")) if match else -1


def test_the_overview_charts_the_history_from_before_the_page_opened(
    session: Session, stack: Stack
) -> None:
    """The charts used to start empty at every page load: they held only the events received
    since. Tasks that ended before the page opens are charted from the per-minute history dtq
    keeps in Redis; the page's event socket is refused here, so nothing else can draw them."""
    done = [stack.submit("echo", args=[f"before {i}"], queue="reports") for i in range(4)]
    dead = stack.submit("fail", max_attempts=1, args=["before"], queue="reports")
    for task_id in done:
        stack.wait_status(task_id, "succeeded")
    stack.wait_status(dead, "dead")
    session.console.allow(WS_DOWN)
    session.page.route_web_socket(re.compile(r".*/ws/events.*"), lambda ws: ws.close())
    with session.page.expect_response(re.compile(r".*/api/v1/stats/history\?.*queue=reports")):
        page = session.open("/?queue=reports")
    throughput = page.locator("figure[data-chart='Throughput']")
    plot = throughput.locator(".chart-plot")
    expect(plot.locator("canvas").first).to_be_visible()
    expect(plot).to_have_attribute("aria-label", re.compile(r"succeeded"))
    label = plot.get_attribute("aria-label")
    assert _count_in(label, "succeeded") >= 4, label
    assert _count_in(label, "failed") >= 1, label
    run_time = page.locator("figure[data-chart='Run time'] .chart-plot").get_attribute("aria-label")
    assert _count_in(run_time, "runs ended") >= 5, run_time
    expect(
        page.locator(".card", has_text="Failed, last 5 min").locator(".card-value")
    ).not_to_have_text("0")
    session.screenshot("overview-history")

    # Hover values: the legend follows the minute under the pointer, then the keyboard's.
    when = throughput.locator(".legend-when")
    expect(when).to_have_text("now")
    box = plot.bounding_box()
    assert box is not None
    plot.hover(position={"x": box["width"] - 70, "y": box["height"] / 2})
    expect(when).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d"))
    expect(throughput.locator("li[data-series='succeeded'] .legend-value")).not_to_have_text("–")
    plot.focus()
    page.keyboard.press("Home")
    first_minute = when.inner_text()
    page.keyboard.press("End")
    expect(when).not_to_have_text(first_minute)
    # Every series has its own line pattern in the legend, not only its own colour.
    dashes = throughput.locator(".legend-line line").evaluate_all(
        "lines => lines.map(l => l.getAttribute('stroke-dasharray') || 'solid')"
    )
    assert len(set(dashes)) == len(dashes) == 4, dashes
    session.check_accessibility("the overview, charts drawn")

    # Another range: read from the history again, the previous charts shown meanwhile.
    with page.expect_response(re.compile(r".*/api/v1/stats/history\?.*range=24h")):
        page.get_by_text("24 hours").click()
    expect(page).to_have_url(re.compile(r"range=24h"))
    expect(page.locator(".charts")).to_have_attribute("data-range", "24h")
    expect(page.locator(".charts")).to_have_attribute("aria-busy", "false")


def test_every_view_passes_an_automated_accessibility_check(
    make_session: Callable[..., Session], stack: Stack
) -> None:
    """axe-core (WCAG 2.2 A and AA, and its best practices) on every view with real data, in
    the light and the dark colour scheme, and on the sign-in page."""
    task_id = stack.submit("echo", args=["axe"], queue="reports")
    dead_id = stack.submit("fail", queue="flaky", max_attempts=1, args=["axe"])
    stack.wait_status(task_id, "succeeded")
    stack.wait_status(dead_id, "dead")
    stack.api.put("/api/v1/schedules/axe-check", json={"task": "noop", "every_s": 3600})
    try:
        views = [*VIEWS, f"/tasks/{task_id}", f"/tasks/{dead_id}", "/queues/reports/groups"]
        for scheme in ("light", "dark"):
            session = make_session(stack.keys["admin"], color_scheme=scheme)
            for path in views:
                page = session.open(path)
                page.wait_for_selector("main h1")
                page.wait_for_selector("main :is(table, .empty, .chart, dl, .detail)")
                session.wait_live()
                expect(page.locator("[aria-busy='true']")).to_have_count(0)
                session.check_accessibility(f"{path} ({scheme})")
        signed_out = make_session(None)
        signed_out.console.allow(HTTP_401)
        signed_out.page.goto(stack.url + "/")
        expect(signed_out.page.locator("#login-title")).to_be_visible()
        signed_out.check_accessibility("the sign-in page")
    finally:
        stack.api.delete("/api/v1/schedules/axe-check")


def test_editing_a_schedule_keeps_its_misfire_policy_and_jitter(
    session: Session, stack: Stack
) -> None:
    """Saving a schedule from the dashboard used to reset its misfire policy and jitter to the
    API's defaults: the form had no fields for them. Editing one starts from all it has."""
    r = stack.api.put(
        "/api/v1/schedules/catch-up",
        json={
            "task": "noop",
            "cron": "*/10 * * * *",
            "timezone": "Europe/Paris",
            "misfire": "all",
            "misfire_cap": 7,
            "jitter_s": 30,
            "kwargs": {"kind": "nightly"},
        },
    )
    assert r.status_code == 201, r.text
    try:
        page = session.open("/schedules")
        row = page.locator("tr[data-schedule='catch-up']")
        expect(row).to_contain_text("missed ticks all fired (at most 7)")
        expect(row).to_contain_text("jitter 30 s")
        row.get_by_role("button", name="Edit").click()
        form = page.locator("form.add-schedule")
        expect(form.get_by_label("Name")).to_have_value("catch-up")
        expect(form.get_by_label("Missed ticks")).to_have_value("all")
        expect(form.get_by_label("Most ticks fired")).to_have_value("7")
        expect(form.get_by_label("Jitter")).to_have_value("30")
        form.get_by_label("Priority").fill("8")
        form.get_by_role("button", name="Save schedule").click()
        expect(row.locator("td.num")).to_have_text("8")
        saved = stack.api.get("/api/v1/schedules/catch-up").json()
        assert (saved["priority"], saved["misfire"], saved["misfire_cap"]) == (8, "all", 7)
        assert (saved["jitter_s"], saved["timezone"]) == (30, "Europe/Paris")
        assert saved["kwargs"] == {"kind": "nightly"}

        # A new one with a policy chosen in the form.
        form.get_by_label("Name").fill("skipper")
        form.get_by_label("Task").fill("noop")
        form.get_by_label("Missed ticks").select_option("skip")
        form.get_by_label("Jitter").fill("2.5")
        form.get_by_role("button", name="Save schedule").click()
        expect(page.locator("tr[data-schedule='skipper']")).to_contain_text("missed ticks skipped")
        made = stack.api.get("/api/v1/schedules/skipper").json()
        assert (made.get("misfire", "latest"), made["jitter_s"]) == ("skip", 2.5)
        session.screenshot("schedules")
    finally:
        stack.api.delete("/api/v1/schedules/catch-up")
        stack.api.delete("/api/v1/schedules/skipper")
