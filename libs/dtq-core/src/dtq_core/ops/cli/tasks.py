"""``dtq enqueue`` and ``dtq task show|cancel|retry``: submit a task, print a task's record,
cancel it or run it again."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

from redis.exceptions import RedisError

from dtq_core.messages import Outcome, TaskRequest
from dtq_core.names import split_task_id
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import (
    _fail,
    _json,
    _paint,
    _write,
)
from dtq_core.ops.cli.progress import ProgressView, follow


async def _enqueue(ns: argparse.Namespace, admin: Admin) -> int:
    request = TaskRequest(
        task=ns.task,
        args=ns.args or [],
        kwargs=ns.kwargs or {},
        queue=ns.queue,
        priority=ns.priority,
        delay_s=ns.delay,
        idempotency_key=ns.idempotency_key,
        dedup=ns.dedup,
        dedup_key=ns.dedup_key,
        debounce_s=ns.debounce,
        throttle_s=ns.throttle,
        group=ns.group,
    )
    handle = await admin.client.submit(request)
    if handle.dedup == "replaced":
        sys.stderr.write(f"dtq: deduplicated: {handle.id} took these arguments\n")
    elif handle.dedup == "original":
        sys.stderr.write(f"dtq: deduplicated: {handle.id} is the key's task\n")
    elif not handle.created:
        sys.stderr.write(f"dtq: idempotent replay: {handle.id} is the original task\n")
    if ns.wait is None:
        if ns.json:
            doc = {"id": handle.id, "queue": handle.queue, "status": handle.submitted_status}
            _write(_json({**doc, "created": handle.created, "dedup": handle.dedup}))
        else:
            _write(handle.id)
        return 0
    view = ProgressView()
    try:
        outcome = await _wait_showing_progress(admin, handle.id, ns.wait, view)
    except TimeoutError:
        view.close()
        _fail(f"task {handle.id} did not finish within {ns.wait:g} s")
        return 1
    view.close()
    _write(_json(outcome))
    return 0 if outcome.ok else 1


async def _wait_showing_progress(
    admin: Admin, task_id: str, timeout: float, view: ProgressView
) -> Outcome[Any]:
    """The task's outcome, its progress reports shown on ``view`` while it runs (a read of
    them that fails ends the showing, not the wait)."""
    shown = asyncio.create_task(follow(admin.client, task_id, view))
    try:
        return await admin.client.wait(task_id, timeout=timeout)
    finally:
        shown.cancel()
        with contextlib.suppress(asyncio.CancelledError, RedisError):
            await shown


async def _task(ns: argparse.Namespace, admin: Admin) -> int:
    if split_task_id(ns.id) is None:
        _fail(f"{ns.id!r} is not a task id: expected <queue>:<32 hex digits>")
        return 1
    record = await admin.client.get(ns.id)
    if record is None:
        _fail(f"task {ns.id} not found (it never existed, or its record expired)")
        return 1
    _write(_json(record))
    return 0


async def _task_cancel(ns: argparse.Namespace, admin: Admin) -> int:
    if split_task_id(ns.id) is None:
        _fail(f"{ns.id!r} is not a task id: expected <queue>:<32 hex digits>")
        return 1
    status = await admin.client.cancel(ns.id)
    await admin.audit(
        "task.cancel", queue=ns.id.partition(":")[0], actor=ns.actor, count=1, detail=f"ids={ns.id}"
    )
    if ns.json:
        _write(_json({"id": ns.id, "status": status}))
    elif status == "running":
        _write(f"task {ns.id} {_paint(status)}: its worker was told to cancel it")
    else:
        _write(f"task {ns.id} {_paint(status)}")
    return 0


async def _task_retry(ns: argparse.Namespace, admin: Admin) -> int:
    if split_task_id(ns.id) is None:
        _fail(f"{ns.id!r} is not a task id: expected <queue>:<32 hex digits>")
        return 1
    status = await admin.client.retry(ns.id)
    await admin.audit(
        "task.retry", queue=ns.id.partition(":")[0], actor=ns.actor, count=1, detail=f"ids={ns.id}"
    )
    if ns.json:
        _write(_json({"id": ns.id, "status": status}))
    else:
        _write(f"task {ns.id} {_paint(status)}: it runs again, its attempts start over")
    return 0
