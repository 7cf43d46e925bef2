"""``dtq schedule list``: the schedules, when each fires next and how its last tick went."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import (
    _ERROR_WIDTH,
    _json,
    _table,
    _time,
    _write,
)
from dtq_core.ops.schedules import ScheduleInfo, ScheduleStore, describe


def _last_tick(info: ScheduleInfo) -> str:
    last = info.last_tick
    if last is None:
        return "-"
    when = _time(last.at)
    if last.outcome in {"fired", "replayed"} and last.task_id:
        return f"{last.outcome} {last.task_id} at {when}"
    if last.outcome == "skipped":
        return f"skipped (paused) at {when}"
    text = f"{last.outcome} at {when}: {last.code}: {last.reason}".replace("\n", " ")
    return text if len(text) <= _ERROR_WIDTH * 2 else text[: _ERROR_WIDTH * 2 - 3] + "..."


async def _schedule_list(ns: argparse.Namespace, admin: Admin) -> int:
    store = ScheduleStore(admin.redis, admin.keys)
    infos = await store.infos()
    if ns.json:
        _write(_json(infos))
        return 0
    if not infos:
        _write("no schedules")
        return 0
    rows = [
        [
            i.name,
            i.task,
            i.queue,
            describe(i),
            "paused" if i.paused else "active",
            _time(i.next_fire_at),
            _last_tick(i),
        ]
        for i in infos
    ]
    header = ["SCHEDULE", "TASK", "QUEUE", "WHEN", "STATE", "NEXT FIRE", "LAST TICK"]
    _write(_table(header, rows))
    return 0
