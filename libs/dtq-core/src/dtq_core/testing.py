"""A pytest plugin for testing your own tasks against the real thing, fast.

Load it from your ``conftest.py``::

    pytest_plugins = ["dtq_core.testing"]

and say which registry the worker runs (an ini option, or a fixture of your own)::

    # pytest.ini / pyproject.toml [tool.pytest.ini_options]
    dtq_registry = shop.tasks:registry

The fixtures, each prefixed ``dtq_`` so none collides with yours:

- ``dtq_redis_url``: a ``redis-server`` of the session's own (a free port, a data dir under
  pytest's temporary directory, no persistence), or the server ``DTQ_TEST_REDIS_URL`` names
  (it is flushed before every test: never point it at data you keep);
- ``dtq_settings``: :class:`~dtq_core.infra.settings.Settings` on that server (override the
  fixture to change them);
- ``dtq_redis``: a redis-py client on a flushed database;
- ``dtq_clock``: the test clock (:class:`TestClock`): ``await dtq_clock.advance(60)`` moves
  the time every dtq function reads, so delays, retry backoffs and schedule ticks come due
  without sleeping;
- ``dtq_client``: an SDK :class:`~dtq_core.Client`;
- ``dtq_registry``: the :class:`~dtq_core.TaskRegistry` the worker runs;
- ``dtq_worker``: a real worker running that registry in this process (:class:`TestWorker`);
  ``await dtq_worker.run_until_idle()`` returns once nothing is left to run now.

Loading the plugin turns the test clock on for the whole process: the function library is
built with the clock in it (another library, under another name, than production's), and
every Python read of Redis time adds the same offset (:mod:`dtq_core.infra.clock`). The
``dtq_worker`` fixture needs the ``dtq-worker`` and ``dtq-scheduler-leader`` packages (the
worker, and the leader's duties it runs between tasks).

See docs/testing-your-tasks.md.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import socket
import subprocess
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.infra.clock import test_clock_key, use_test_clock
from dtq_core.infra.cluster import time_of
from dtq_core.infra.connection import connect, time_us
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.names import PRIORITIES, logical_queue
from dtq_core.ops.admin import Admin
from dtq_core.protocol.keys import GROUP as WORKERS_GROUP
from dtq_core.protocol.keys import TEST_CLOCK
from dtq_core.tasks import TaskRegistry, load_registry

if TYPE_CHECKING:
    from dtq_scheduler_leader.scheduler import Scheduler
    from dtq_worker.worker import Worker

CLOCK_KEY = TEST_CLOCK
"""The key of the test clock's offset (microseconds added to Redis time)."""

URL_VARIABLE = "DTQ_TEST_REDIS_URL"

KIT_SETTINGS: dict[str, Any] = {
    "worker_metrics_port": 0,
    "scheduler_metrics_port": 0,
    "drain_timeout_s": 2.0,
}
"""What the kit's settings change from the defaults: no metrics listeners, and a short drain
when a test ends."""

POLL_S = 0.005


# -- the plugin's hooks ----------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "dtq_registry",
        "module:attribute of the TaskRegistry the dtq_worker fixture runs (dtq_core.testing)",
    )


def pytest_configure(config: pytest.Config) -> None:
    use_test_clock(CLOCK_KEY)


def pytest_unconfigure(config: pytest.Config) -> None:
    use_test_clock(None)


# -- the Redis server ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_args(
    binary: str, listen: list[str], data_dir: Path, *, appendonly: bool
) -> list[str]:
    """The command line of a test's ``redis-server``: on 127.0.0.1 only, in its own data dir,
    in the foreground, no RDB snapshots, the append-only file only when asked, and
    ``noeviction`` (dtq's requirement: docs/operations.md)."""
    return [
        binary,
        *listen,
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data_dir),
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--appendfsync",
        "everysec",
        "--maxmemory-policy",
        "noeviction",
        "--daemonize",
        "no",
        "--logfile",
        str(data_dir / "redis.log"),
    ]


