"""Bad input at the HTTP edge (docs/testing.md, reliability catalogue C1-C4, C6, C7, C16): every
refusal is a problem with a stable code, never a 500, and leaves Redis exactly as it was."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import uvicorn

from dtq_core.client import Client
from dtq_core.infra.settings import Settings, load_settings
from dtq_devtools.testing import free_port, raw_http, wait_until
from dtq_devtools.testing.servers import all_keys
from dtq_ingest_api.app import create_app, server_options
from dtq_ingest_api.body import decode
from dtq_ingest_api.problems import ApiError
from dtq_ingest_api.schemas import SubmitRequest

ROOT = Path(__file__).resolve().parents[3]

TASKS = "/api/v1/tasks"
JSON = {"content-type": "application/json"}


async def snapshot(sdk: Client) -> tuple[int, list[str]]:
    every = await all_keys(sdk.redis)  # every master's keys (DBSIZE counts one node's)
    return len(every), [k for k in every if k.startswith("dtq:")]


def check(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"]) == (status, code)
    assert body["request_id"] == response.headers["x-request-id"]
    text = response.text
    assert "Traceback" not in text
    assert "redis://" not in text
    return body


@pytest.mark.parametrize(
    "raw",
    [
        b'{"task": "a"',  # truncated
        b'{"task": "a", "delay_s": NaN}',
        b'{"task": "a", "priority": Infinity}',
        b'{"task": "a"} trailing',
        b'\xef\xbb\xbf{"task": "a"}',  # a lone BOM before the object
        b'{"task": "a", "args": ' + b"[" * 100_000,
        b'{"task": "a", "args": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b"\xff\xfe",
        b"null",
    ],
    ids=["truncated", "nan", "infinity", "trailing", "bom", "deep-open", "deep", "binary", "null"],
)
async def test_malformed_json_is_400(shared_api: Any, sdk: Client, raw: bytes) -> None:
    api = shared_api
    before = await snapshot(sdk)
    r = await api.http.post(TASKS, content=raw, headers=JSON)
    if raw == b"null":
        check(r, 422, "validation_error")  # well-formed JSON, but not an object
    else:
        check(r, 400, "malformed_json")
    assert await snapshot(sdk) == before


async def test_unknown_fields_are_422_naming_the_field(shared_api: Any, sdk: Client) -> None:
    api = shared_api
    before = await snapshot(sdk)
    probe = {"task": "a", "queue": "q", "status": "succeeded", "attempt": 0}
    body = check(await api.http.post(TASKS, json=probe), 422, "unknown_field")
    assert body["errors"][0]["field"] in {"status", "attempt"}
    assert body["errors"][0]["pointer"] == "/" + body["errors"][0]["field"]
    assert await snapshot(sdk) == before


BIG = int("9" * 400)


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("priority", -1, "validation_error"),
        ("priority", 10, "validation_error"),
        ("priority", BIG, "validation_error"),
        ("priority", "5", "validation_error"),
        ("priority", True, "validation_error"),
        ("priority", 5.5, "validation_error"),
        ("delay_s", -1, "validation_error"),
        ("delay_s", 1e20, "validation_error"),
        ("delay_s", 10 * 86400 * 365, "validation_error"),  # beyond DTQ_TASK_RETENTION_S
        ("eta", "9999-01-01T00:00:00Z", "validation_error"),
        ("eta", "2030-01-01T00:00:00", "validation_error"),  # no time zone
        ("eta", "tomorrow", "validation_error"),
        ("max_attempts", 0, "validation_error"),
        ("max_attempts", 10**6, "validation_error"),
        ("timeout_s", 0, "validation_error"),
        ("timeout_s", 3601, "validation_error"),
        ("ttl_s", -5, "validation_error"),
        ("args", {"not": "a list"}, "validation_error"),
        ("kwargs", [1], "validation_error"),
        ("metadata", "text", "validation_error"),
        ("idempotency_key", "", "validation_error"),
        ("idempotency_key", "k" * 257, "validation_error"),
        ("task", "", "invalid_name"),
        ("task", 5, "invalid_name"),
        ("task", "a:b", "invalid_name"),
        ("queue", "{x}", "invalid_name"),
        ("queue", "a}b", "invalid_name"),
        ("queue", "*", "invalid_name"),
        ("queue", "../x", "invalid_name"),
        ("queue", "a\nb", "invalid_name"),
        ("queue", "a\x00b", "invalid_name"),
        ("queue", "é", "invalid_name"),
        ("queue", "q" * 65, "invalid_name"),
    ],
)
async def test_wrong_types_ranges_and_names_are_422_with_a_pointer(
    shared_api: Any, sdk: Client, field: str, value: Any, code: str
) -> None:
    api = shared_api
    before = await snapshot(sdk)
    r = await api.http.post(TASKS, json={"task": "a", "queue": "q", field: value})
    body = check(r, 422, code)
    error = body["errors"][0]
    assert error["field"] == field
    assert error["pointer"] == f"/{field}"
    assert await snapshot(sdk) == before


async def test_valid_names_touch_only_their_queue_keys(api: Any, sdk: Client) -> None:
    for name in ["a", "p5", "dlq", "A-b_c.d", "x" * 64]:
        assert (await api.http.post(TASKS, json={"task": "t", "queue": name})).status_code == 201
    keys = [k async for k in sdk.redis.scan_iter(match="*")]
    allowed = ("dtq:{a}:", "dtq:{p5}:", "dtq:{dlq}:", "dtq:{A-b_c.d}:", "dtq:{" + "x" * 64 + "}:")
    assert all(k.startswith(allowed) or k in {"dtq:queues"} for k in keys), keys


async def test_non_json_content_is_415(shared_api: Any, sdk: Client) -> None:
    api = shared_api
    before = await snapshot(sdk)
    body = json.dumps({"task": "a"}).encode()
    for headers in (
        {"content-type": "text/plain"},
        {"content-type": "application/x-www-form-urlencoded"},
        {"content-type": "multipart/form-data; boundary=x"},
        {},
    ):
        check(
            await api.http.post(TASKS, content=body, headers=headers), 415, "unsupported_media_type"
        )
    gzipped = await api.http.post(
        TASKS, content=gzip.compress(body), headers={**JSON, "content-encoding": "gzip"}
    )
    assert "compressed" in check(gzipped, 415, "unsupported_media_type")["detail"]
    assert (
        await api.http.post(
            TASKS, content=body, headers={"content-type": "application/json; charset=utf-8"}
        )
    ).status_code == 201
    assert (await snapshot(sdk))[0] > before[0]


async def test_bodies_over_the_limit_are_413(api_factory: Any, sdk: Client) -> None:
    api = api_factory(max_payload_bytes=1024)
    before = await snapshot(sdk)
    limit = 1024 + 16 * 1024
    over = json.dumps({"task": "a", "args": ["x" * (limit + 1)]}).encode()
    body = check(await api.http.post(TASKS, content=over, headers=JSON), 413, "payload_too_large")
    assert body["limit"] == limit
    assert str(limit) in body["detail"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(64):
            yield b" " * 1024

    chunked = await api.http.post(TASKS, content=chunks(), headers=JSON)
    check(chunked, 413, "payload_too_large")
    # Under the body limit but over DTQ_MAX_PAYLOAD_BYTES once encoded: the payload rule.
    payload = await api.http.post(TASKS, json={"task": "a", "args": ["x" * 2000]})
    assert "DTQ_MAX_PAYLOAD_BYTES=1024" in check(payload, 413, "payload_too_large")["detail"]
    assert await snapshot(sdk) == before


async def test_idempotency_keys_and_cursors_never_become_key_names(api: Any, sdk: Client) -> None:
    for key in ["x}:p5", "{q}", "k" * 256, "\u00e9\u00e8", "a b"]:
        r = await api.http.post(TASKS, json={"task": "t", "queue": "q", "idempotency_key": key})
        assert r.status_code == 201, r.text
    keys = [k async for k in sdk.redis.scan_iter(match="dtq:{q}:idem:*")]
    assert len(keys) == 5
    assert all(len(k.rpartition(":")[2]) == 64 for k in keys)  # SHA-256 hex
    for cursor in ["0-0 COUNT 1000000", "+", "-", "(0-0", "*"]:
        check(await api.http.get(TASKS, params={"cursor": cursor}), 422, "validation_error")
        r = await api.http.get("/api/v1/queues/q/dlq", params={"cursor": cursor})
        check(r, 422, "validation_error")


async def test_unmatched_routes_and_methods_are_problems(shared_api: Any) -> None:
    api = shared_api
    check(await api.http.get("/api/v1/nothing"), 404, "not_found")
    check(await api.http.get("/api/v2/tasks"), 404, "not_found")
    body = check(await api.http.put(TASKS), 405, "method_not_allowed")
    assert "PUT" in body["detail"]
    check(await api.http.request("TRACE", TASKS), 405, "method_not_allowed")


@pytest.mark.parametrize(
    "headers",
    [
        b"X-Big: " + b"a" * 100_000 + b"\r\n",
        b"".join(b"X-H%d: v\r\n" % i for i in range(500)),
        b"Cookie: " + b"c=" + b"x" * 1_000_000 + b"\r\n",
    ],
    ids=["100 KB header", "500 headers", "1 MB cookie"],
)
async def test_huge_or_many_headers_never_get_a_5xx_or_a_hang(
    shared_api: Any, headers: bytes
) -> None:
    """Catalogue C5 (docs/testing.md), straight to uvicorn (no nginx in front): a 4xx, a plain
    answer or a closed connection, within the deadline; never a 500."""
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n" + headers + b"Connection: close\r\n\r\n"
    started = time.monotonic()
    reply = await asyncio.to_thread(raw_http, shared_api.server.url, request, 5)
    assert time.monotonic() - started < 5
    if reply:
        status = int(reply.split(b" ", 2)[1])
        assert status < 500, reply[:200]
    assert (await shared_api.http.get("/health")).status_code == 200  # still serving


def split_reply(reply: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one raw HTTP/1.1 answer."""
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split(" ", 2)[1]), headers, body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /api/v1/queues x y HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /api/v1/\x01queues HTTP/1.1\r\nHost: x\r\n\r\n",
        b"G(T /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
        b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n",
    ],
    ids=["spaces", "control char", "method", "header name", "nul in value", "chunk", "version"],
)
async def test_a_request_uvicorn_cannot_parse_gets_a_problem(
    shared_api: Any, sdk: Client, request_bytes: bytes
) -> None:
    """docs/api.md promises problem+json for every error, the server's own included."""
    before = await snapshot(sdk)
    reply = await asyncio.to_thread(raw_http, shared_api.server.url, request_bytes, 5)
    status, headers, body = split_reply(reply)
    assert status == 400, reply[:300]
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    problem = json.loads(body)
    assert (problem["status"], problem["code"]) == (400, "bad_request")
    assert "not valid HTTP/1.1" in problem["detail"]
    assert problem["request_id"] == headers["x-request-id"]
    assert int(headers["content-length"]) == len(body)
    assert await snapshot(sdk) == before
    assert (await shared_api.http.get("/health")).status_code == 200  # still serving


