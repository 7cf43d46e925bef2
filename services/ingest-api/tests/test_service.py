"""The service around the routes: /health, /ready, /metrics, request ids, Redis outages, the
OpenAPI document and its copy in docs/, and the `python -m dtq_ingest_api` process."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from litestar import get
from structlog.testing import capture_logs

from dtq_core.client import Client
from dtq_core.infra.cluster import each_master
from dtq_core.protocol.scripts import load_library
from dtq_devtools.testing import RedisServer, free_port, wait_until, wait_until_sync
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess
from dtq_devtools.testing.servers import acl_deluser, acl_setuser, with_user
from dtq_ingest_api.openapi import document, render

DOCS = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


async def test_health_ready_and_request_ids(api: Any) -> None:
    health = await api.http.get("/health")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = await api.http.get("/ready")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "redis": "ok",
        "maxmemory_policy": "noeviction",
        "appendonly": "yes",
        "appendfsync": "everysec",
    }
    ids = {(await api.http.get("/health")).headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    echoed = await api.http.get("/api/v1/nowhere", headers={"X-Request-ID": "proxy-id-0001"})
    assert echoed.headers["x-request-id"] == "proxy-id-0001"
    assert echoed.json()["request_id"] == "proxy-id-0001"
    unsafe = await api.http.get("/health", headers={"X-Request-ID": "not {an} id!"})
    assert re.fullmatch(r"[0-9a-f]{32}", unsafe.headers["x-request-id"])


async def test_ready_is_503_when_redis_may_evict(api: Any, sdk: Client) -> None:
    await each_master(sdk.redis, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    try:
        r = await api.http.get("/ready")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "not_ready"
        assert body["maxmemory_policy"] == "allkeys-lru"
        assert "noeviction" in body["reasons"][0]
        assert (await api.http.get("/health")).status_code == 200
    finally:
        await each_master(sdk.redis, "CONFIG", "SET", "maxmemory-policy", "noeviction")
    assert (await api.http.get("/ready")).status_code == 200


async def test_ready_reports_an_unknown_policy_when_config_is_denied(
    api_factory: Any, sdk: Client, redis_url: str
) -> None:
    await acl_setuser(sdk.redis, "dtq-api", "on", ">s3cret", "~*", "&*", "+@all", "-config")
    try:
        api = api_factory(redis_url=with_user(redis_url, "dtq-api", "s3cret"))
        r = await api.http.get("/ready")
        assert r.status_code == 200
        body = r.json()
        assert body["maxmemory_policy"] == "unknown"
        assert "CONFIG" in body["notes"][0]
        assert (await api.http.post("/api/v1/tasks", json={"task": "t"})).status_code == 201
    finally:
        await acl_deluser(sdk.redis, "dtq-api")


async def test_ready_and_submit_are_503_until_the_function_library_is_loaded(
    api_factory: Any, sdk: Client, redis_url: str
) -> None:
    """Under a Redis user that may not load functions, an empty library is a 503 naming
    ``dtq migrate``, never a 500; loading it makes the API ready without a restart."""
    acl = ["on", ">s3cret", "~*", "&*", "+@all", "-function|load", "-function|delete"]
    await acl_setuser(sdk.redis, "dtq-api-noload", *acl)
    try:
        api = api_factory(redis_url=with_user(redis_url, "dtq-api-noload", "s3cret"))
        await sdk.redis.function_flush()
        ready = await api.http.get("/ready")
        assert ready.status_code == 503
        assert "dtq migrate" in ready.json()["reasons"][0]
        submit = await api.http.post("/api/v1/tasks", json={"task": "t"})
        assert submit.status_code == 503
        assert submit.json()["code"] == "redis_unavailable"
        assert "Retry-After" in submit.headers
        await load_library(sdk.redis)
        assert (await api.http.get("/ready")).status_code == 200
        assert (await api.http.post("/api/v1/tasks", json={"task": "t"})).status_code == 201
    finally:
        await acl_deluser(sdk.redis, "dtq-api-noload")


async def test_redis_outage_is_503_with_retry_after_and_recovers(
    api_factory: Any, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        api = api_factory(redis_url=server.url)
        assert (await api.http.post("/api/v1/tasks", json={"task": "t"})).status_code == 201
        server.stop()
        assert (await api.http.get("/health")).status_code == 200
        ready = await api.http.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["redis"] == "unavailable"
        for method, path, body in [
            ("POST", "/api/v1/tasks", {"task": "t"}),
            ("POST", "/api/v1/tasks/batch", {"tasks": [{"task": "t"}]}),
            ("GET", "/api/v1/tasks", None),
            ("GET", "/api/v1/queues", None),
            ("GET", "/api/v1/schedules", None),
            ("GET", "/api/v1/workers", None),
            ("GET", "/api/v1/stats/history", None),
        ]:
            r = await api.http.request(method, path, json=body)
            assert r.status_code == 503, (path, r.text)
            assert r.headers["retry-after"] == "2"
            problem = r.json()
            assert problem["code"] == "redis_unavailable"
            assert str(server.port) not in r.text
            assert "127.0.0.1" not in r.text
        server.start()
        await wait_until(lambda: _ready(api.http), message="ready again")
        assert (await api.http.post("/api/v1/tasks", json={"task": "t"})).status_code == 201
    finally:
        server.stop()


async def _ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/ready")).status_code == 200


async def test_redis_refusing_writes_is_503_not_500(api: Any, sdk: Client) -> None:
    await each_master(sdk.redis, "CONFIG", "SET", "maxmemory", "1")  # every write: OOM
    try:
        r = await api.http.post("/api/v1/tasks", json={"task": "t"})
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "redis_unavailable"
        assert r.headers["retry-after"] == "2"
        assert "OOM" not in r.text
    finally:
        await each_master(sdk.redis, "CONFIG", "SET", "maxmemory", "0")
    assert (await api.http.post("/api/v1/tasks", json={"task": "t"})).status_code == 201


@get("/api/v1/boom", sync_to_thread=False)
def boom() -> None:
    raise RuntimeError("connect redis://dtq:hunter2@10.1.2.3:6379 failed")


async def test_unexpected_errors_are_500_problems_without_internals(api: Any) -> None:
    api.server.app.register(boom)
    with capture_logs() as logs:
        r = await api.http.get("/api/v1/boom")
    assert r.status_code == 500
    body = r.json()
    assert body["code"] == "internal_error"
    assert body["request_id"] == r.headers["x-request-id"]
    for leak in ("hunter2", "10.1.2.3", "redis://", "Traceback", "RuntimeError"):
        assert leak not in r.text
    failed = [e for e in logs if e["event"] == "request_failed"]
    assert len(failed) == 1
    assert failed[0]["request_id"] == body["request_id"]


async def test_metrics_count_requests_by_route_template(api: Any) -> None:
    task_id = (await api.http.post("/api/v1/tasks", json={"task": "t"})).json()["id"]
    await api.http.get(f"/api/v1/tasks/{task_id}")
    await api.http.get("/api/v1/tasks/q:" + "1" * 32)
    await api.http.get("/no/such/path")
    text = (await api.http.get("/metrics")).text
    assert (
        'dtq_http_requests_total{method="GET",route="/api/v1/tasks/{task_id}",status="200"} 1.0'
        in text
    )
    assert (
        'dtq_http_requests_total{method="GET",route="/api/v1/tasks/{task_id}",status="404"} 1.0'
        in text
    )
    assert 'dtq_http_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert (
        'dtq_http_request_duration_seconds_bucket{le="0.1",method="POST",route="/api/v1/tasks"}'
        in text
    )
    assert 'dtq_api_tasks_submitted_total{outcome="created"} 1.0' in text
    assert task_id not in text


async def test_the_served_openapi_document_matches_docs(api: Any) -> None:
    served = (await api.http.get("/schema/openapi.json")).json()
    assert served == document()
    assert DOCS.exists(), "run: uv run python -m dtq_ingest_api.openapi > docs/openapi.json"
    assert DOCS.read_text() == render(served), (
        "docs/openapi.json is stale: uv run python -m dtq_ingest_api.openapi > docs/openapi.json"
    )
    assert json.loads(DOCS.read_text())["info"]["title"] == "dtq ingest API"


def test_the_console_entry_point_serves_and_stops_on_sigterm(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    env = {**FAST_ENV, "DTQ_REDIS_URL": redis_server.url, "DTQ_API_PORT": str(port)}
    proc = ServiceProcess("dtq_ingest_api", [], env, tmp_path / "api.log").start()
    try:
        wait_until_sync(lambda: _health(port), timeout=20, message="the API answers /health")
        proc.signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert proc.wait(timeout=20) in {0, -signal.SIGTERM}
    finally:
        proc.stop()
    log = proc.log()
    assert "auth_open_mode" in log  # no keys: the loud warning
    assert "api_starting" in log
    assert "api_stopped" in log


def _health(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


async def test_bad_settings_exit_2_naming_the_variable(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    proc = ServiceProcess(
        "dtq_ingest_api", [], {"DTQ_API_PORT": "70000"}, tmp_path / "bad.log"
    ).start()
    assert proc.wait(timeout=20) == 2
    assert "DTQ_API_PORT" in proc.log()
    assert await redis.dbsize() == 0
