"""Event gateway fan-out for ``just bench``: one gateway process, 100 WebSocket clients in a
separate process, 2,000 events/s published for 10 s.

Reported: events delivered per second (all clients together), p50/p99 of the event delay
(the client's receive time minus the event's Redis time in the frame; one host, one clock),
gap messages, events missing at the end, and the CPU share of the gateway and the clients.

``gateway_bench(redis_url)`` runs it against a Redis the caller started; ``python
tests/bench/gateway.py --redis-url URL`` runs it alone. The client side is this file too
(``python tests/bench/gateway.py clients ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from dtq_core.infra.connection import connect
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import free_port, wait_until

QUEUE = "bench-gw"
CLIENTS = 100
RATE = 2000
SECONDS = 10.0
TICK_S = 0.01
"""The publisher writes RATE x TICK_S events per tick, in one pipeline."""


def process_cpu(pid: int) -> float:
    """CPU seconds a process has used (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


# -- the client process ---------------------------------------------------------------------


async def _client(
    url: str, stats: dict[str, Any], ready: asyncio.Event, stop: asyncio.Event
) -> None:
    """One WebSocket client: record delays; on a gap+close, reconnect with the cursor."""
    from websockets.asyncio.client import connect as ws_connect  # noqa: PLC0415
    from websockets.exceptions import ConnectionClosed  # noqa: PLC0415

    cursor = None
    first = True
    while not stop.is_set():
        target = f"{url}?batch=1" if cursor is None else f"{url}?batch=1&cursor={cursor}"
        try:
            async with ws_connect(target, max_queue=256, open_timeout=10) as ws:
                async for message in ws:
                    now = time.time()
                    assert isinstance(message, str)
                    for text in message.split("\n"):
                        # Parse only what is measured: JSON decoding 200k frames/s would make the
                        # client, not the gateway, the bottleneck.
                        kind = text[9 : text.index('"', 9)]
                        cursor_at = text.index('"cursor":"') + 10
                        cursor = text[cursor_at : text.index('"', cursor_at)]
                        if kind == "subscribed":
                            if first:
                                first = False
                                ready.set()
                            continue
                        if kind == "gap":
                            stats["gaps"] += 1
                            continue
                        if kind.startswith("task."):
                            ts_at = text.index('"ts":') + 5
                            ts = float(text[ts_at : text.index(",", ts_at)])
                            stats["received"] += 1
                            stats["delays"].append(now - ts)
        except ConnectionClosed as exc:
            stats["closes"].append(exc.rcvd.code if exc.rcvd else 1006)
        except OSError:
            await asyncio.sleep(0.1)


async def run_clients(url: str, n: int) -> None:
    """Connect ``n`` clients; print ``ready``, then ``progress <received>`` every 0.2 s until
    ``stop`` arrives on stdin, then one JSON line of results."""
    stats: dict[str, Any] = {"received": 0, "gaps": 0, "closes": [], "delays": []}
    stop = asyncio.Event()
    readies = [asyncio.Event() for _ in range(n)]
    tasks = [asyncio.create_task(_client(url, stats, r, stop)) for r in readies]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def report() -> None:
        while not stop.is_set():
            sys.stdout.write(f"progress {stats['received']}\n")
            sys.stdout.flush()
            await asyncio.sleep(0.2)

    reporter = asyncio.create_task(report())
    while (await reader.readline()).strip() != b"stop":
        pass
    stop.set()
    reporter.cancel()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, reporter, return_exceptions=True)
    delays = stats["delays"]
    result = {
        "received": stats["received"],
        "gaps": stats["gaps"],
        "closes": len(stats["closes"]),
        "p50_ms": percentile(delays, 0.50) * 1000,
        "p99_ms": percentile(delays, 0.99) * 1000,
        "max_ms": max(delays, default=float("nan")) * 1000,
    }
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


# -- the benchmark ----------------------------------------------------------------------------


async def _publish(redis_url: str, rate: int, seconds: float) -> tuple[int, float]:
    """XADD ``rate`` events/s (the scripts' field shape, one task per entry) for ``seconds``."""
    r = connect(redis_url)
    key = Keys().queue(QUEUE).events
    per_tick = max(1, round(rate * TICK_S))
    sent = 0
    t0 = time.perf_counter()
    try:
        while (now := time.perf_counter() - t0) < seconds:
            due = min(int(now * rate) + per_tick, int(seconds * rate))
            async with r.pipeline(transaction=False) as pipe:
                for _ in range(due - sent):
                    fields = {
                        "type": "task.progress",
                        "ids": secrets.token_hex(16),
                        "tasks": "bench",
                        "att": "1",
                        "progress": '{"value":0.5}',
                    }
                    await pipe.xadd(key, fields, maxlen=100000, approximate=True)
                await pipe.execute()
            sent = max(sent, due)
            await asyncio.sleep(TICK_S)
    finally:
        await r.aclose()
    return sent, time.perf_counter() - t0


