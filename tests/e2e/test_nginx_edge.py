"""The dashboard's nginx as the edge (docs/security.md "nginx edge", through the repo's config):
body and header limits, path traversal and odd methods, security headers, rate limits, every
refusal of its own as problem+json, and nothing written to Redis by a refused request."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import httpx
import pytest

from dtq_devtools.testing import raw_http
from tests.e2e.conftest import Stack


def raw(stack: Stack, request: bytes) -> tuple[int, bytes]:
    """The status and body of ``request`` sent as written."""
    head, _, body = raw_http(stack.url, request).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture
def edge(stack: Stack) -> httpx.Client:
    with httpx.Client(
        base_url=stack.url, headers={"X-API-Key": stack.keys["admin"]}, timeout=10
    ) as client:
        yield client


def dtq_keys(stack: Stack) -> set[str]:
    return set(stack.redis.scan_iter("dtq:*"))


def assert_security_headers(r: httpx.Response) -> None:
    """The headers of security-headers.conf, on every answer of the edge."""
    csp = {
        d.strip().split(" ", 1)[0]: d.strip()
        for d in r.headers["content-security-policy"].split(";")
    }
    assert csp["default-src"] == "default-src 'self'"
    assert csp["frame-ancestors"] == "frame-ancestors 'none'"
    # 'self' alone: the dashboard's WebSocket is same-origin; ws:/wss: would allow any host.
    assert csp["connect-src"] == "connect-src 'self'"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"


def test_security_headers_on_the_app_and_the_api(edge: httpx.Client) -> None:
    for path in ("/", "/tasks", "/api/v1/queues"):
        r = edge.get(path)
        assert r.status_code == 200, path
        assert_security_headers(r)
        assert r.headers["server"] == "nginx"  # no version


def test_bodies_over_the_edge_limit_are_413_problems_and_write_nothing(
    edge: httpx.Client, stack: Stack
) -> None:
    before = dtq_keys(stack)
    big = {"task": "noop", "args": ["x" * 400_000]}
    r = edge.post("/api/v1/tasks", json=big)
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "payload_too_large"
    assert_security_headers(r)
    # The same without a Content-Length (chunked): refused as well.
    chunked = edge.post(
        "/api/v1/tasks",
        content=iter([json.dumps(big).encode()]),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    assert dtq_keys(stack) == before
    # A batch may be larger than a single request, up to the API's own limit.
    batch = {"tasks": [{"task": "noop", "args": ["y" * 1000]} for _ in range(400)]}
    assert len(json.dumps(batch)) > 300_000
    r = edge.post("/api/v1/tasks/batch", json=batch)
    assert r.status_code == 200, r.text
    assert [item["status"] for item in r.json()["results"]] == [201] * 400


def test_oversized_headers_are_refused_at_the_edge(stack: Stack) -> None:
    huge = b"GET /api/v1/queues HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    status, _ = raw(stack, huge)
    assert status in (400, 431)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(500))
    status, _ = raw(stack, b"GET / HTTP/1.1\r\nHost: x\r\n" + many + b"Connection: close\r\n\r\n")
    assert status in (200, 400, 431)  # never a 5xx or a hang


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET /api/v1/queues x y HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request"),
        (b"GET /api/v1/\x01queues HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request"),
        (b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request"),
        (b"GET /api/v1/queues HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n", 400, "bad_request"),
        (
            b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
            "bad_request",
        ),
        (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
            431,
            "headers_too_large",
        ),
        (b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
    ],
    ids=["spaces", "control char", "method", "header", "chunk", "long uri", "big header", "ver"],
)
def test_requests_nginx_cannot_parse_get_problems(
    stack: Stack, request_bytes: bytes, status: int, code: str
) -> None:
    """The edge's parser refusals (before any location is chosen) are problem+json too."""
    reply = raw_http(stack.url, request_bytes)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert int(head.split(b" ", 2)[1]) == status, reply[:300]
    assert b"content-type: application/problem+json" in head.lower()
    problem = json.loads(body)
    assert (problem["status"], problem["code"]) == (status, code)


@pytest.mark.parametrize(
    "path",
    [
        "/../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/assets/../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/etc/passwd",
        "//etc/passwd",
        "/assets/",
    ],
)
def test_paths_never_leave_the_app_root(stack: Stack, path: str) -> None:
    status, body = raw(
        stack, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    assert b"root:" not in body
    assert b"Index of" not in body  # no directory listing
    assert status in (200, 400, 403, 404)
    if status == 200:
        assert b'<div id="root">' in body  # the app shell, nothing else


@pytest.mark.parametrize("method", ["TRACE", "PROPFIND", "DELETE"])
def test_odd_methods_get_a_4xx(stack: Stack, method: str) -> None:
    status, _ = raw(stack, f"{method} / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert 400 <= status < 500


async def test_open_api_connections_per_address_are_capped(stack: Stack) -> None:
    """80 long-polls at once from one address, within the API's own caps (50 per key, two
    keys): nginx lets 60 through and answers the rest 429 too_many_connections at once."""
    task_id = stack.submit("noop", delay_s=3600)  # ends long after the test
    url = f"/api/v1/tasks/{task_id}/result"
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=stack.url, timeout=30, limits=limits) as client:
        answers = await asyncio.gather(
            *(
                client.get(
                    url,
                    params={"wait": 5},
                    headers={"X-API-Key": stack.keys["read" if i < 50 else "admin"]},
                )
                for i in range(80)
            )
        )
    codes = Counter(
        r.json().get("code") if r.status_code == 429 else r.status_code for r in answers
    )
    print("80 long-polls from one address:", dict(codes))
    assert codes["too_many_connections"] >= 20, codes
    assert codes[202] <= 60, codes
    assert set(codes) <= {202, "too_many_connections"}, codes
    refused = next(r for r in answers if r.status_code == 429)
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["retry-after"] == "1"


def test_a_flood_is_rate_limited_with_a_429_problem(stack: Stack) -> None:
    """Past 30 requests a second (bursts of 120) one address gets 429 problem+json with
    Retry-After; the API behind it never sees those requests."""
    statuses: list[int] = []
    limited: httpx.Response | None = None
    with httpx.Client(base_url=stack.url, timeout=10) as client:
        for _ in range(400):
            r = client.get("/api/v1/auth/whoami")
            statuses.append(r.status_code)
            if r.status_code == 429:
                limited = r
                break
    assert limited is not None, f"no 429 in {len(statuses)} requests"
    assert len(statuses) > 100  # the burst was served first
    assert limited.headers["content-type"] == "application/problem+json"
    assert limited.headers["retry-after"] == "1"
    assert limited.json()["code"] == "rate_limited"
    assert_security_headers(limited)  # an add_header of its own must not drop them
    assert set(statuses[:-1]) == {200}
