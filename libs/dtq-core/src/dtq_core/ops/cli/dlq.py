"""``dtq dlq list|requeue|discard|purge``: browse and steer a queue's dead-letter queue."""

from __future__ import annotations

import argparse
import shlex

from dtq_core.messages import TaskSummary
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import (
    _ERROR_WIDTH,
    _done,
    _json,
    _table,
    _time,
    _write,
)

DLQ_LIST_DEFAULT = 50
"""Tasks per page of ``dtq dlq list`` unless ``--limit`` says otherwise."""


def _error_summary(record: TaskSummary) -> str:
    last = record.last_error
    if last is None:
        return "-"
    text = f"{last.type}: {last.message}".replace("\n", " ")
    return text if len(text) <= _ERROR_WIDTH else text[: _ERROR_WIDTH - 3] + "..."


async def _dlq_list(ns: argparse.Namespace, admin: Admin) -> int:
    page = await admin.dlq_list(ns.queue, limit=ns.limit, cursor=ns.cursor, task=ns.task)
    if ns.json:
        _write(_json(page))
        return 0
    if not page.items:
        _write(f"no dead tasks in queue {ns.queue}")
        return 0
    rows = [
        [r.id, r.task, str(r.attempts), _time(r.finished_at), _error_summary(r)] for r in page.items
    ]
    _write(_table(["ID", "TASK", "ATTEMPTS", "DIED", "LAST ERROR"], rows))
    if page.next_cursor:
        _write(f"more: {_next_page(ns, page.next_cursor)}")
    return 0


def _next_page(ns: argparse.Namespace, cursor: str) -> str:
    """The command that lists the next page: this one's queue, filter and page size (a bare
    ``--cursor`` would drop ``--task`` and list other tasks), with the new cursor."""
    argv = ["dtq", "dlq", "list", ns.queue]
    if ns.limit != DLQ_LIST_DEFAULT:
        argv += ["--limit", str(ns.limit)]
    if ns.task is not None:
        argv += ["--task", ns.task]
    return shlex.join([*argv, "--cursor", cursor])


async def _dlq_requeue(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.dlq_requeue(
        ns.queue, ns.ids or None, all=ns.all, task=ns.task, actor=ns.actor
    )
    line = f"requeued {count} dead tasks of queue {ns.queue}"
    return _done(ns, line, queue=ns.queue, requeued=count)


async def _dlq_discard(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.dlq_discard(ns.queue, ns.ids, actor=ns.actor)
    line = f"discarded {count} dead tasks of queue {ns.queue}"
    return _done(ns, line, queue=ns.queue, discarded=count)


async def _dlq_purge(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.dlq_purge(ns.queue, actor=ns.actor)
    line = f"removed {count} entries from the dead-letter queue of {ns.queue}"
    return _done(ns, line, queue=ns.queue, removed=count)
