"""``dtq queue create|delete|show|configure|pause|resume|purge``."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import _fail, _json, _write


async def _pause(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.pause(ns.queue, actor=ns.actor)
    _write(f"queue {ns.queue} paused: workers start none of its tasks until it is resumed")
    return 0


async def _resume(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.resume(ns.queue, actor=ns.actor)
    _write(f"queue {ns.queue} resumed")
    return 0


async def _create(ns: argparse.Namespace, admin: Admin) -> int:
    created = await admin.create_queue(ns.queue, actor=ns.actor)
    _write(f"queue {ns.queue} {'created' if created else 'exists already'}: it accepts submits")
    return 0


async def _delete(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.delete_queue(ns.queue, actor=ns.actor)
    _write(f"queue {ns.queue} deleted: submits into it are refused until it is created again")
    return 0


async def _purge(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.purge(ns.queue, actor=ns.actor)
    _write(f"purged {count} waiting tasks from queue {ns.queue}; running tasks were left alone")
    return 0


async def _show(ns: argparse.Namespace, admin: Admin) -> int:
    _write(_json(await admin.queue(ns.queue)))
    return 0


async def _configure(ns: argparse.Namespace, admin: Admin) -> int:
    if ns.partitions is None:
        _fail(f"nothing to change: give a setting (--partitions N); `dtq queue show {ns.queue}`")
        return 2
    config = await admin.configure(ns.queue, partitions=ns.partitions, actor=ns.actor)
    _write(
        f"queue {ns.queue}: {config.partitions} partitions (producers and workers follow "
        "within a second)"
    )
    return 0