async def test_past_the_concurrency_limit_the_503_is_a_problem(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """uvicorn's own 503 (limit_concurrency) speaks problem+json with Retry-After too: with a
    limit of one, the request's own connection is already the limit."""
    own = load_settings({}, redis_url=settings.redis.url, api_port=free_port())
    config = uvicorn.Config(create_app(own), **{**server_options(own), "limit_concurrency": 1})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        await wait_until(lambda: server.started, message="the API started")
        url = f"http://127.0.0.1:{own.api.port}"
        request = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        status, headers, body = split_reply(await asyncio.to_thread(raw_http, url, request, 5))
        assert status == 503
        assert headers["content-type"] == "application/problem+json"
        assert headers["retry-after"] == "1"
        problem = json.loads(body)
        assert (problem["code"], problem["retry_after_s"]) == ("overloaded", 1)
        assert problem["request_id"] == headers["x-request-id"]
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


def test_names_with_a_trailing_newline_fail_the_schema_itself() -> None:
    """Python's ``$`` matches before a final newline: the schema (and the OpenAPI document
    built from it) must refuse ``"ab\\n"`` on its own, not rely on the core check behind it."""
    with pytest.raises(ApiError) as exc:
        decode(b'{"task": "ab\\n", "queue": "mail"}', SubmitRequest)
    assert exc.value.code == "invalid_name"
    document = json.loads((ROOT / "docs" / "openapi.json").read_text())
    patterns = {
        str(s["pattern"])
        for s in _walk(document)
        if isinstance(s, dict) and "pattern" in s and "0,63" in str(s["pattern"])
    }
    assert patterns
    for pattern in patterns:
        assert re.search(pattern, "ab")
        assert not re.search(pattern, "ab\n"), pattern


def _walk(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from _walk(child)


DUPLICATES = [
    (b'{"task": "t", "queue": "a", "queue": "b"}', "/queue", "queue"),
    (b'{"task": "t", "kwargs": {"x": {"y": 1, "y": 2}}}', "/kwargs/x/y", "y"),
    (b'{"task": "t", "args": [1, {"a/b": 1, "a/b": 2}]}', "/args/1/a~1b", "a/b"),
]


@pytest.mark.parametrize(("raw", "pointer", "key"), DUPLICATES)
async def test_duplicate_keys_are_422_naming_the_key(
    shared_api: Any, sdk: Client, raw: bytes, pointer: str, key: str
) -> None:
    """msgspec keeps the last of two equal keys; a proxy in front may have read the first."""
    headers = {"Content-Type": "application/json"}
    r = await shared_api.http.post("/api/v1/tasks", content=raw, headers=headers)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["code"] == "duplicate_key"
    assert problem["errors"][0]["pointer"] == pointer
    assert problem["errors"][0]["field"] == key
    batch = b'{"tasks": [{"task": "ok"}, ' + raw + b"]}"
    r = await shared_api.http.post("/api/v1/tasks/batch", content=batch, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["pointer"] == "/tasks/1" + pointer
    assert await sdk.redis.keys("*") == []  # nothing written, the valid item neither


async def test_duplicate_keys_are_refused_on_every_json_route(shared_api: Any) -> None:
    headers = {"Content-Type": "application/json"}
    schedule = b'{"task": "t", "cron": "* * * * *", "cron": "0 * * * *"}'
    r = await shared_api.http.put("/api/v1/schedules/n", content=schedule, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "duplicate_key"
