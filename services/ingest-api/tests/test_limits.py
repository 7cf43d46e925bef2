"""What one key holder can hold through a real socket: long-polls do not take the Redis
connections submits need, waits are capped per key and per server, and a full pool is a
clear 503."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from typing import Any

import httpx
import pytest

from dtq_core.client import Client
from dtq_devtools.testing import wait_until

TASKS = "/api/v1/tasks"


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"]) == (status, code)
    assert body["detail"]
    return body


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def test_long_polls_of_a_read_key_do_not_stop_submits(
    api_factory: Any, keys: Any, worker: Any, record_property: Any
) -> None:
    """A read key holds more long-polls than the pool has connections (and more than its
    cap): submits keep answering 201 meanwhile, and the held waits all end with the task."""
    api = api_factory(redis_max_connections=16, api_waits_per_key=40, api_waits_max=100)
    limiter = api.server.app.state.services.waits
    target = (await api.http.post(TASKS, json={"task": "t", "queue": "target"})).json()["id"]
    limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
    reader = httpx.AsyncClient(
        base_url=api.url, headers=keys.header("read"), timeout=60, limits=limits
    )
    producer = httpx.AsyncClient(
        base_url=api.url, headers=keys.header("submit"), timeout=60, limits=limits
    )
    api.clients += [reader, producer]

    polls = [
        asyncio.create_task(reader.get(f"{TASKS}/{target}/result", params={"wait": 30}))
        for _ in range(120)
    ]
    await wait_until(lambda: limiter.count == 40, message="40 long-polls held")
    refused = await wait_until(
        lambda: (
            [p.result() for p in polls if p.done()] if sum(p.done() for p in polls) == 80 else None
        ),
        message="80 long-polls refused",
    )
    for r in refused:
        assert problem(r, 429, "too_many_waits")["retry_after_s"] == 1
        assert r.headers["retry-after"] == "1"

    submits: Counter[int] = Counter()
    lists: Counter[int] = Counter()
    latencies: list[float] = []

    async def submit_many(n: int) -> None:
        for _ in range(n):
            started = time.perf_counter()
            r = await producer.post(TASKS, json={"task": "t", "queue": "dos"})
            latencies.append(time.perf_counter() - started)
            submits[r.status_code] += 1
            lists[(await reader.get("/api/v1/queues")).status_code] += 1

    await asyncio.gather(*(submit_many(25) for _ in range(8)))
    assert limiter.count == 40  # the waits were held all along
    figures = {
        "submits_ok": submits[201],
        "submits_failed": 200 - submits[201],
        "submit_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "submit_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "waits_held": 40,
        "waits_refused_429": len(refused),
    }
    for name, value in figures.items():
        record_property(name, value)
    print("long-poll abuse:", figures)
    assert submits == Counter({201: 200}), submits
    assert lists == Counter({200: 200}), lists

    await worker.finish("target", await worker.claim("target"), "ok", '"done"')
    answers = await asyncio.gather(*polls)
    assert Counter(r.status_code for r in answers) == Counter({200: 40, 429: 80})
    assert all(r.json()["result"] == "done" for r in answers if r.status_code == 200)
    assert limiter.count == 0


async def test_the_server_wide_cap_refuses_waits_of_every_key(api_factory: Any, keys: Any) -> None:
    api = api_factory(api_waits_per_key=3, api_waits_max=4)
    limiter = api.server.app.state.services.waits
    task_id = (await api.http.post(TASKS, json={"task": "t", "queue": "q"})).json()["id"]
    reader = api.client(keys.header("read"))
    url = f"{TASKS}/{task_id}/result"
    held = [asyncio.create_task(reader.get(url, params={"wait": 20})) for _ in range(3)]
    await wait_until(lambda: limiter.count == 3, message="three waits held")
    body = problem(await reader.get(url, params={"wait": 20}), 429, "too_many_waits")
    assert "DTQ_API_WAITS_PER_KEY=3" in body["detail"]
    # The admin key has room of its own, up to the server's cap.
    admin = [asyncio.create_task(api.http.get(url, params={"wait": 20}))]
    await wait_until(lambda: limiter.count == 4, message="four waits held")
    body = problem(await api.http.get(url, params={"wait": 20}), 429, "too_many_waits")
    assert "DTQ_API_WAITS_MAX=4" in body["detail"]
    # A look without a wait is never refused.
    assert (await reader.get(url)).status_code == 202
    metrics = (await api.http.get("/metrics")).text
    assert 'dtq_api_waits_refused_total{cap="key"} 1.0' in metrics
    assert 'dtq_api_waits_refused_total{cap="total"} 1.0' in metrics
    assert "dtq_api_waits 4.0" in metrics
    await api.http.post(f"{TASKS}/{task_id}/cancel")
    assert [r.status_code for r in await asyncio.gather(*held, *admin)] == [200] * 4


@pytest.mark.standalone_only  # pauses the one server
async def test_a_full_connection_pool_is_a_clear_503_with_retry_after(
    api_factory: Any, sdk: Client
) -> None:
    """Redis is paused: two of three submits hold the pool's two connections, the other
    waits 2 s for one and gets 503 redis_busy; the two complete when Redis resumes."""
    api = api_factory(redis_max_connections=2)
    assert (await api.http.get("/api/v1/queues")).status_code == 200  # the pool is warm
    await sdk.redis.execute_command("CLIENT", "PAUSE", "4000", "ALL")
    try:
        submits = [
            asyncio.create_task(api.http.post(TASKS, json={"task": "t", "queue": f"q{i}"}))
            for i in range(3)
        ]
        busy = await wait_until(
            lambda: next((s.result() for s in submits if s.done()), None),
            message="a submit refused",
        )
    finally:
        await sdk.redis.execute_command("CLIENT", "UNPAUSE")
    body = problem(busy, 503, "redis_busy")
    assert "DTQ_REDIS_MAX_CONNECTIONS" in body["detail"]
    assert busy.headers["retry-after"] == "1"
    answers = await asyncio.gather(*submits)
    assert sorted(r.status_code for r in answers) == [201, 201, 503]


async def test_list_pages_of_big_tasks_are_summaries(
    api: Any, worker: Any, record_property: Any
) -> None:
    """100 tasks with 200 KB of arguments each: the task list and the DLQ page answer with
    summaries of a bounded size; the detail route still has the arguments."""
    blob = "x" * 200_000
    for _ in range(10):  # batches of 10: under the batch body limit
        tasks = [{"task": "t", "queue": "big", "args": [blob]} for _ in range(10)]
        r = await api.http.post(f"{TASKS}/batch", json={"tasks": tasks})
        assert r.json()["created"] == 10
    listed = await api.http.get(TASKS, params={"limit": 500})
    assert listed.status_code == 200
    items = listed.json()["items"]
    assert len(items) == 100
    assert all("args" not in t and t["args_bytes"] == len(blob) + 4 for t in items)

    dead = await worker.kill("big")
    assert len(dead) == 100
    dlq = await api.http.get("/api/v1/queues/big/dlq", params={"limit": 1000})
    assert dlq.status_code == 200
    dead_items = dlq.json()["items"]
    assert len(dead_items) == 100
    assert all(t["last_error"]["message"] == "boom" and "errors" not in t for t in dead_items)

    figures = {"tasks_page_bytes": len(listed.content), "dlq_page_bytes": len(dlq.content)}
    for name, value in figures.items():
        record_property(name, value)
    print("list pages of 100 tasks of 200 KB:", figures)
    assert len(listed.content) < 100_000
    assert len(dlq.content) < 100_000

    detail = await api.http.get(f"{TASKS}/{items[0]['id']}")
    assert detail.json()["args"] == [blob]
    assert detail.json()["errors"][0]["message"] == "boom"
