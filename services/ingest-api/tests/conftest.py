"""Fixtures: the API served by uvicorn on a real socket (a thread of the test process, on a
free port, with its own settings) against the session's redis-server, and HTTP clients."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn

from dtq_core.client import Client
from dtq_core.infra.auth import new_key
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.names import make_task_id
from dtq_core.protocol.scripts import Claimed, Finish, Held
from dtq_devtools.testing import RedisServer, free_port, wait_until_sync
from dtq_devtools.testing.plugin import FAST
from dtq_devtools.testing.topologies import RedisClusterSet, SentinelSet
from dtq_ingest_api.app import create_app, server_options


@dataclass(frozen=True)
class Keys:
    """One secret per scope, and the DTQ_API_KEYS value that configures them."""

    read: str
    submit: str
    admin: str
    entries: str

    def header(self, scope: str) -> dict[str, str]:
        return {"X-API-Key": getattr(self, scope)}


def make_keys() -> Keys:
    secrets: dict[str, str] = {}
    entries: list[str] = []
    for name, scope in (("reader", "read"), ("producer", "submit"), ("operator", "admin")):
        secret, entry = new_key(name, scope)
        secrets[scope] = secret
        entries.append(entry)
    return Keys(entries=",".join(entries), **secrets)


KEYS = make_keys()


class ServerThread:
    """uvicorn serving one app in a thread of its own (its own event loop)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(self.app, **server_options(settings)))
        self.thread = threading.Thread(target=self.server.run, name="ingest-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.api.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        wait_until_sync(lambda: self.server.started or not self.thread.is_alive(), timeout=10)
        if not self.server.started:
            raise RuntimeError("the API did not start (see the log above)")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@dataclass
class Api:
    """A running API and an HTTP client for it (with the admin key unless told otherwise)."""

    server: ServerThread
    http: httpx.AsyncClient
    settings: Settings
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        c = httpx.AsyncClient(base_url=self.url, headers=headers or {}, timeout=90)
        self.clients.append(c)
        return c


ApiFactory = Callable[..., Api]


@pytest.fixture
async def api_factory(redis: aioredis.Redis, redis_url: str) -> AsyncIterator[ApiFactory]:
    """Start APIs with settings overrides (``open=True``: no keys). The database is flushed
    (by ``redis``) before any of them starts."""
    started: list[Api] = []

    def start(*, open: bool = False, **overrides: Any) -> Api:
        values: dict[str, Any] = {
            **FAST,
            "redis_url": redis_url,
            "api_port": free_port(),
            "api_keys": "" if open else KEYS.entries,
            **overrides,
        }
        settings = load_settings({}, **values)
        server = ServerThread(settings).start()
        headers = {} if open else KEYS.header("admin")
        http = httpx.AsyncClient(base_url=server.url, headers=headers, timeout=90)
        api = Api(server=server, http=http, settings=settings, clients=[http])
        started.append(api)
        return api

    yield start
    for api in started:
        for c in api.clients:
            await c.aclose()
        api.server.stop()


@pytest.fixture(scope="module")
def shared_server(
    redis_topology: RedisServer | RedisClusterSet | SentinelSet,
) -> Iterator[ServerThread]:
    """One keyed API for a whole module, for tests that only send requests and read answers
    (it outlives the per-test flush of the database, so its SDK caches may be stale)."""
    settings = load_settings(
        {}, **FAST, redis_url=redis_topology.url, api_port=free_port(), api_keys=KEYS.entries
    )
    server = ServerThread(settings).start()
    yield server
    server.stop()


@pytest.fixture
async def shared_api(shared_server: ServerThread, redis: aioredis.Redis) -> AsyncIterator[Api]:
    """:func:`shared_server` with a client of this test (the database flushed first)."""
    http = httpx.AsyncClient(base_url=shared_server.url, headers=KEYS.header("admin"), timeout=90)
    yield Api(server=shared_server, http=http, settings=shared_server.settings, clients=[http])
    await http.aclose()


@pytest.fixture
def api(api_factory: ApiFactory) -> Api:
    """The API with the three test keys; ``api.http`` sends the admin key."""
    return api_factory()


@pytest.fixture(scope="session")
def keys() -> Keys:
    return KEYS


@pytest.fixture(scope="session")
def server_thread() -> type[ServerThread]:
    """The server class, for fixtures that start their own (modules cannot import this file)."""
    return ServerThread


@pytest.fixture
async def sdk(client: Client) -> Client:
    """The SDK client on the same Redis (to arrange and check state behind the API)."""
    return client


ERROR = '{"attempt":1,"type":"ValueError","message":"boom","ts":"1740830400123456"}'
"""An error-history entry as a worker stores it (``ts``: microseconds since the epoch)."""


class ScriptWorker:
    """Claims and finishes tasks through the real Lua transitions, as a worker process does
    (no service is imported: a test of the API must not depend on the worker package)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def claim(self, queue: str, count: int = 100) -> list[Claimed]:
        paused, got = await self.client.scripts.claim(
            self.client.queue_keys(queue),
            consumer="test-worker",
            count=count,
            events_maxlen=1000,
            retention_ms=600_000,
        )
        assert not paused
        return got

    async def finish(
        self, queue: str, claimed: list[Claimed], outcome: str, result: str = ""
    ) -> list[str]:
        payload = ERROR if outcome in {"dead", "retry"} else result
        return await self.client.scripts.finish(
            self.client.queue_keys(queue),
            [
                Finish(Held(c.rand, c.priority, c.entry_id, c.lease), outcome, payload)
                for c in claimed
            ],
            events_maxlen=1000,
            result_retention_ms=60_000,
            retention_ms=600_000,
            dlq_enabled=True,
            dlq_maxlen=10_000,
        )

    async def kill(self, queue: str, count: int = 100) -> list[str]:
        """Claim up to ``count`` tasks and send them to the DLQ; their ids."""
        got = await self.claim(queue, count)
        assert set(await self.finish(queue, got, "dead")) <= {"dead"}
        return [make_task_id(queue, c.rand) for c in got]


@pytest.fixture
def worker(client: Client) -> ScriptWorker:
    return ScriptWorker(client)
