"""``dtq group list|show|pause|resume|weight``: a queue's groups (docs/flow-control.md,
"Groups")."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import _done, _json, _table, _write

GROUP_LIST_DEFAULT = 100


async def _group_list(ns: argparse.Namespace, admin: Admin) -> int:
    page = await admin.groups(ns.queue, limit=ns.limit, cursor=ns.cursor)
    if ns.json:
        _write(_json(page))
        return 0
    if not page.groups:
        _write(f"no groups in queue {ns.queue}")
        return 0
    rows = [
        [
            g.name,
            str(g.waiting),
            str(g.queued),
            str(g.running),
            str(g.weight),
            "paused" if g.paused else "-",
        ]
        for g in page.groups
    ]
    _write(_table(["GROUP", "WAITING", "QUEUED", "RUNNING", "WEIGHT", "PAUSED"], rows))
    if page.next_cursor is not None:
        _write(f"more: dtq group list {ns.queue} --cursor {page.next_cursor}")
    return 0


async def _group_show(ns: argparse.Namespace, admin: Admin) -> int:
    _write(_json(await admin.group(ns.queue, ns.group)))
    return 0


async def _group_pause(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.set_group(ns.queue, ns.group, paused=True, actor=ns.actor)
    line = (
        f"group {ns.group} of queue {ns.queue} paused: its waiting tasks wait, its running "
        "tasks finish"
    )
    return _done(ns, line, queue=ns.queue, group=ns.group, paused=True)


async def _group_resume(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.set_group(ns.queue, ns.group, paused=False, actor=ns.actor)
    line = f"group {ns.group} of queue {ns.queue} resumed"
    return _done(ns, line, queue=ns.queue, group=ns.group, paused=False)


async def _group_weight(ns: argparse.Namespace, admin: Admin) -> int:
    stats = await admin.set_group(ns.queue, ns.group, weight=ns.weight, actor=ns.actor)
    line = f"group {ns.group} of queue {ns.queue}: weight {stats.weight}"
    return _done(ns, line, queue=ns.queue, group=ns.group, weight=stats.weight)