def _start_gateway(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dtq_event_gateway"], env=env, stdout=out, stderr=out
        )


async def gateway_bench(
    redis_url: str, clients: int = CLIENTS, rate: int = RATE, seconds: float = SECONDS
) -> dict[str, float]:
    """One gateway process, ``clients`` WebSocket clients in another, ``rate`` events/s."""
    r = connect(redis_url)
    await r.sadd(Keys().queues, QUEUE)  # known at start: no wait for the registry refresh
    await r.aclose()
    port = free_port()
    env = {
        **os.environ,
        "DTQ_REDIS_URL": redis_url,
        "DTQ_GATEWAY_PORT": str(port),
        "DTQ_LOG_LEVEL": "WARNING",
    }
    with tempfile.TemporaryDirectory(prefix="dtq-bench-gw-") as tmp:
        gateway = _start_gateway(env, Path(tmp, "gateway.log"))
        client_proc: asyncio.subprocess.Process | None = None
        try:
            base = f"http://127.0.0.1:{port}"

            async def ready() -> bool:
                try:
                    async with httpx.AsyncClient() as http:
                        return (await http.get(f"{base}/ready", timeout=1)).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(ready, timeout=30, message="gateway ready")
            client_proc = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "clients",
                "--url",
                f"ws://127.0.0.1:{port}/ws/events",
                "--n",
                str(clients),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            assert client_proc.stdout is not None
            assert client_proc.stdin is not None
            line = await asyncio.wait_for(client_proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"bench clients did not start: {line!r}")
            gw_cpu0, cl_cpu0 = process_cpu(gateway.pid), process_cpu(client_proc.pid)
            t0 = time.perf_counter()
            published, _ = await _publish(redis_url, rate, seconds)
            expected = published * clients
            received, last_change = 0, time.perf_counter()
            while received < expected and time.perf_counter() - last_change < 3:
                progress = await asyncio.wait_for(client_proc.stdout.readline(), 10)
                count = int(progress.split()[1])
                if count > received:
                    received, last_change = count, time.perf_counter()
            elapsed = last_change - t0
            gw_cpu = (process_cpu(gateway.pid) - gw_cpu0) / elapsed
            cl_cpu = (process_cpu(client_proc.pid) - cl_cpu0) / elapsed
            client_proc.stdin.write(b"stop\n")
            await client_proc.stdin.drain()
            result: dict[str, Any] = {}
            while not result:
                out = await asyncio.wait_for(client_proc.stdout.readline(), 30)
                if out.startswith(b"{"):
                    result = json.loads(out)
            await client_proc.wait()
        finally:
            if client_proc is not None and client_proc.returncode is None:
                client_proc.kill()
            gateway.send_signal(signal.SIGTERM)
            try:
                gateway.wait(15)
            except subprocess.TimeoutExpired:
                gateway.kill()
                gateway.wait()
    return {
        "clients": float(clients),
        "published_per_s": published / seconds,
        "delivered_per_s": result["received"] / elapsed,
        "delivered_ratio": result["received"] / expected,
        "missing": float(expected - result["received"]),
        "p50_delay_ms": result["p50_ms"],
        "p99_delay_ms": result["p99_ms"],
        "max_delay_ms": result["max_ms"],
        "gaps": float(result["gaps"]),
        "slow_consumer_closes": float(result["closes"]),
        "gateway_cpu": gw_cpu,
        "clients_cpu": cl_cpu,
    }


async def _standalone(args: argparse.Namespace) -> dict[str, float]:
    if args.redis_url:
        return await gateway_bench(args.redis_url, args.clients, args.rate, args.seconds)
    from dtq_devtools.testing import RedisServer  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="dtq-bench-redis-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            return await gateway_bench(server.url, args.clients, args.rate, args.seconds)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command")
    clients = sub.add_parser("clients", help="the client process (started by the benchmark)")
    clients.add_argument("--url", required=True)
    clients.add_argument("--n", type=int, default=CLIENTS)
    parser.add_argument("--redis-url", default="", help="default: a redis-server of its own")
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--rate", type=int, default=RATE)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    args = parser.parse_args()
    if args.command == "clients":
        try:
            import uvloop  # noqa: PLC0415

            uvloop.run(run_clients(args.url, args.n))
        except ImportError:
            asyncio.run(run_clients(args.url, args.n))
        return
    figures = asyncio.run(_standalone(args))
    width = max(len(k) for k in figures)
    for name, value in figures.items():
        sys.stdout.write(f"{name.ljust(width)}  {value:,.2f}\n")


if __name__ == "__main__":
    main()
