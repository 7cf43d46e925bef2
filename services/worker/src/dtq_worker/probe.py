"""How a supervisor reads its worker processes' metrics and liveness: a Unix socket per process,
in a folder only the supervisor's user can enter.

A worker process under a supervisor serves no port of its own. It answers one request per
connection on its socket, from a thread (so it answers while its event loop is stuck, as the
metrics port does): ``metrics`` gets the Prometheus exposition of its registry, ``health`` its
liveness report (:mod:`dtq_core.infra.liveness`, JSON). The supervisor adds them up on its own
port (:mod:`dtq_worker.supervisor`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from dtq_core.infra.liveness import Liveness

REQUESTS = ("metrics", "health")
MAX_ANSWER = 32 << 20
"""The most a supervisor reads from one answer (a worker's exposition is tens of KB)."""


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class ProbeServer:
    """A worker process's end: answers ``metrics`` and ``health`` on the socket at ``path``."""

    def __init__(self, path: Path, registry: CollectorRegistry, liveness: Liveness) -> None:
        self.path = path
        registry_, liveness_ = registry, liveness

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = self.rfile.readline(64).strip().decode("ascii", "replace")
                if request == "metrics":
                    self.wfile.write(generate_latest(registry_))
                elif request == "health":
                    self.wfile.write(liveness_.report().body())

        with contextlib.suppress(FileNotFoundError):  # the process this one replaces left it
            path.unlink()
        self._server = _Server(str(path), Handler)
        os.chmod(path, 0o600)

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, name="dtq-probe", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def ask(path: Path, request: str, timeout: float) -> bytes | None:
    """The answer of the worker process at ``path`` to ``request``; ``None`` when it does not
    answer within ``timeout`` (not started yet, gone, or stopped)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(request.encode() + b"\n")
            chunks: list[bytes] = []
            size = 0
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER:
                    return None
            return b"".join(chunks)
    except OSError:  # refused, missing, or timed out
        return None
