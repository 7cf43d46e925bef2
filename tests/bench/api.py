"""REST submit throughput for ``just bench``: the load comes from ``wrk``, a separate process.

- single: ``POST /api/v1/tasks`` with 50 concurrent connections for 10 s (requests/s, p99).
- batch: ``POST /api/v1/tasks/batch`` of 1,000 tasks, 4 connections (tasks/s).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from dtq_devtools.testing import free_port, wait_until_sync

SINGLE_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"task": "noop", "queue": "bench-api", "args": [1, "two"], "priority": 5}'
"""

BATCH_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '%s'
"""

LATENCY_RE = re.compile(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
RATE_RE = re.compile(r"^Requests/sec:\s+([\d.]+)", re.MULTILINE)
NON_2XX_RE = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _wrk(url: str, script: str, connections: int, seconds: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
        path = f.name
    try:
        out = subprocess.run(
            ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", path, url],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 60,
        ).stdout
    finally:
        os.unlink(path)
    rate = RATE_RE.search(out)
    p99 = LATENCY_RE.search(out)
    errors = NON_2XX_RE.search(out)
    if rate is None or p99 is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    return {
        "requests_per_s": float(rate.group(1)),
        "p99_ms": _ms(p99.group(1), p99.group(2)),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


def api_bench(redis_url: str, seconds: int = 10) -> dict[str, Any]:
    """Start one ingest-api process on ``redis_url`` and load it with wrk."""
    if shutil.which("wrk") is None:
        return {"skipped": "wrk is not installed (apt-get install -y wrk)"}
    port = free_port()
    env = {
        **os.environ,
        "DTQ_REDIS_URL": redis_url,
        "DTQ_API_PORT": str(port),
        "DTQ_MAX_QUEUE_DEPTH": "0",
        "DTQ_LOG_LEVEL": "WARNING",
        # One process per core: one event loop is the API's limit long before Redis is.
        "DTQ_API_WORKERS": str(os.cpu_count() or 1),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "dtq_ingest_api"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_sync(lambda: _answers(f"{base}/health"), timeout=30, message="API up")
        items = [{"task": "noop", "queue": "bench-api-batch", "args": [i]} for i in range(1000)]
        # Queues are created deliberately (an admin's POST /queues), as in a deployment, and a
        # first batch must be accepted whole: a figure of refusals is no figure.
        for queue in ("bench-api", "bench-api-batch"):
            _post(f"{base}/api/v1/queues", {"name": queue})
        probe = _post(f"{base}/api/v1/tasks/batch", {"tasks": items})
        refused = [r for r in probe["results"] if r["status"] != 201]
        if refused:
            raise RuntimeError(f"the API refused {len(refused)} of 1000 items: {refused[0]}")
        single = _wrk(f"{base}/api/v1/tasks", SINGLE_LUA, 50, seconds)
        if single["non_2xx"]:
            raise RuntimeError(f"{single['non_2xx']:.0f} submits were refused during the load")
        batch = _wrk(
            f"{base}/api/v1/tasks/batch",
            BATCH_LUA % json.dumps({"tasks": items}),
            4,
            seconds,
        )
    finally:
        proc.terminate()
        proc.wait(20)
    return {
        "single_requests_per_s": single["requests_per_s"],
        "single_p99_ms": single["p99_ms"],
        "single_non_2xx": single["non_2xx"],
        "batch_tasks_per_s": batch["requests_per_s"] * 1000,
        "batch_p99_ms": batch["p99_ms"],
        "batch_non_2xx": batch["non_2xx"],
    }


def _post(url: str, body: dict[str, Any]) -> Any:
    import urllib.request  # noqa: PLC0415 - only the set-up needs it

    request = urllib.request.Request(  # noqa: S310 - our own loopback URL
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


def _answers(url: str) -> bool:
    import urllib.request  # noqa: PLC0415 - only the readiness poll needs it

    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - our own loopback URL
            return bool(response.status == 200)
    except OSError:
        return False


if __name__ == "__main__":
    sys.stdout.write(json.dumps(api_bench(sys.argv[1]), indent=2) + "\n")
