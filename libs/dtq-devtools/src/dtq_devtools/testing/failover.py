"""Load for failover tests: producers that submit one task after another and say when each
submit was acknowledged, so a test can measure the gap a failover leaves (kill to the first
acknowledged submit) and hand the acknowledged ids to the history checker.

A producer retries a refused submit with the same idempotency key, as a client that follows
the API's advice does (a 503 may hide a written task; the key makes the retry safe), so every
task that exists was acknowledged once, under one id, and the checker's ``unexpected`` stays
empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from dtq_core.client import Client
from dtq_core.errors import NotReplicatedError
from dtq_core.infra.connection import RETRYABLE, connect
from dtq_devtools.testing import RedisServer, free_port, wait_until
from dtq_devtools.testing.history import Check, check_history, settle
from dtq_devtools.testing.processes import (
    FAST_ENV,
    ServiceProcess,
    scheduler_process,
    services,
    worker_process,
)
from dtq_devtools.testing.topologies import RedisClusterSet, SentinelSet

Submit = Callable[[str], Awaitable[str]]
"""Submit one task under an idempotency key; returns its id or raises when refused."""


class RefusedError(Exception):
    """The API answered 503: not acknowledged, try again. ``code`` is the problem's code
    (``redis_unavailable``, ``redis_not_replicated``)."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.code = code


REFUSED: tuple[type[BaseException], ...] = (*RETRYABLE, httpx.TransportError, RefusedError)
"""What a producer treats as "not acknowledged, try again": Redis or the API did not answer."""

PAUSE_S = 0.005
"""Between two submits of one producer: a steady load that leaves the two cores of CI to the
services under test."""
RETRY_S = 0.02
"""Between a refused submit and its retry: the resolution of the measured gap."""

NOT_REPLICATED = "not_replicated"
"""A refusal because too few replicas confirmed the write (``DTQ_REDIS_WAIT_REPLICAS``)."""
UNAVAILABLE = "unavailable"
"""Any other refusal: Redis or the API did not answer, or no master was known."""


def refusal_cause(exc: BaseException) -> str:
    """:data:`NOT_REPLICATED` or :data:`UNAVAILABLE`, for an exception of :data:`REFUSED`."""
    if isinstance(exc, NotReplicatedError) or (
        isinstance(exc, RefusedError) and exc.code == NotReplicatedError.code
    ):
        return NOT_REPLICATED
    return UNAVAILABLE


