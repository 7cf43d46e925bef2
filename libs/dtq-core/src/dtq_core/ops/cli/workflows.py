"""``dtq workflow``: submit a workflow from a JSON file, show one with its steps, list and
cancel them; ``dtq batch``: create a batch, add tasks to it, seal, show and cancel it."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import msgspec

from dtq_core.canvas import from_json
from dtq_core.errors import WorkflowFailedError, WorkflowNotFoundError
from dtq_core.messages import BatchRecord, WorkflowStatus
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import _done, _fail, _json, _paint, _table, _time, _write


async def _read_json(path: str, what: str) -> Any:
    """The JSON value in ``path`` (``-``: standard input); ``None`` after saying why not."""
    try:
        source = sys.stdin if path == "-" else None
        text = source.read() if source else await asyncio.to_thread(Path(path).read_text)
        return msgspec.json.decode(text)
    except (OSError, msgspec.DecodeError) as exc:
        _fail(f"cannot read {what} from {path}: {exc}")
        return None


async def _workflow_submit(ns: argparse.Namespace, admin: Admin) -> int:
    """The file holds ``{"workflow": ..., "name": ..., "on_failure": ...}`` (the body of
    ``POST /api/v1/workflows``), or the definition alone."""
    body = await _read_json(ns.file, "a workflow")
    if body is None:
        return 1
    if not isinstance(body, dict):
        _fail(f"{ns.file} must hold a JSON object")
        return 1
    definition = body.get("workflow", body)
    handle = await admin.client.enqueue_workflow(
        from_json(definition),
        name=ns.name or body.get("name"),
        on_failure=ns.on_failure or body.get("on_failure", "fail"),
    )
    if ns.wait is None:
        return _done(ns, handle.id, id=handle.id)
    try:
        result = await handle.result(timeout=ns.wait)
    except TimeoutError:
        _fail(f"workflow {handle.id} did not end within {ns.wait:g} s")
        return 1
    except WorkflowFailedError as exc:
        _fail(exc.message)
        _write(_json(exc.detail))
        return 1
    _write(_json(result))
    return 0


async def _workflow_show(ns: argparse.Namespace, admin: Admin) -> int:
    record = await admin.client.workflows.get(ns.id)
    if record is None:
        _fail(f"workflow {ns.id} not found (it never existed, or its record expired)")
        return 1
    if ns.json:
        _write(_json(record))
        return 0
    _write(f"workflow {record.id}  {record.name or ''}".rstrip())
    _write(
        f"status {_paint(record.status)}  steps {record.steps_ended}/{record.steps_total} ended  "
        f"created {_time(record.created_at)}  ended {_time(record.finished_at)}"
    )
    if record.parent_task_id is not None:
        _write(f"children of task {record.parent_task_id}")
    if record.failed_step is not None:
        _write(f"failed at step {record.failed_step}: {_json(record.error)}")
    rows = [
        [
            str(s.step),
            s.task,
            s.queue,
            _paint(s.status),
            ",".join(map(str, s.depends_on)) or "-",
            str(s.attempts),
            s.task_id or "-",
        ]
        for s in record.steps
    ]
    _write(_table(["STEP", "TASK", "QUEUE", "STATUS", "AFTER", "ATTEMPTS", "TASK ID"], rows))
    return 0


async def _workflow_list(ns: argparse.Namespace, admin: Admin) -> int:
    found = await admin.client.workflows.list(
        status=WorkflowStatus(ns.status) if ns.status else None, limit=ns.limit
    )
    if ns.json:
        _write(_json(found))
        return 0
    if not found:
        _write("no workflows")
        return 0
    rows = [
        [
            w.id,
            w.name or "-",
            _paint(w.status),
            f"{w.steps_ended}/{w.steps_total}",
            _time(w.created_at),
        ]
        for w in found
    ]
    _write(_table(["WORKFLOW", "NAME", "STATUS", "ENDED", "CREATED"], rows))
    return 0


async def _workflow_cancel(ns: argparse.Namespace, admin: Admin) -> int:
    try:
        status = await admin.client.workflows.cancel(ns.id)
    except WorkflowNotFoundError as exc:
        _fail(exc.message)
        return 1
    # The audit entry the API writes for the same cancel.
    await admin.audit("workflow.cancel", queue="", actor=ns.actor, count=1, detail=f"id={ns.id}")
    return _done(ns, f"workflow {ns.id} {_paint(status)}", id=ns.id, status=status)


async def _batch_create(ns: argparse.Namespace, admin: Admin) -> int:
    """The file (optional) holds the body of ``POST /api/v1/batches``: ``name``,
    ``on_success``, ``on_complete``."""
    body: Any = {}
    if ns.file is not None:
        body = await _read_json(ns.file, "a batch")
        if body is None:
            return 1
        if not isinstance(body, dict):
            _fail(f"{ns.file} must hold a JSON object")
            return 1
    callbacks = {
        k: from_json(body[k], k) if body.get(k) is not None else None
        for k in ("on_success", "on_complete")
    }
    batch = await admin.client.batch(name=ns.name or body.get("name"), **callbacks).open()
    return _done(ns, batch.id, id=batch.id)


async def _batch_add(ns: argparse.Namespace, admin: Admin) -> int:
    """The file holds the body of ``POST /api/v1/batches/{id}/tasks`` (``{"tasks": [...]}``) or
    the list of steps alone; prints their task ids, one per line."""
    body = await _read_json(ns.file, "tasks")
    if body is None:
        return 1
    tasks = body.get("tasks") if isinstance(body, dict) else body
    if not isinstance(tasks, list) or not tasks:
        _fail(f'{ns.file} must hold a list of steps, or {{"tasks": [...]}}')
        return 1
    members = [from_json(t, f"tasks[{i}]") for i, t in enumerate(tasks)]
    try:
        ids = await admin.client.batch_of(ns.id).add_many(members)
    except WorkflowNotFoundError as exc:
        _fail(exc.message)
        return 1
    return _done(ns, "\n".join(i or "-" for i in ids), id=ns.id, tasks=ids)


def _show_batch(record: BatchRecord) -> None:
    _write(f"batch {record.id}  {record.name or ''}".rstrip())
    _write(
        f"status {_paint(record.status)}  {'sealed' if record.sealed else 'open'}  "
        f"created {_time(record.created_at)}  ended {_time(record.finished_at)}"
    )
    _write(
        f"tasks {record.total}: {record.pending} pending, {record.succeeded} succeeded, "
        f"{record.failed} failed"
    )
    _write(f"on_success {record.on_success or '-'}  on_complete {record.on_complete or '-'}")


async def _batch_show(ns: argparse.Namespace, admin: Admin) -> int:
    record = await admin.client.workflows.get_batch(ns.id)
    if record is None:
        _fail(f"batch {ns.id} not found (it never existed, or its record expired)")
        return 1
    if ns.json:
        _write(_json(record))
    else:
        _show_batch(record)
    return 0


async def _batch_seal(ns: argparse.Namespace, admin: Admin) -> int:
    batch = admin.client.batch_of(ns.id)
    try:
        await batch.seal()
        record = await batch.counts() if ns.wait is None else await batch.wait(ns.wait)
    except WorkflowNotFoundError as exc:
        _fail(exc.message)
        return 1
    except TimeoutError:
        _fail(f"batch {ns.id} did not end within {ns.wait:g} s")
        return 1
    if ns.json:
        _write(_json(record))
    else:
        _show_batch(record)
    return 0 if ns.wait is None or record.status is WorkflowStatus.SUCCEEDED else 1


async def _batch_cancel(ns: argparse.Namespace, admin: Admin) -> int:
    if await admin.client.workflows.get_batch(ns.id) is None:
        _fail(f"batch {ns.id} not found")
        return 1
    status = await admin.client.batch_of(ns.id).cancel()
    await admin.audit("batch.cancel", queue="", actor=ns.actor, count=1, detail=f"id={ns.id}")
    return _done(ns, f"batch {ns.id} {_paint(status)}", id=ns.id, status=status)
