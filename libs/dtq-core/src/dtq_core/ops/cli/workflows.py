"""``dtq workflow``: submit a workflow from a JSON file, show one with its steps, list and
cancel them."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import msgspec

from dtq_core.canvas import from_json
from dtq_core.errors import WorkflowFailedError, WorkflowNotFoundError
from dtq_core.messages import WorkflowStatus
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import _fail, _json, _table, _time, _write


async def _workflow_submit(ns: argparse.Namespace, admin: Admin) -> int:
    """The file holds ``{"workflow": ..., "name": ..., "on_failure": ...}`` (the body of
    ``POST /api/v1/workflows``), or the definition alone."""
    try:
        source = sys.stdin if ns.file == "-" else None
        text = source.read() if source else await asyncio.to_thread(Path(ns.file).read_text)
        body = msgspec.json.decode(text)
    except (OSError, msgspec.DecodeError) as exc:
        _fail(f"cannot read a workflow from {ns.file}: {exc}")
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
        _write(handle.id)
        return 0
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
        f"status {record.status}  steps {record.steps_ended}/{record.steps_total} ended  "
        f"created {_time(record.created_at)}  ended {_time(record.finished_at)}"
    )
    if record.failed_step is not None:
        _write(f"failed at step {record.failed_step}: {_json(record.error)}")
    rows = [
        [
            str(s.step),
            s.task,
            s.queue,
            s.status,
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
        [w.id, w.name or "-", w.status, f"{w.steps_ended}/{w.steps_total}", _time(w.created_at)]
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
    _write(f"workflow {ns.id} {status}")
    return 0