class RedisProcess:
    """A ``redis-server`` of the test session's own: a free port, its own data dir, nothing
    persisted. Only the process it started is ever stopped."""

    def __init__(self, data_dir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "dtq_core.testing needs redis-server on the PATH (Debian and Ubuntu: "
                f"apt-get install -y redis-server), or {URL_VARIABLE} naming a server to use"
            )
        self.binary = binary
        self.data_dir = data_dir
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = redis_server_args(
            self.binary, ["--port", str(self.port)], self.data_dir, appendonly=False
        )
        self.proc = subprocess.Popen(  # noqa: S603 - redis-server from the PATH, our own arguments
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.data_dir / 'redis.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} in {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# -- the clock -------------------------------------------------------------------------------


class TestClock:
    """The time every dtq function and every Python read of Redis time sees: Redis's own
    clock plus an offset kept in Redis (:data:`CLOCK_KEY`), zero at the start of each test.

    Moving it makes delays, retry backoffs and schedule ticks come due, and the leases of a
    crashed worker expire (:meth:`TestWorker.crash`). It does not move what Redis itself
    times: key expiries (task retention, dedup and idempotency windows); nor a handler's own
    timeout, which the worker measures while the handler really runs; nor the wait of a worker
    for a rate limit's next start (it sleeps for the time the limit names).
    """

    __test__ = False  # not a test class, whatever its name

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def now_us(self) -> int:
        """Now, in microseconds since the epoch."""
        return time_us(await time_of(self.redis))

    async def now(self) -> datetime:
        """Now, as an aware UTC datetime."""
        return datetime.fromtimestamp(await self.now_us() / 1e6, UTC)

    async def offset_s(self) -> float:
        """How far the clock is ahead of Redis's own, in seconds."""
        return int(await self.redis.get(CLOCK_KEY) or 0) / 1e6

    async def advance(self, by: float | timedelta) -> datetime:
        """Move the clock forward by ``by`` (seconds, or a timedelta); returns the new now."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
        if seconds < 0:
            raise ValueError(f"the clock only moves forward, not by {seconds}s (use set())")
        await self.redis.incrby(CLOCK_KEY, round(seconds * 1e6))
        return await self.now()

    async def set(self, when: datetime) -> datetime:
        """Set the clock to ``when`` (an aware datetime; earlier than now is allowed, which
        nothing in production ever sees: use it before submitting, not between steps)."""
        if when.tzinfo is None:
            raise ValueError("give an aware datetime (tzinfo=UTC or a ZoneInfo)")
        real = time_us(await self.redis.time())
        await self.redis.set(CLOCK_KEY, round(when.timestamp() * 1e6) - real)
        return await self.now()


# -- the worker ------------------------------------------------------------------------------


class TestWorker:
    """A real worker running a registry in the test's event loop, and the scheduler leader's
    duties run on demand between its tasks: promoting what is due, firing schedules, and
    advancing workflows, child tasks and batches.

    ``await run_until_idle()`` is the usual step of a test: submit, run until idle, assert.
    """

    __test__ = False

    def __init__(
        self,
        settings: Settings,
        registry: TaskRegistry,
        client: Client,
        clock: TestClock,
        queues: list[str] | None = None,
    ) -> None:
        try:
            from dtq_scheduler_leader.scheduler import Scheduler  # noqa: PLC0415
            from dtq_worker.worker import Worker  # noqa: PLC0415
        except ImportError as exc:
            raise RuntimeError(
                "the dtq_worker fixture runs the real worker and the leader's duties: install "
                "dtq-worker and dtq-scheduler-leader in the test environment"
            ) from exc
        self.settings = settings
        self.registry = registry
        self.client = client
        self.clock = clock
        self.queues = queues or registry.queues or ["default"]
        self._worker_type = Worker
        self.scheduler: Scheduler = Scheduler(client.redis, settings, registry=registry)
        self.worker: Worker | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._admin = Admin(client)
        self._crashed_at_us: int | None = None
        self._crashed: set[str] = set()

    async def start(self) -> None:
        """Start the worker (the fixture does; after :meth:`stop` or :meth:`crash`, again)."""
        if self._task is not None:
            return
        self._stop = asyncio.Event()
        self.worker = self._worker_type(self.settings, self.registry, self.queues)
        self._task = asyncio.create_task(self.worker.run(self._stop), name="dtq-test-worker")
        deadline = time.monotonic() + 10
        while self.worker.state != "running":
            if self._task.done():
                self._task.result()  # its error, raised here
            if time.monotonic() > deadline:
                raise TimeoutError("the test worker did not start in 10 s")
            await asyncio.sleep(POLL_S)

    async def stop(self) -> None:
        """Stop the worker as a deploy does: it finishes what runs (DTQ_DRAIN_TIMEOUT_S)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        await task

    async def crash(self) -> None:
        """Stop the worker as ``kill -9`` would: its handlers are cancelled with no outcome
        recorded, nothing is handed back, and its leases are left to expire. They expire once
        the clock has moved the visibility timeout (DTQ_VISIBILITY_TIMEOUT_S) past the crash:
        the next :meth:`run_until_idle` then takes the attempts back (retried, or dead when
        their attempts are spent), as another worker's reclaim would, and starts a worker."""
        worker, task = self.worker, self._task
        self._task = None
        if worker is None or task is None:
            return
        if self._crashed_at_us is None:
            self._crashed_at_us = await self._offset_us()
        self._crashed.add(worker.consumer)
        task.cancel()
        handlers = worker.running.abandon("crash")
        await asyncio.gather(task, *handlers, return_exceptions=True)
        # The cancelled worker may not have reached its own closing: its connections close
        # here, in the test's loop, not in the garbage collector's after the loop has ended.
        for redis in (worker.ctx.redis, worker.ctx.blocking):
            await redis.aclose()
        _collect_quietly()

    async def _offset_us(self) -> int:
        return int(await self.client.redis.get(CLOCK_KEY) or 0)

    async def _reclaim_if_expired(self) -> int:
        """After :meth:`crash`: once the crashed worker's leases have expired on the test
        clock, take back every attempt it held (with no worker running, so that only its
        attempts are in the streams' pending lists); returns how many."""
        if self._crashed_at_us is None:
            return 0
        advanced_ms = (await self._offset_us() - self._crashed_at_us) / 1000
        if advanced_ms < self.settings.worker.visibility_timeout_s * 1000:
            return 0
        # A worker started since holds live leases: it hands back what it has not started
        # and finishes the rest first, so the reclaim below takes only the crashed ones'.
        await self.stop()
        self._crashed_at_us = None
        self._crashed.clear()
        s = self.settings
        scripts = self.scheduler.promoter.scripts
        taken = 0
        for queue in sorted(await self._stored_queues()):
            cursors = ["0-0"] * PRIORITIES
            while True:
                result = await scripts.reclaim(
                    self.client.keys.queue(queue),
                    consumer="dtq-test-reaper",
                    min_idle_ms=0,
                    budget=100,
                    events_maxlen=s.queues.events_maxlen,
                    retention_ms=s.tasks.retention_s * 1000,
                    dlq_enabled=s.queues.dlq_enabled,
                    dlq_maxlen=s.queues.dlq_maxlen,
                    cursors=cursors,
                )
                taken += result.requeued + result.buried
                cursors = result.cursors
                if all(c == "0-0" for c in cursors):
                    break
        return taken

    async def run_until_idle(self, *, timeout: float = 30.0, jump: bool = False) -> None:
        """Run until nothing is left to run now: no task ready or running in the worker's
        queues (a paused queue's are not counted), nothing due to promote, no schedule tick
        due, no workflow step, child or batch callback waiting to be submitted.

        Args:
            timeout: real seconds to wait before giving up (``TimeoutError`` says what is
                still busy).
            jump: also move the clock to each next due time of a delayed task or a retry,
                until none is left (schedules are never jumped to: they tick forever).
        """
        await self._reclaim_if_expired()
        if self._task is None:
            await self.start()
        deadline = time.monotonic() + timeout
        busy: str | None = "not looked at yet"
        while True:
            if self._task is not None and self._task.done():
                self._task.result()
            progress, next_due_ms = await self._lead()
            busy = await self._busy()
            if busy is None and progress == 0:
                if not jump or next_due_ms < 0:
                    return
                now_ms = await self.clock.now_us() // 1000
                if next_due_ms > now_ms:
                    await self.clock.advance((next_due_ms - now_ms) / 1000)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"not idle after {timeout}s: {busy or 'the leader has work'}")
            if busy is not None:
                await asyncio.sleep(POLL_S)

    async def _lead(self) -> tuple[int, int]:
        """One pass of the leader's duties; returns what it moved and the next due time of a
        delayed task (ms, -1 when none)."""
        sched = self.scheduler
        lead = sched.leadership
        await (lead.renew() if lead.token else lead.try_acquire())
        if not lead.is_leader:
            raise RuntimeError(
                "the test worker could not lead: another scheduler holds the leader lease "
                "of this database"
            )
        progress = 0
        next_due = -1
        for queue in sorted(await self._stored_queues()):
            promoted, due = await sched.promoter.promote_queue(queue)
            progress += promoted
            if due >= 0 and (next_due < 0 or due < next_due):
                next_due = due
        progress += await self._fire_schedules()
        progress += await self._drive_workflows()
        return progress, next_due

    async def _stored_queues(self) -> set[str]:
        return {str(q) for q in await self.client.redis.smembers(self.client.keys.queues)}

    async def _fire_schedules(self) -> int:
        """Fire the schedules' due ticks; returns how many watermarks moved."""
        store = self.scheduler.store
        before = await store.watermarks()
        await self.scheduler.firer.fire_due()
        after = await store.watermarks()
        return sum(1 for name, mark in after.items() if before.get(name) != mark)

    async def _drive_workflows(self) -> int:
        workflows = self.client.workflows
        redis = self.client.redis
        handled = 0
        pending = [str(m) for m in await redis.zrange(self.client.keys.workflows_pending, 0, -1)]
        if pending:
            await workflows.kick(pending)
            handled += len(pending)
        for queue in sorted(await self._stored_queues()):
            handled += await workflows.drain(queue)
        return handled

    async def _busy(self) -> str | None:
        """What still runs or waits to run now, or ``None``."""
        worker = self.worker
        if worker is not None and (worker.running.running or worker.running.prefetched):
            return f"{worker.running.running} running in the worker"
        held_by_crashed = await self._held_by_crashed()
        for q in await self._admin.queues():
            if q.paused:
                continue
            in_flight = q.in_flight - held_by_crashed.get(q.name, 0)
            if q.depth or in_flight:
                return f"queue {q.name}: {q.depth} ready, {in_flight} in flight"
        return None

    async def _held_by_crashed(self) -> dict[str, int]:
        """Attempts the crashed workers still hold, by queue: they wait for their leases to
        expire, which only the clock brings (so they do not keep the worker busy)."""
        if not self._crashed:
            return {}
        held: dict[str, int] = {}
        for stored in await self._stored_queues():
            qk = self.client.keys.queue(stored)
            async with self.client.redis.pipeline(transaction=False) as pipe:
                for stream in qk.streams:
                    await pipe.xinfo_consumers(stream, WORKERS_GROUP)
                replies = await pipe.execute(raise_on_error=False)
            count = sum(
                int(c["pending"])
                for reply in replies
                if isinstance(reply, list)
                for c in reply
                if c["name"] in self._crashed
            )
            name = logical_queue(stored)
            held[name] = held.get(name, 0) + count
        return held


