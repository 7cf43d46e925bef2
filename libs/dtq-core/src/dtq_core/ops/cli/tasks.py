"""``dtq enqueue`` and ``dtq task``: submit a task, print a task's record."""

from __future__ import annotations

import argparse
import sys

from dtq_core.messages import TaskRequest
from dtq_core.names import split_task_id
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import (
    _fail,
    _json,
    _write,
)


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
        _write(handle.id)
        return 0
    try:
        outcome = await handle.result(timeout=ns.wait)
    except TimeoutError:
        _fail(f"task {handle.id} did not finish within {ns.wait:g} s")
        return 1
    _write(_json(outcome))
    return 0 if outcome.ok else 1


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
