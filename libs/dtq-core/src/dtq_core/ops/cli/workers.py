"""``dtq worker list``: the worker registry, a line per worker and, for a worker of several
processes (``dtq-worker --processes N``), an indented line per process."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin, WorkerInfo
from dtq_core.ops.cli.output import _age, _json, _paint, _table, _write


async def _worker_list(ns: argparse.Namespace, admin: Admin) -> int:
    workers = await admin.workers()
    if ns.json:
        _write(_json(workers))
        return 0
    if not workers:
        _write("no workers")
        return 0
    rows: list[list[str]] = []
    for w in workers:
        rows.append(
            [
                w.id,
                ",".join(w.queues) or "-",
                str(w.concurrency),
                str(w.in_flight),
                _paint(w.state),
                _age(w.heartbeat_age_s) + " ago",
                w.version or "-",
                _processes(w),
            ]
        )
        if w.process_slots > 1 or len(w.processes) > 1:
            rows += _process_rows(w)
    headers = ["WORKER", "QUEUES", "CONC", "IN FLIGHT", "STATE", "HEARTBEAT", "VERSION", "PROCS"]
    _write(_table(headers, rows))
    return 0


def _processes(w: WorkerInfo) -> str:
    """``2/2``: processes heartbeating now, of those the worker runs."""
    live = sum(1 for p in w.processes if p.state != "stale")
    return f"{live}/{w.process_slots}"


def _process_rows(w: WorkerInfo) -> list[list[str]]:
    """One line per process, under its worker: its id's own part, pid, restarts."""
    return [
        [
            f"  {p.id.removeprefix(w.id)}" + (f" pid {p.pid}" if p.pid else ""),
            "",
            str(p.concurrency),
            str(p.in_flight),
            _paint(p.state),
            _age(p.heartbeat_age_s) + " ago",
            "",
            f"restarts {p.restarts}" if p.restarts else "",
        ]
        for p in w.processes
    ]
