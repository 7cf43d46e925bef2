"""``dtq status``: queues and workers at a glance."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dtq_core.ops.admin import Admin, QueueStats, WorkerInfo
from dtq_core.ops.cli.output import (
    _age,
    _by_priority,
    _json,
    _table,
    _write,
)


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
            w.state,
            _age(w.heartbeat_age_s) + " ago",
        ]
        for w in workers
    ]


async def _status(ns: argparse.Namespace, admin: Admin) -> int:
    queues = await admin.queues()
    workers = await admin.workers()
    if ns.json:
        _write(_json({"queues": queues, "workers": workers}))
        return 0
    if queues:
        headers = ["QUEUE", "PAUSED", "DEPTH", "P9..P0", "DELAYED", "IN FLIGHT", "DEAD", "OLDEST"]
        _write(_table(headers, _queue_rows(queues)))
    else:
        _write("no queues yet: start a worker, or create one with `dtq queue create`")
    _write()
    if workers:
        headers = [
            "WORKER", "HOST", "PID", "QUEUES", "CONC", "IN FLIGHT", "PROCESSED", "FAILED",
            "STATE", "HEARTBEAT",
        ]  # fmt: skip
        _write(_table(headers, _worker_rows(workers)))
    else:
        _write("no workers")
    return 0
