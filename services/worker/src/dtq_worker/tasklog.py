"""Canonical log lines of executions, written in batches.

One line per execution (Stripe's "canonical log line"): task id, queue, task, attempt,
status, duration and error type, plus the ids of the attempt's CONSUMER span when tracing is
on (only the trace id, taken from the task's headers, when the producer traced and this worker
does not). At tens of thousands of
executions a second, structlog's processor chain costs more than the execution itself, so the
worker renders these lines directly, in the same JSON shape (or ``key=value`` on a terminal),
and writes each finish batch with one call.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import msgspec

_encode = msgspec.json.Encoder().encode


class TaskLog:
    def __init__(self, *, enabled: bool, json: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.json = json
        self.stream = stream or sys.stderr

    def write(self, records: list[dict[str, Any]]) -> None:
        if not self.enabled or not records:
            return
        ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        if self.json:
            lines = [
                _encode({"event": "task_executed", "level": "info", "timestamp": ts, **r}).decode()
                for r in records
            ]
        else:
            stamp = ts[:19].replace("T", " ")
            lines = [
                f"{stamp} [info     ] task_executed                  "
                + " ".join(f"{k}={v}" for k, v in r.items() if v is not None)
                for r in records
            ]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
