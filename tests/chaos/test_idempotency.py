"""Idempotency keys through the API, where they are meant to save a caller (C12).

- A key is remembered for ``DTQ_IDEM_TTL_S`` and no longer: reused after it, it makes a new
  task (the old one is untouched).
- 50 identical submits racing with one key make one task: one 201 and 49 × 200, all naming it.
- A submit whose reply was lost (the caller hung up before reading it), then Redis killed and
  restarted from its AOF: the resubmit with the same key returns the same task, 200.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from dtq_core.infra.connection import connect
from dtq_devtools.testing import RedisServer, free_port, wait_until
from dtq_devtools.testing.history import check_history
from dtq_devtools.testing.processes import FAST_ENV, ServiceProcess, services
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

IDEM_TTL_S = 1
RACERS = 50


def _api(url: str, port: int, log: Path) -> ServiceProcess:
    env = {**FAST_ENV, "DTQ_REDIS_URL": url, "DTQ_API_PORT": str(port)}
    return ServiceProcess("dtq_ingest_api", [], {**env, "DTQ_IDEM_TTL_S": str(IDEM_TTL_S)}, log)


async def _ready(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/ready", timeout=2)).status_code == 200
    except httpx.TransportError:
        return False


async def test_a_key_past_its_ttl_is_a_new_task_and_racing_submits_make_one(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    redis = connect(server.url)
    port = free_port()
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        with services(_api(server.url, port, tmp_path / "api.log")):
            await wait_until(lambda: _ready(http), timeout=30, interval=0.1)
            body = {"task": "noop", "idempotency_key": "reused"}
            first = await http.post("/api/v1/tasks", json=body)
            replay = await http.post("/api/v1/tasks", json=body)
            # The key expires with its TTL (Redis' own clock): then it names nothing.
            await wait_until(
                lambda: _no_idem_keys(redis), timeout=IDEM_TTL_S + 10, message="key expired"
            )
            reused = await http.post("/api/v1/tasks", json=body)

            race = {"task": "noop", "args": [1], "idempotency_key": "raced"}
            replies = await asyncio.gather(
                *(http.post("/api/v1/tasks", json=race) for _ in range(RACERS))
            )
        codes = Counter(r.status_code for r in replies)
        raced_ids = {r.json()["id"] for r in replies if r.status_code in (200, 201)}
        accepted = [first.json()["id"], reused.json()["id"], *raced_ids]
        check = await check_history(redis, accepted, settled={"queued"})
        faults.record(
            "C12 idempotency key past DTQ_IDEM_TTL_S; 50 racing identical submits",
            check,
            idem_ttl_s=IDEM_TTL_S,
            first=first.status_code,
            replay=replay.status_code,
            after_ttl=reused.status_code,
            racing_codes=dict(sorted(codes.items())),
            racing_tasks=len(raced_ids),
        )
        assert (first.status_code, replay.status_code) == (201, 200)
        assert replay.json()["id"] == first.json()["id"]
        assert reused.status_code == 201, reused.text
        assert reused.json()["id"] != first.json()["id"]
        assert codes == {201: 1, 200: RACERS - 1}, [r.text for r in replies][:3]
        assert len(raced_ids) == 1
        check.assert_clean()
        assert check.statuses["queued"] == 3
    finally:
        await http.aclose()
        await redis.aclose()
        server.stop()


async def test_a_resubmit_after_a_lost_reply_and_a_redis_restart_is_the_same_task(
    tmp_path: Path, faults: FaultFigures
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    redis = connect(server.url)
    port = free_port()
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30)
    body = {"task": "noop", "idempotency_key": "lost-reply"}
    try:
        with services(_api(server.url, port, tmp_path / "api.log")):
            await wait_until(lambda: _ready(http), timeout=30, interval=0.1)
            await asyncio.to_thread(_post_and_hang_up, port, body)
            # The write landed although nobody read the reply ...
            rand = await wait_until(lambda: _idem_task(redis), timeout=10, message="written")
            # ... and reached the AOF (everysec): the restart below replays it.
            await wait_until(
                lambda: _in_aof(tmp_path / "redis", rand), timeout=10, message="in the AOF"
            )
            await redis.aclose()
            server.kill()
            server.start()
            redis = connect(server.url)
            await wait_until(lambda: _ready(http), timeout=30, interval=0.1)
            again = await http.post("/api/v1/tasks", json=body)
        task_id = again.json().get("id", "")
        check = await check_history(redis, [task_id], settled={"queued"})
        faults.record(
            "C12/B1 resubmit after a lost reply across a Redis kill -9 and AOF restart",
            check,
            resubmit=again.status_code,
            same_task=task_id.endswith(rand),
        )
        assert again.status_code == 200, again.text
        assert task_id.endswith(rand), (task_id, rand)
        check.assert_clean()
        assert check.statuses["queued"] == 1
    finally:
        await http.aclose()
        await redis.aclose()
        server.stop()


def _post_and_hang_up(port: int, body: dict[str, str]) -> None:
    """Send one submit and close the connection without reading the reply (a lost reply)."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /api/v1/tasks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(head + payload)


async def _no_idem_keys(redis: aioredis.Redis) -> bool:
    return not [k async for k in redis.scan_iter(match="dtq:*:idem:*")]


async def _idem_task(redis: aioredis.Redis) -> str | None:
    """The task the one idempotency key names (its value is ``<fingerprint>|<rand>``)."""
    async for key in redis.scan_iter(match="dtq:*:idem:*"):
        value = await redis.get(key)
        return str(value).rsplit("|", 1)[-1] if value else None
    return None


def _in_aof(data_dir: Path, rand: str) -> bool:
    needle = rand.encode()
    return any(needle in f.read_bytes() for f in data_dir.rglob("*.aof*") if f.is_file())
