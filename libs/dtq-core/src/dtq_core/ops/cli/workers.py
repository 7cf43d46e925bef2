"""``dtq worker list``: the worker registry."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import _age, _json, _paint, _table, _write


async def _worker_list(ns: argparse.Namespace, admin: Admin) -> int:
    workers = await admin.workers()
    if ns.json:
        _write(_json(workers))
        return 0
    if not workers:
        _write("no workers")
        return 0
    rows = [
        [
            w.id,
            ",".join(w.queues) or "-",
            str(w.concurrency),
            str(w.in_flight),
            _paint(w.state),
            _age(w.heartbeat_age_s) + " ago",
            w.version or "-",
        ]
        for w in workers
    ]
    headers = ["WORKER", "QUEUES", "CONC", "IN FLIGHT", "STATE", "HEARTBEAT", "VERSION"]
    _write(_table(headers, rows))
    return 0
