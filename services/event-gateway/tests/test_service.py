"""The gateway as a service: API keys, limits, keepalive, inbound messages, Redis outages,
replicas, health and metrics."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from structlog.testing import capture_logs

from dtq_core import Client
from dtq_core.errors import SettingsError
from dtq_core.infra.auth import new_key
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import load_settings
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import (
    RedisServer,
    free_port,
    metric_value,
    raw_http,
    wait_until,
    wait_until_sync,
)
from dtq_devtools.testing.processes import ServiceProcess, services

if TYPE_CHECKING:
    from conftest import Kit

TRANSPORTS = ["ws", "sse"]


def gateway_process(redis_url: str, log: Path, **env: str) -> tuple[ServiceProcess, str]:
    """``dtq-event-gateway`` as its own process, and its base URL."""
    port = free_port()
    proc = ServiceProcess(
        "dtq_event_gateway",
        [],
        {"DTQ_REDIS_URL": redis_url, "DTQ_GATEWAY_PORT": str(port), **env},
        log,
    )
    return proc, f"http://127.0.0.1:{port}"


def ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/ready", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_an_invalid_setting_stops_the_process_with_its_name() -> None:
    env = {**os.environ, "DTQ_GATEWAY_PORT": "http"}
    done = subprocess.run(
        [sys.executable, "-m", "dtq_event_gateway"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "DTQ_GATEWAY_PORT='http' is invalid" in done.stderr


@pytest.fixture(scope="module")
def keyed(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A gateway process with API keys: its URL, the secrets by scope, its log file."""
    made = {scope: new_key(f"k-{scope}", scope) for scope in ("read", "submit", "admin")}
    log = tmp_path_factory.mktemp("keyed") / "gateway.log"
    entries = ",".join(entry for _, entry in made.values())
    proc, base = gateway_process(redis_server.url, log, DTQ_API_KEYS=entries)
    with services(proc):
        wait_until_sync(lambda: ready(base), timeout=15, message="gateway ready")
        yield base, {scope: secret for scope, (secret, _) in made.items()}, log


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_api_keys_are_required_and_query_keys_stay_out_of_the_logs(
    transport: str, kit: Kit, keyed: tuple[str, dict[str, str], Path]
) -> None:
    base, secret, log = keyed
    refused = [
        ({}, {}, 401),
        ({"Authorization": "Bearer not-a-key"}, {}, 401),
        ({}, {"api_key": "not-a-key"}, 401),
        ({"X-API-Key": secret["submit"]}, {}, 403),  # a key without the read scope
    ]
    for headers, params, status in refused:
        with pytest.raises(kit.Refused) as exc:
            await kit.open(transport, base, headers=headers, **params)
        assert exc.value.status == status
        assert '"code":"' in exc.value.body  # problem+json, before any upgrade
    accepted = [
        ({"Authorization": f"Bearer {secret['read']}"}, {}),
        ({"X-API-Key": secret["admin"]}, {}),  # admin implies read
        ({}, {"api_key": secret["read"]}),  # browsers: the key in the query string
    ]
    for headers, params in accepted:
        stream = await kit.subscribed(transport, base, headers=headers, **params)
        await stream.close()
    text = log.read_text()
    assert "client_connected" in text
    if transport == "ws":
        assert '"WebSocket /ws/events' in text  # uvicorn logged the request line...
    for value in secret.values():
        assert value not in text  # ...without the key


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_browsers_on_foreign_origins_are_refused(transport: str, kit: Kit) -> None:
    """Cross-site WebSocket hijacking: a page elsewhere must not read the stream through a
    visitor's browser. Its own origin (the dashboard behind the same nginx, which passes the
    browser's Host and scheme), listed origins and clients without an Origin header are let in;
    a page on another port or scheme of the same host is another origin."""
    allowed = "https://ops.example.com, http://dash.example.com:8080/"
    run = await kit.gateway(kit.settings.with_overrides(gateway_allowed_origins=allowed))
    foreign = (
        "https://evil.example",
        "https://ops.example.com.evil.example",
        "null",
        "http://127.0.0.1:3000",  # another port of the same host
        f"https://127.0.0.1:{run.port}",  # another scheme
    )
    for origin in foreign:
        with pytest.raises(kit.Refused) as exc:
            await kit.open(transport, run.http, headers={"Origin": origin})
        assert exc.value.status == 403
        assert "forbidden_origin" in exc.value.body
    welcome = [
        None,
        "https://ops.example.com",
        "http://dash.example.com:8080",
        f"http://127.0.0.1:{run.port}",
    ]
    for origin in welcome:
        stream = await kit.subscribed(
            transport, run.http, headers={"Origin": origin} if origin else {}
        )
        await stream.close()
    assert run.refused("forbidden_origin") == len(foreign)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_refused_connections_are_logged_with_the_client_address(
    transport: str, kit: Kit
) -> None:
    run = await kit.gateway()
    with capture_logs() as logs, pytest.raises(kit.Refused):
        await kit.open(transport, run.http, headers={"Origin": "https://evil.example"})
    (line,) = [e for e in logs if e["event"] == "connection_refused"]
    assert (line["code"], line["client"], line["log_level"]) == (
        "forbidden_origin",
        "127.0.0.1",
        "warning",
    )
    assert line["origin"] == "https://evil.example"