def _collect_quietly() -> None:
    """Collect what a crashed worker left (a connection cancelled mid-connect, which only the
    garbage collector finds) while the test's loop runs, so it is closed here; its
    ResourceWarning is the crash's doing, not a failure of the test that happens to be running
    when the collector would otherwise have found it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


# -- the fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dtq_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the session's Redis: ``DTQ_TEST_REDIS_URL``, else a redis-server started
    for the session."""
    if test_clock_key() is None:
        use_test_clock(CLOCK_KEY)
    url = os.environ.get(URL_VARIABLE)
    if url:
        yield url
        return
    server = RedisProcess(Path(tmp_path_factory.mktemp("dtq-redis")))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def dtq_settings(dtq_redis_url: str) -> Settings:
    """Settings on the session's Redis (the defaults, but for :data:`KIT_SETTINGS`)."""
    return load_settings({}, redis_url=dtq_redis_url, **KIT_SETTINGS)


@pytest_asyncio.fixture
async def dtq_redis(dtq_settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A client on a flushed database (and so a clock back at Redis's own time)."""
    redis = connect(dtq_settings)
    await redis.flushdb()
    try:
        yield redis
    finally:
        await redis.aclose()


@pytest_asyncio.fixture
async def dtq_clock(dtq_redis: aioredis.Redis) -> TestClock:
    return TestClock(dtq_redis)


@pytest_asyncio.fixture
async def dtq_client(dtq_redis: aioredis.Redis, dtq_settings: Settings) -> AsyncIterator[Client]:
    client = Client(dtq_redis, dtq_settings)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def dtq_registry(request: pytest.FixtureRequest) -> TaskRegistry:
    """The registry of the ``dtq_registry`` ini option; override the fixture to choose
    another per module or per test."""
    path = request.config.getini("dtq_registry")
    if not path:
        raise pytest.UsageError(
            "dtq_core.testing: set the dtq_registry ini option (dtq_registry = "
            "package.module:registry) or define a dtq_registry fixture returning your "
            "TaskRegistry"
        )
    return load_registry(str(path))


@pytest_asyncio.fixture
async def dtq_worker(
    dtq_settings: Settings,
    dtq_registry: TaskRegistry,
    dtq_client: Client,
    dtq_clock: TestClock,
) -> AsyncIterator[TestWorker]:
    """A real worker running ``dtq_registry`` on the registry's queues, started and leading
    (override the fixture to choose the queues: ``TestWorker(..., queues=[...])``)."""
    worker = TestWorker(dtq_settings, dtq_registry, dtq_client, dtq_clock)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()
        await worker.scheduler.leadership.release()
        # A worker cancelled mid-connect (crash(), as kill -9) can leave a socket only the
        # garbage collector finds: collected now, in this loop, it is closed here, and its
        # ResourceWarning (the crash's doing, not the test's) is not a failure of a later test.
        _collect_quietly()
