"""What a web page can make a visitor's browser do to the API (docs/security.md): in open mode
a foreign page must not change anything, and a DNS-rebinding name must not be served at all.
Browsers' headers are sent by hand through the real server socket."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from dtq_core.client import Client
from dtq_core.errors import SettingsError
from dtq_core.infra.settings import load_settings

FOREIGN = ("https://evil.example", "null", "http://127.0.0.1:1")


async def _queue(api: Any) -> str:
    created = await api.http.post("/api/v1/tasks", json={"task": "t", "queue": "mail"})
    assert created.status_code == 201, created.text
    return "mail"


async def _paused(api: Any) -> bool:
    answer = await api.http.get("/api/v1/queues/mail")
    return bool(answer.json()["paused"])


@pytest.mark.parametrize("origin", FOREIGN)
async def test_foreign_pages_cannot_pause_a_queue_in_open_mode(
    api_factory: Any, sdk: Client, origin: str
) -> None:
    """A body-less POST is a CORS simple request: a page elsewhere sends it with no-cors.
    Another port of the same host is another origin too."""
    api = api_factory(open=True)
    queue = await _queue(api)
    answer = await api.http.post(f"/api/v1/queues/{queue}/pause", headers={"Origin": origin})
    assert answer.status_code == 403, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "forbidden_origin"
    assert not await _paused(api)


async def test_cross_site_fetch_metadata_is_refused_without_an_origin(
    api_factory: Any, sdk: Client
) -> None:
    api = api_factory(open=True)
    queue = await _queue(api)
    for method, path in (
        ("POST", f"/api/v1/queues/{queue}/pause"),
        ("DELETE", f"/api/v1/queues/{queue}/tasks"),
        ("PUT", "/api/v1/schedules/nightly"),
    ):
        answer = await api.http.request(method, path, headers={"Sec-Fetch-Site": "cross-site"})
        assert answer.status_code == 403, (method, answer.text)
        assert answer.json()["code"] == "forbidden_origin"
    assert not await _paused(api)
    assert (await api.http.get("/api/v1/schedules/nightly")).status_code == 404


async def test_the_apis_own_origin_and_non_browsers_may_write(
    api_factory: Any, sdk: Client
) -> None:
    api = api_factory(open=True)
    queue = await _queue(api)
    port = api.settings.api.port
    welcome: list[dict[str, str]] = [
        {},  # not a browser
        {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
        {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"},
        # behind a TLS proxy on 443 (nginx passes the browser's Host and scheme)
        {"Origin": "https://localhost", "Host": "localhost", "X-Forwarded-Proto": "https"},
    ]
    for headers in welcome:
        answer = await api.http.post(f"/api/v1/queues/{queue}/pause", headers=headers)
        assert answer.status_code == 200, (headers, answer.text)
        answer = await api.http.post(f"/api/v1/queues/{queue}/resume", headers=headers)
        assert answer.status_code == 200, (headers, answer.text)
    # Reads need no check: without CORS headers a foreign page cannot read the answer.
    read = await api.http.get("/api/v1/queues", headers={"Origin": "https://evil.example"})
    assert read.status_code == 200


async def test_a_dns_rebinding_host_is_not_served(api_factory: Any, sdk: Client) -> None:
    api = api_factory(open=True, allowed_hosts="dtq.example.com")
    rebound = {"Host": "rebind.attacker.example"}
    for method, path in (("GET", "/api/v1/queues"), ("POST", "/api/v1/tasks"), ("GET", "/ready")):
        answer = await api.http.request(method, path, headers=rebound, json={"task": "t"})
        assert answer.status_code == 421, (path, answer.text)
        assert answer.json()["code"] == "host_not_allowed"
    assert await sdk.redis.keys("*") == []  # nothing half-written
    port = api.settings.api.port
    for host in ("localhost", "127.0.0.1", "[::1]", "10.1.2.3", "ingest-api", "DTQ.example.com"):
        answer = await api.http.get("/api/v1/queues", headers={"Host": f"{host}:{port}"})
        assert answer.status_code == 200, (host, answer.text)


async def test_keyed_mode_refuses_foreign_origins_before_the_key(api: Any, sdk: Client) -> None:
    """A visitor's browser may hold a key (a dashboard session): the origin still decides."""
    await _queue(api)
    answer = await api.http.post(
        "/api/v1/queues/mail/pause", headers={"Origin": "https://evil.example"}
    )
    assert answer.status_code == 403
    assert answer.json()["code"] == "forbidden_origin"
    assert not await _paused(api)


def _failures(api: Any, reason: str) -> float:
    registry = api.server.app.state.metrics.registry
    return registry.get_sample_value("dtq_auth_failures_total", {"reason": reason}) or 0.0


async def test_refused_attempts_are_logged_with_the_client_address_and_counted(
    api_factory: Any, keys: Any
) -> None:
    """X-Forwarded-For names the client only when the peer is a trusted proxy (127.0.0.1 and
    ::1 by default: nginx of `just up`); refusals go to the log and the metric."""
    trusting = api_factory()
    wary = api_factory(api_trusted_proxies="10.9.9.9")
    forwarded = {"X-Forwarded-For": "203.0.113.9"}
    with capture_logs() as logs:
        await trusting.client().get("/api/v1/queues", headers=forwarded)  # no key
        await wary.client().get("/api/v1/queues", headers=forwarded)
        await trusting.client(keys.header("read")).post(
            "/api/v1/queues/mail/pause", headers=forwarded
        )  # lacks the scope
        await trusting.client().post(
            "/api/v1/queues/mail/pause", headers={"Origin": "https://evil.example", **forwarded}
        )
        await trusting.client().get("/api/v1/queues", headers={"Host": "rebind.attacker.example"})
    refused = [e for e in logs if e["event"] in {"auth_refused", "request_refused"}]
    assert [(e["reason"], e["client"]) for e in refused] == [
        ("missing", "203.0.113.9"),
        ("missing", "127.0.0.1"),  # an untrusted peer's X-Forwarded-For is ignored
        ("scope", "203.0.113.9"),
        ("origin", "203.0.113.9"),
        ("host", "127.0.0.1"),
    ]
    assert refused[3]["origin"] == "https://evil.example"
    assert all(e["log_level"] == "warning" for e in refused)
    for reason, count in (("missing", 1), ("scope", 1), ("origin", 1), ("host", 1)):
        assert _failures(trusting, reason) == count, reason


def test_trusted_proxies_are_validated_at_start_up() -> None:
    with pytest.raises(SettingsError, match="DTQ_API_TRUSTED_PROXIES has 'nginx'"):
        load_settings({"DTQ_API_TRUSTED_PROXIES": "127.0.0.1, nginx"})
    assert load_settings({"DTQ_API_TRUSTED_PROXIES": "172.16.0.0/12,*"})