_UPGRADE = (
    "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_dns_rebinding_hosts_are_not_served(transport: str, kit: Kit) -> None:
    """A page whose own name was re-pointed at the gateway is same-origin with it, but its
    browser sends that name as Host: only the gateway's names (and IP literals) are served,
    checked before the origin and the key."""
    run = await kit.gateway(kit.settings.with_overrides(allowed_hosts="dtq.example.com"))
    extra = _UPGRADE if transport == "ws" else "Connection: close\r\n"
    path = "/ws/events" if transport == "ws" else "/sse/events"

    async def status(host: str, origin: str) -> bytes:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n{extra}\r\n"
        answer = await asyncio.to_thread(raw_http, run.http, request.encode(), 2.0)
        return answer.split(b"\r\n", 1)[0]

    rebound = "rebind.attacker.example"
    first = await status(f"{rebound}:{run.port}", f"http://{rebound}:{run.port}")
    assert b" 421 " in first, first
    assert run.refused("host_not_allowed") == 1
    for host in ("dtq.example.com", "localhost", "10.1.2.3"):
        first = await status(f"{host}:{run.port}", f"http://{host}:{run.port}")
        assert b" 421 " not in first, (host, first)
        assert b" 403 " not in first, (host, first)


def test_allowed_origins_are_validated_at_start_up() -> None:
    with pytest.raises(SettingsError, match=r"DTQ_GATEWAY_ALLOWED_ORIGINS has 'ops\.example\.com'"):
        load_settings({"DTQ_GATEWAY_ALLOWED_ORIGINS": "https://a.example, ops.example.com"})
    assert load_settings({"DTQ_GATEWAY_ALLOWED_ORIGINS": "*"}).gateway.origins == ("*",)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_connections_beyond_the_limit_are_refused_with_503(transport: str, kit: Kit) -> None:
    run = await kit.gateway(max_clients=2)
    first = await kit.subscribed(transport, run.http)
    await kit.subscribed("ws", run.http)
    with pytest.raises(kit.Refused) as exc:
        await kit.open(transport, run.http)
    assert exc.value.status == 503
    assert "too_many_clients" in exc.value.body
    await first.close()
    await wait_until(lambda: run.gateway.clients == 1, message="slot released")
    await kit.subscribed(transport, run.http)
    assert run.refused("limit") == 1


async def test_websocket_inbound_pings_get_pongs_and_big_messages_close_1009(kit: Kit) -> None:
    run = await kit.gateway()
    stream = await kit.subscribed("ws", run.http)
    await stream.send('{"type": "ping"}')
    pong = await stream.next()
    assert pong["type"] == "pong"
    assert pong["cursor"] == stream.frames[0]["cursor"]  # a checkpoint of the position
    await stream.send("x" * 5000)
    with pytest.raises(kit.Closed) as exc:
        await stream.next()
    assert exc.value.code == 1009
    other = await kit.subscribed("ws", run.http)
    await other.send(b"\x00binary")
    with pytest.raises(kit.Closed) as exc:
        await other.next()
    assert exc.value.code == 1003


async def test_idle_sse_stream_gets_ping_comments(kit: Kit) -> None:
    await kit.redis.sadd(kit.keys.queues, "idle")
    run = await kit.gateway(sse_ping_s=0.05)
    stream = await kit.subscribed("sse", run.http)
    reading = asyncio.create_task(stream.next(timeout=10))  # counts the comments it skips
    await wait_until(lambda: stream.pings >= 3, message="three pings")
    ids = await kit.publish("idle", 1)
    frame = await reading
    assert frame["task_id"] == ids[0]


async def test_health_ready_and_metrics(kit: Kit) -> None:
    await kit.redis.sadd(kit.keys.queues, "m")
    run = await kit.gateway()
    stream = await kit.subscribed("ws", run.http)
    await kit.publish("m", 3)
    await kit.collect(stream, 3)
    async with httpx.AsyncClient(base_url=run.http) as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        assert (await http.get("/ready")).status_code == 200
        text = (await http.get("/metrics")).text
    for line in [
        'dtq_gateway_clients{transport="ws"} 1.0',
        'dtq_gateway_clients{transport="sse"} 0.0',
        'dtq_gateway_events_sent_total{transport="ws"} 3.0',
        "dtq_gateway_events_read_total 3.0",
        "dtq_gateway_event_delay_seconds_count 3.0",
        'dtq_gateway_gaps_total{reason="slow_consumer"} 0.0',
        "dtq_gateway_redis_errors_total 0.0",
    ]:
        assert line in text


@pytest.mark.slow
async def test_redis_outage_is_announced_and_clients_stay_connected(
    kit: Kit, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "own-redis")
    server.start()
    try:
        own = connect(server.url)
        await own.sadd(Keys().queues, "d")
        await own.aclose()
        run = await kit.gateway(load_settings({}, redis_url=server.url))
        clients = [await kit.subscribed(t, run.http, queue="d") for t in TRANSPORTS]
        server.stop()
        for c in clients:
            frame = await c.next(timeout=10)
            assert (frame["type"], frame["reason"]) == ("degraded", "redis_unavailable")
        async with httpx.AsyncClient(base_url=run.http) as http:
            assert (await http.get("/ready")).status_code == 503
            assert (await http.get("/health")).status_code == 200
        server.start()  # same port, same data (AOF)
        for c in clients:
            assert (await c.next(timeout=10))["type"] == "recovered"
        own = connect(server.url)
        await own.xadd(
            Keys().queue("d").events, {"type": "task.queued", "ids": "a" * 32, "tasks": "t"}
        )
        await own.aclose()
        for c in clients:  # the same connections deliver again
            (frame,) = await kit.collect(c, 1)
            assert frame["task_id"] == "d:" + "a" * 32
        assert metric_value(run.gateway.metrics.registry, "dtq_gateway_redis_errors_total") >= 1
    finally:
        server.stop()


@pytest.mark.slow
async def test_two_replicas_deliver_and_honour_each_others_cursors(
    kit: Kit, client: Client, redis_url: str, tmp_path: Path
) -> None:
    await kit.redis.sadd(kit.keys.queues, "rep")
    a, base_a = gateway_process(redis_url, tmp_path / "a.log")
    b, base_b = gateway_process(redis_url, tmp_path / "b.log")
    with services(a, b):
        for base in (base_a, base_b):
            await wait_until(lambda base=base: ready(base), timeout=15, message="replica ready")
        on_a = await kit.subscribed("ws", base_a)
        on_b = await kit.subscribed("sse", base_b)
        first = [h.id for h in await client.enqueue_many([{"task": "t", "queue": "rep"}] * 4)]  # type: ignore[union-attr]
        got_a = await kit.collect(on_a, 4)
        got_b = await kit.collect(on_b, 4)
        assert [f["task_id"] for f in got_a] == [f["task_id"] for f in got_b] == first
        await on_a.close()
        more = [h.id for h in await client.enqueue_many([{"task": "t", "queue": "rep"}] * 3)]  # type: ignore[union-attr]
        assert [f["task_id"] for f in await kit.collect(on_b, 3)] == more
        # Replica A's cursor, presented to replica B: exactly what A's client missed.
        moved = await kit.subscribed("sse", base_b, cursor=got_a[-1]["cursor"])
        assert [f["task_id"] for f in await kit.collect(moved, 3)] == more
        # SIGTERM ends open SSE streams at once instead of waiting out the grace period
        # (uvicorn re-raises the signal once it has shut down; a kill at the timeout is -9).
        assert b.stop(timeout=3) == -signal.SIGTERM
        with pytest.raises(kit.Closed):
            await moved.next()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_bad_request_is_refused_as_such_also_when_the_gateway_is_full(
    transport: str, kit: Kit
) -> None:
    """Both transports check in one order (docs/events.md): the request before admission."""
    run = await kit.gateway(max_clients=1)
    await kit.subscribed(transport, run.http)
    if transport == "sse":
        with pytest.raises(kit.Refused) as refused:
            await kit.open(transport, run.http, types="task.succeded")
        assert refused.value.status == 400
        assert '"bad_request"' in refused.value.body
    else:
        stream = await kit.open(transport, run.http, types="task.succeded")
        with pytest.raises(kit.Closed) as closed:
            await stream.next()
        assert closed.value.code == 1008
    assert run.refused("bad_request") == 1
    assert run.refused("limit") == 0
    assert run.gateway.clients == 1


@pytest.mark.parametrize(("transport", "code"), [("ws", 1012), ("sse", None)])
async def test_a_draining_gateway_ends_every_stream(
    transport: str, code: int | None, kit: Kit
) -> None:
    """SIGTERM: WebSockets close with 1012 (service restart), SSE streams end."""
    run = await kit.gateway()
    stream = await kit.subscribed(transport, run.http)
    with capture_logs() as logs:
        run.gateway.draining.set()
        with pytest.raises(kit.Closed) as closed:
            await stream.next()
        await wait_until(lambda: run.gateway.clients == 0, message="slot released")
    assert closed.value.code == code
    ends = [e for e in logs if e["event"] == "client_disconnected"]
    assert [(e["transport"], e["reason"]) for e in ends] == [(transport, "shutdown")]
