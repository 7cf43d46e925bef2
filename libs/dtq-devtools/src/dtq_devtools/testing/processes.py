"""Service processes for multi-process tests: started with their own environment, stopped
by PID (only the PIDs a test started are ever signalled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from dtq_devtools.testing import terminate

FAST_ENV = {
    "DTQ_VISIBILITY_TIMEOUT_S": "2",
    "DTQ_HEARTBEAT_INTERVAL_S": "0.5",
    "DTQ_RETRY_BASE_DELAY": "0.05",
    "DTQ_RETRY_MAX_DELAY": "0.5",
    "DTQ_LEADER_TTL_S": "1",
    "DTQ_SCHEDULER_TICK_S": "0.05",
    "DTQ_WORKER_METRICS_PORT": "0",
    "DTQ_SCHEDULER_METRICS_PORT": "0",
    "DTQ_LOG_JSON": "true",
    "DTQ_REJECT_UNKNOWN_QUEUES": "false",
}


class ServiceProcess:
    """One service process (``python -m <module> <args>``), its log in a file."""

    def __init__(self, module: str, args: list[str], env: Mapping[str, str], log: Path) -> None:
        self.module = module
        self.args = args
        self.env = {**os.environ, **env}
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The process's resident set size (Linux ``/proc``; 0 once it has exited)."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process has used (Linux ``/proc``; 0 once gone)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        return terminate(self.proc, timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics_port(self) -> int | None:
        """The port its metrics listener took (its ``metrics_served`` log line), once up."""
        for line in self.log().splitlines():
            if '"metrics_served"' in line:
                return int(json.loads(line)["port"])
        return None

    def metric(self, name: str, **labels: str) -> float:
        """The sum over labels of one metric on its ``/metrics`` (0 when not exported); with
        ``labels``, of the samples carrying those label values only."""
        port = self.metrics_port()
        if port is None:
            raise RuntimeError(f"{self.module} has not served its metrics yet")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )


@contextmanager
def services(*procs: ServiceProcess) -> Iterator[tuple[ServiceProcess, ...]]:
    """Start the processes; stop every one of them on the way out, whatever happened."""
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            p.stop()


def worker_process(
    redis_url: str,
    log: Path,
    *,
    queues: str = "default",
    concurrency: int = 4,
    app: str = "dtq_devtools.testing.app:registry",
    env: Mapping[str, str] | None = None,
) -> ServiceProcess:
    return ServiceProcess(
        "dtq_worker",
        ["--app", app, "--queues", queues, "--concurrency", str(concurrency)],
        {**FAST_ENV, "DTQ_REDIS_URL": redis_url, **(env or {})},
        log,
    )


def scheduler_process(
    redis_url: str, log: Path, *, env: Mapping[str, str] | None = None
) -> ServiceProcess:
    return ServiceProcess(
        "dtq_scheduler_leader",
        [],
        {**FAST_ENV, "DTQ_REDIS_URL": redis_url, **(env or {})},
        log,
    )
