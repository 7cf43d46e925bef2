"""Test helpers shipped with dtq-core: a real ``redis-server`` and waiting on facts.

Used by dtq's own suites and usable by SDK users' tests (load ``dtq_devtools.testing.plugin``
from a ``conftest.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Scripts
from dtq_core.protocol.workers import ROUTES_FIELD, SCHEMAS_FIELD
from dtq_core.testing import redis_server_args
from dtq_devtools.testing.tls import TlsFiles

__all__ = [
    "RedisServer",
    "announce_worker",
    "free_port",
    "run_seed",
    "wait_until",
    "wait_until_sync",
]

SEED_VARIABLE = "DTQTEST_SEED"


def run_seed() -> int:
    """The run's random seed: ``DTQTEST_SEED`` when set (to replay a failing run), else one
    drawn now and put in the environment, so every later call and every child process of the
    run draws from the same seed."""
    raw = os.environ.get(SEED_VARIABLE)
    if raw:
        try:
            return int(raw)
        except ValueError:
            raise RuntimeError(f"{SEED_VARIABLE} must be an integer, got {raw!r}") from None
    seed = random.SystemRandom().randrange(2**32)
    os.environ[SEED_VARIABLE] = str(seed)
    return seed


def metric_value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample of a Prometheus registry as ``/metrics`` would show it (0 when absent):
    ``metric_value(reg, "dtq_gateway_refused_total", reason="limit")``."""
    return registry.get_sample_value(name, labels) or 0.0


def free_port() -> int:
    """A TCP port that was free a moment ago (bind port 0 and read it back)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` different TCP ports that were free a moment ago: all bound at once, so none of
    them is handed out twice (a cluster node needs a data port and a bus port)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


async def wait_until(
    predicate: Callable[[], Any | Awaitable[Any]],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` (sync or async) until it returns a truthy value; return it.

    Raises:
        TimeoutError: naming ``message`` when the deadline passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message} not met within {timeout} s")
        await asyncio.sleep(interval)


async def announce_worker(
    redis: aioredis.Redis,
    worker_id: str,
    queues: Sequence[str],
    tasks: Mapping[str, str],
    *,
    keys: Keys | None = None,
    ttl_s: float = 60.0,
    schemas: Mapping[str, Any] | None = None,
) -> None:
    """Register a live worker the way a starting worker does, without running one: its
    queues in the queue registry, its heartbeat, and its routes (``tasks``: name -> the queue
    its definition names; ``schemas``: name -> its argument schema, if any). The registration
    expires after ``ttl_s`` like a dead worker's."""
    keys = keys or Keys()
    scripts = Scripts(redis)
    await scripts.register_queues(keys.queues, list(queues), 0)
    await scripts.heartbeat(keys.workers, worker_id)
    key = keys.worker(worker_id)
    await redis.hset(
        key,
        mapping={
            "id": worker_id,
            "queues": ",".join(queues),
            "started_at": int(time.time() * 1_000_000),
            "state": "running",
            ROUTES_FIELD: msgspec.json.encode(dict(tasks)).decode(),
            **({SCHEMAS_FIELD: msgspec.json.encode(dict(schemas)).decode()} if schemas else {}),
        },
    )
    await redis.pexpire(key, int(ttl_s * 1000))


def wait_until_sync(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message} not met within {timeout} s")
        time.sleep(interval)


def raw_http(url: str, request: bytes, timeout: float = 10.0) -> bytes:
    """Send ``request`` bytes exactly as written (no client normalises paths or headers) to
    the server at ``url``; everything it answers before it closes, resets or goes quiet."""
    parts = urlsplit(url)
    data = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as s:
        s.sendall(request)
        try:
            while chunk := s.recv(65536):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data


def terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM ``proc`` (only a process the test started), SIGKILL it after ``timeout`` s;
    returns its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def _pong(s: socket.socket) -> bool:
    s.sendall(b"PING\r\n")
    return s.recv(64).startswith(b"+PONG")


class RedisServer:
    """A ``redis-server`` process of the test's own: free port, own data dir, AOF on.

    With ``tls`` it listens on TLS only (``--port 0``: a client that does not speak TLS gets
    nothing), serves ``tls``'s certificate, and speaks TLS to a master it replicates.

    Only the PID it started is ever signalled.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        appendonly: bool = True,
        port: int | None = None,
        extra: tuple[str, ...] = (),
        tls: TlsFiles | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed: `apt-get install -y redis-server` "
                "(the README's test command does it when run as root)"
            )
        self.binary = binary
        self.data_dir = data_dir
        self.port = port or free_port()
        self.appendonly = appendonly
        self.extra = extra
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        data_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        """``redis://``, or with TLS ``rediss://`` trusting the test's CA."""
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.port}/0?{self.tls.query()}"
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A synchronous client of this server alone (``decode_responses=True``)."""
        tls = self.tls.client_options() if self.tls is not None else {}
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=2, **tls)

    def _listen_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            *self.tls.server_args(),
            "--tls-replication",
            "yes",
        ]

    def start(self, timeout: float = 10.0) -> None:
        args = [
            *redis_server_args(
                self.binary, self._listen_args(), self.data_dir, appendonly=self.appendonly
            ),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {log}")
            if self.ping():
                return
            time.sleep(0.02)
        raise TimeoutError(f"redis-server on port {self.port} did not answer in {timeout} s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                if self.tls is None:
                    return _pong(raw)
                context = ssl.create_default_context(cafile=str(self.tls.ca))
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    return _pong(s)
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The process stopped (SIGSTOP) for the block, then continued: it keeps its sockets
        and answers nothing, like a host that stalls (a replica that stops confirming)."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {self.port} does not run")
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()
