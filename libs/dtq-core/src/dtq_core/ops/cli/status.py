"""``dtq status``: queues and workers at a glance."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec

from dtq_core.ops.admin import Admin, QueueStats, WorkerInfo
from dtq_core.ops.cli.output import (
    _age,
    _by_priority,
    _json,
    _paint,
    _table,
    _write,
)
from dtq_core.ops.cli.workers import _processes


def _queue_rows(queues: Sequence[QueueStats]) -> list[list[str]]:
    return [
        [
            q.name,
            "yes" if q.paused else "no",
            str(q.depth),
            _by_priority(q.depth_by_priority),
            str(q.delayed),
            str(q.in_flight),
            str(q.dead),
            _age(q.oldest_waiting_age_s),
        ]
        for q in queues
    ]


def _worker_rows(workers: Sequence[WorkerInfo]) -> list[list[str]]:
    return [
        [
            w.id,
            w.host or "-",
            str(w.pid or "-"),
            ",".join(w.queues) or "-",
            str(w.concurrency),
            str(w.in_flight),
            str(w.processed),
            str(w.failed),
            _paint(w.state),
            _age(w.heartbeat_age_s) + " ago",
            _processes(w),
        ]
        for w in workers
    ]


CLEAR = "\x1b[H\x1b[2J"
"""Cursor home and clear the screen: a --watch redraw on a terminal."""


async def _status(ns: argparse.Namespace, admin: Admin) -> int:
    if not ns.watch:
        await _show(ns, admin)
        return 0
    # Until Ctrl-C, which :func:`dtq_core.ops.cli.run.main` turns into exit status 0.
    while True:
        if sys.stdout.isatty() and not ns.json:
            sys.stdout.write(CLEAR)
        if not ns.json:
            now = datetime.now(UTC).isoformat(timespec="seconds")
            _write(f"dtq status, every {ns.interval:g} s: {now}")
        await _show(ns, admin, one_line=True)
        sys.stdout.flush()
        await asyncio.sleep(ns.interval)


async def _show(ns: argparse.Namespace, admin: Admin, *, one_line: bool = False) -> None:
    """The status once: tables, or JSON (with ``one_line``: one line, as --watch prints it)."""
    queues = await admin.queues()
    workers = await admin.workers()
    if ns.json:
        doc = {"queues": queues, "workers": workers}
        _write(msgspec.json.encode(doc).decode() if one_line else _json(doc))
        return
    if queues:
        headers = ["QUEUE", "PAUSED", "DEPTH", "P9..P0", "DELAYED", "IN FLIGHT", "DEAD", "OLDEST"]
        _write(_table(headers, _queue_rows(queues)))
    else:
        _write("no queues yet: start a worker, or create one with `dtq queue create`")
    _write()
    if workers:
        headers = [
            "WORKER", "HOST", "PID", "QUEUES", "CONC", "IN FLIGHT", "PROCESSED", "FAILED",
            "STATE", "HEARTBEAT", "PROCS",
        ]  # fmt: skip
        _write(_table(headers, _worker_rows(workers)))
    else:
        _write("no workers")