@dataclass
class Submits:
    """What one producer's submits got: each acknowledged id with the times (monotonic) its
    last try was sent and acknowledged, and how many tries were refused, by cause
    (:func:`refusal_cause`)."""

    name: str
    acked: list[tuple[float, float, str]] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)

    @property
    def refused(self) -> int:
        return self.refusals.total()

    @property
    def ids(self) -> list[str]:
        return [task_id for _, _, task_id in self.acked]

    def gap_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` to the first acknowledgement of a try sent after it (None:
        none yet). A reply that was on its way at ``moment`` does not count: only a try sent
        after a kill says the failover is over."""
        return next((at - moment for sent, at, _ in self.acked if sent >= moment), None)

    def acked_between(self, start: float, end: float) -> int:
        return sum(1 for _, at, _ in self.acked if start <= at <= end)

    def acked_at(self, task_ids: Iterable[str]) -> list[float]:
        """When each of ``task_ids`` (those of this producer) was acknowledged."""
        wanted = set(task_ids)
        return [at for _, at, task_id in self.acked if task_id in wanted]


class Producer:
    """Submits through ``submit`` until stopped (see the module docstring)."""

    def __init__(self, name: str, submit: Submit) -> None:
        self.submits = Submits(name)
        self._submit = submit
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Producer:
        self._task = asyncio.create_task(self._run(), name=f"producer-{self.submits.name}")
        return self

    async def stop(self, timeout: float = 15.0) -> Submits:
        """Stop after the submit under way is acknowledged (a refused one may have been
        written, so it is retried to the end), or after ``timeout`` s."""
        self._stop.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._task.cancel()
        return self.submits

    async def _run(self) -> None:
        n = 0
        while True:
            sent = time.monotonic()
            try:
                task_id = await self._submit(f"{self.submits.name}-{n}")
            except REFUSED as exc:
                self.submits.refusals[refusal_cause(exc)] += 1
                await asyncio.sleep(RETRY_S)
                continue
            self.submits.acked.append((sent, time.monotonic(), task_id))
            n += 1
            if self._stop.is_set():
                return
            await self._pause(PAUSE_S)

    async def _pause(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._stop.wait()
        except TimeoutError:
            pass

    async def first_ack_after(self, moment: float, timeout: float) -> float | None:
        """Wait until a submit is acknowledged after ``moment`` (at most ``timeout`` s);
        the gap in seconds, or None."""
        with contextlib.suppress(TimeoutError):
            await wait_until(
                lambda: self.submits.gap_after(moment) is not None, timeout, interval=RETRY_S
            )
        return self.submits.gap_after(moment)


def sdk_submit(client: Client, task: str, queue: str, *, delay_s: float | None = None) -> Submit:
    """Submits of ``task`` into ``queue`` through the Python SDK (``delay_s``: delayed ones,
    which the scheduler promotes)."""

    async def submit(key: str) -> str:
        handle = await client.enqueue(
            task, args=[key], queue=queue, idempotency_key=key, delay_s=delay_s
        )
        return handle.id

    return submit


def rest_submit(http: httpx.AsyncClient, task: str, queue: str) -> Submit:
    """Submits of ``task`` into ``queue`` through the REST API; a 503 is a refusal."""

    async def submit(key: str) -> str:
        r = await http.post(
            "/api/v1/tasks",
            json={"task": task, "queue": queue, "args": [key], "idempotency_key": key},
        )
        if r.status_code == 503:
            raise RefusedError(_problem_code(r), r.text[:200])
        r.raise_for_status()
        return str(r.json()["id"])

    return submit


def _problem_code(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return ""
    return str(body.get("code", "")) if isinstance(body, dict) else ""


@dataclass
class Stack:
    """The services of a failover test, as processes: workers, a scheduler and the API."""

    api_url: str
    workers: list[ServiceProcess]
    schedulers: list[ServiceProcess]
    api: ServiceProcess

    @property
    def processes(self) -> list[ServiceProcess]:
        return [*self.workers, *self.schedulers, self.api]

    def restarted(self, pids: Mapping[str, int]) -> list[str]:
        """The processes that died or are no longer the ones of ``pids`` (see :meth:`pids`)."""
        now = self.pids()
        return [name for name, pid in pids.items() if now.get(name) != pid]

    def pids(self) -> dict[str, int]:
        """Each live process's pid, by its log's name."""
        return {p.log_path.stem: p.pid for p in self.processes if p.alive()}

    async def ready(self, timeout: float = 60.0) -> None:
        """Until the API answers ``/ready`` with 200."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.api_url, timeout=2) as http:
            while time.monotonic() < deadline:
                try:
                    if (await http.get("/ready")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"the API was not ready within {timeout} s:\n{self.api.log()[-3000:]}")


@contextmanager
def service_stack(
    redis_url: str,
    folder: Path,
    *,
    queues: str,
    side_url: str,
    workers: int = 2,
    concurrency: int = 8,
    schedulers: int = 1,
    env: Mapping[str, str] | None = None,
) -> Iterator[Stack]:
    """Start ``workers`` workers of ``queues``, ``schedulers`` schedulers and the API on
    ``redis_url``
    (handlers record their executions in ``side_url``); stop them all on the way out."""
    extra = {"DTQTEST_SIDE_URL": side_url, **(env or {})}
    port = free_port()
    stack = Stack(
        api_url=f"http://127.0.0.1:{port}",
        workers=[
            worker_process(
                redis_url,
                folder / f"worker{i}.log",
                queues=queues,
                concurrency=concurrency,
                env=extra,
            )
            for i in range(workers)
        ],
        schedulers=[
            scheduler_process(redis_url, folder / f"scheduler{i}.log", env=extra)
            for i in range(schedulers)
        ],
        api=ServiceProcess(
            "dtq_ingest_api",
            [],
            {**FAST_ENV, "DTQ_REDIS_URL": redis_url, "DTQ_API_PORT": str(port), **extra},
            folder / "api.log",
        ),
    )
    with services(*stack.processes):
        yield stack


class Topology:
    """A Redis Cluster (3 masters, 3 replicas, node timeout 2000 ms) or a Sentinel set (a
    master, a replica, 3 sentinels, down-after 1000 ms) for a failover test."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.made: RedisClusterSet | SentinelSet = (
            RedisClusterSet(folder, replicas=1, node_timeout_ms=2000)
            if kind == "cluster"
            else SentinelSet(folder, replicas=1, down_after_ms=1000)
        )

    @property
    def url(self) -> str:
        return self.made.url

    def master_of(self, key: str) -> RedisServer:
        """The node that serves ``key`` now."""
        if isinstance(self.made, RedisClusterSet):
            return self.made.master_of(key)
        return self.made.current_master()

    def replicated(self, key: str, timeout_ms: int = 5000) -> bool:
        """Whether everything the master of ``key`` holds reached its replica (``WAIT``)."""
        master = self.master_of(key)
        with redis.Redis(port=master.port, socket_timeout=timeout_ms / 1000 + 2) as r:
            return int(r.execute_command("WAIT", 1, timeout_ms)) >= 1


@contextmanager
def topology(kind: str, folder: Path) -> Iterator[Topology]:
    """A started :class:`Topology`, stopped on the way out."""
    made = Topology(kind, folder)
    made.made.start()
    try:
        yield made
    finally:
        made.made.stop()


async def settled_history(url: str, side_url: str, ids: list[str], timeout: float = 45.0) -> Check:
    """Wait for the tasks to settle, then run the history checker through a client made
    after that: a cluster client made before the failover may still name the dead master
    among the masters a ``SCAN`` visits."""
    redis = connect(url)
    try:
        await settle(redis, ids, timeout=timeout)
    finally:
        await redis.aclose()
    redis = connect(url)
    side = connect(side_url)
    try:
        return await check_history(redis, ids, side=side)
    finally:
        await redis.aclose()
        await side.aclose()
