"""Helpers of the observability tests: a tiny DNS server, Debian's Prometheus as a process,
and the compose Prometheus configuration rewritten for a fast test.

The DNS server answers ``A`` queries for the compose service names with loopback addresses
(one per replica) and ``NXDOMAIN`` for anything else: what Docker's embedded DNS does for a
scaled service. Prometheus runs in a private mount namespace whose ``/etc/resolv.conf`` names
that server, so the host's resolver is never touched.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from dtq_devtools.testing import terminate, wait_until_sync
from dtq_devtools.testing.tools import need_tool as _need_tool
from dtq_devtools.testing.tools import unavailable

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
GRAFANA_DIR = REPO / "deploy" / "grafana"

FAST_INTERVAL = "1s"
"""Scrape, rule evaluation and DNS refresh interval of the test's Prometheus."""

QTYPE_A = 1
QCLASS_IN = 1
RCODE_NXDOMAIN = 3


skip_or_fail = unavailable


def need_tool(name: str) -> str:
    """The tool's path (prometheus and promtool come with the prometheus package)."""
    return _need_tool(name, "prometheus")


# -- DNS ------------------------------------------------------------------------------------


def _read_name(packet: bytes, offset: int) -> tuple[str, int]:
    """A question's QNAME (queries carry no compression pointers) and the offset after it."""
    labels: list[str] = []
    while True:
        length = packet[offset]
        offset += 1
        if length == 0:
            return ".".join(labels), offset
        if length & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(packet[offset : offset + length].decode("ascii"))
        offset += length


def dns_answer(query: bytes, records: Mapping[str, Sequence[str]]) -> bytes:
    """The response to one DNS query (RFC 1035 4.1): ``A`` records for the known names,
    an empty answer for their other types, ``NXDOMAIN`` for unknown names."""
    qid, flags, qdcount = struct.unpack("!HHH", query[:6])
    name, end = _read_name(query, 12)
    qtype, _qclass = struct.unpack("!HH", query[end : end + 4])
    question = query[12 : end + 4]
    addresses = records.get(name.lower().rstrip("."))
    rcode = RCODE_NXDOMAIN if addresses is None else 0
    answers = b""
    count = 0
    if addresses is not None and qtype == QTYPE_A:
        for address in addresses:
            # 0xC00C: a pointer to the question's name at offset 12; TTL 1 s.
            answers += struct.pack("!HHHIH", 0xC00C, QTYPE_A, QCLASS_IN, 1, 4)
            answers += socket.inet_aton(address)
            count += 1
    # QR, the query's opcode and RD, AA, RA, and the rcode.
    out_flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
    header = struct.pack("!HHHHHH", qid, out_flags, min(qdcount, 1), count, 0, 0)
    return header + question + answers


class DnsServer:
    """A UDP DNS server on ``address:port`` in a thread of the test process."""

    def __init__(self, address: str, records: Mapping[str, Sequence[str]], port: int = 53) -> None:
        self.address = address
        self.port = port
        self.records = {k.lower(): list(v) for k, v in records.items()}
        self.queries: list[str] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns", daemon=True)

    def start(self) -> DnsServer:
        self._sock.bind((self.address, self.port))
        self._sock.settimeout(0.1)
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                query, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            try:
                name, _ = _read_name(query, 12)
                self.queries.append(name)
                self._sock.sendto(dns_answer(query, self.records), peer)
            except (ValueError, struct.error, IndexError, UnicodeDecodeError):
                continue  # not a query this server understands: no answer, like a lost packet

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


# -- Prometheus -----------------------------------------------------------------------------


def fast_config(static_targets: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """The compose ``prometheus.yml`` with only its intervals shortened; with
    ``static_targets`` (job -> ``host:port`` list), each job's DNS discovery is replaced by
    those targets (for a test that cannot run a DNS server)."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(
        scrape_interval=FAST_INTERVAL, scrape_timeout=FAST_INTERVAL, evaluation_interval="1s"
    )
    for job in config["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            sd["refresh_interval"] = FAST_INTERVAL
        if static_targets is not None:
            job.pop("dns_sd_configs", None)
            job["static_configs"] = [{"targets": list(static_targets[job["job_name"]])}]
    return config


def fast_rules() -> dict[str, Any]:
    """``alerts.yml`` with every ``for`` at zero: the expressions are untouched."""
    rules: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    return rules


def write_config(directory: Path, config: Mapping[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "alerts.yml").write_text(yaml.safe_dump(fast_rules(), sort_keys=False))
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


class Prometheus:
    """Debian's ``prometheus`` as a process of the test (stopped by its PID)."""

    def __init__(self, config: Path, port: int, data: Path, resolv_conf: Path | None = None):
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = data.parent / f"{data.name}.log"
        args = [
            need_tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=info",
        ]
        if resolv_conf is not None:
            # A private mount namespace: the bind mount is seen by this process alone.
            script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
            args = ["unshare", "-m", "sh", "-c", script, "sh", str(resolv_conf), *args]
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        wait_until_sync(self.ready, timeout=20, interval=0.1, message="prometheus ready")
        return self

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log()}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)

    def api(self, path: str, **params: str) -> Any:
        reply = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = reply.json()
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result


@contextmanager
def running(prometheus: Prometheus) -> Iterator[Prometheus]:
    try:
        yield prometheus.start()
    finally:
        prometheus.stop()
