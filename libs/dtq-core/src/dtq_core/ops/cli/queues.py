"""``dtq queue create|delete|show|configure|pause|resume|purge``."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dtq_core.ops.admin import UNSET, Admin
from dtq_core.ops.cli.output import _done, _fail, _json, _write


async def _pause(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.pause(ns.queue, actor=ns.actor)
    line = f"queue {ns.queue} paused: workers start none of its tasks until it is resumed"
    return _done(ns, line, queue=ns.queue, paused=True)


async def _resume(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.resume(ns.queue, actor=ns.actor)
    return _done(ns, f"queue {ns.queue} resumed", queue=ns.queue, paused=False)


async def _create(ns: argparse.Namespace, admin: Admin) -> int:
    created = await admin.create_queue(ns.queue, actor=ns.actor)
    line = f"queue {ns.queue} {'created' if created else 'exists already'}: it accepts submits"
    return _done(ns, line, queue=ns.queue, created=created)


async def _delete(ns: argparse.Namespace, admin: Admin) -> int:
    await admin.delete_queue(ns.queue, actor=ns.actor)
    line = f"queue {ns.queue} deleted: submits into it are refused until it is created again"
    return _done(ns, line, queue=ns.queue, deleted=True)


async def _purge(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.purge(ns.queue, actor=ns.actor)
    line = f"purged {count} waiting tasks from queue {ns.queue}; running tasks were left alone"
    return _done(ns, line, queue=ns.queue, purged=count)


async def _show(ns: argparse.Namespace, admin: Admin) -> int:
    _write(_json(await admin.queue(ns.queue)))
    return 0


def _limit(text: str | None, parse: Callable[[str], object]) -> object:
    """A CLI limit: not given (UNSET), ``none`` or ``default`` (cleared), or a value."""
    if text is None:
        return UNSET
    if text in {"none", "default"}:
        return None
    return parse(text)


def _int(text: str) -> int | str:
    return int(text) if text.isdigit() else text  # the admin check names a bad value


async def _configure(ns: argparse.Namespace, admin: Admin) -> int:
    changes = {
        "max_depth": _limit(ns.max_depth, _int),
        "rate": _limit(ns.rate, str),
        "burst": _limit(ns.burst, _int),
        "concurrency": _limit(ns.concurrency, _int),
        "group_concurrency": _limit(ns.group_concurrency, _int),
        "group_rate": _limit(ns.group_rate, str),
    }
    if ns.partitions is None and all(v is UNSET for v in changes.values()):
        _fail(
            "nothing to change: give a setting (--partitions, --max-depth, --rate, --burst, "
            "--concurrency, --group-concurrency, --group-rate); "
            f"`dtq queue show {ns.queue}` shows the queue"
        )
        return 2
    config = await admin.configure(ns.queue, partitions=ns.partitions, actor=ns.actor, **changes)
    if ns.json:
        _write(_json({"queue": ns.queue, "config": config}))
        return 0
    _write(
        f"queue {ns.queue}: {config.partitions} partitions, "
        f"max_depth {_shown(config.max_depth, 'DTQ_MAX_QUEUE_DEPTH')}, "
        f"rate {_shown(config.rate)}"
        + (f" (burst {config.burst})" if config.burst is not None else "")
        + f", concurrency {_shown(config.concurrency)}"
        + f", group_concurrency {_shown(config.group_concurrency)}"
        + f", group_rate {_shown(config.group_rate)}"
    )
    return 0


def _shown(value: object, default: str = "no limit") -> str:
    return default if value is None else str(value)
