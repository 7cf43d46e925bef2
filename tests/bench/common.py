"""What the benchmark's scenarios share: a worker process, its CPU, and the end of a drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis


def start_worker(
    url: str, queue: str, concurrency: int | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DTQ_REDIS_URL": url,
        "DTQ_WORKER_METRICS_PORT": "0",
        **(extra_env or {}),
    }
    if concurrency:
        env["DTQ_WORKER_CONCURRENCY"] = str(concurrency)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dtq_worker",
            "--app",
            "dtq_devtools.testing.app:registry",
            "--queues",
            queue,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def finished(r: aioredis.Redis, events_key: str, count: int) -> bool:
    return await finished_count(r, events_key) >= count


async def finished_count(r: aioredis.Redis, events_key: str) -> int:
    """Tasks that reached an end (succeeded or dead) by the queue's events stream."""
    total = 0
    cursor = "-"
    while True:
        entries = await r.xrange(events_key, min=cursor, count=5000)
        if not entries:
            return total
        for _, fields in entries:
            if fields["type"] in {"task.succeeded", "task.dead"}:
                total += len(fields["ids"].split(","))
        cursor = "(" + entries[-1][0]


def process_cpu(pid: int) -> float:
    """CPU seconds a process has used (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
