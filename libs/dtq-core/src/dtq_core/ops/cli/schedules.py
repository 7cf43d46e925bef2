"""``dtq schedule list|show|next|put|pause|resume|delete``: the schedules, when each fires
next and how its last tick went; changes are audited as the REST API's are (``--actor``)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from dtq_core.errors import UnknownQueueError, UnknownTaskError, ValidationError
from dtq_core.ops import audit
from dtq_core.ops.admin import Admin
from dtq_core.ops.audit import Fields
from dtq_core.ops.cli.output import (
    _ERROR_WIDTH,
    _fail,
    _json,
    _table,
    _time,
    _write,
)
from dtq_core.ops.cli.workflows import _read_json
from dtq_core.ops.schedules import (
    MISFIRED,
    AuditFor,
    ScheduleInfo,
    ScheduleSpec,
    ScheduleStore,
    audit_detail,
    describe,
)

Command = Callable[..., argparse.ArgumentParser]
"""``parser._command``: adds one subcommand (passed in, so this module imports no parser)."""


def _store(admin: Admin) -> ScheduleStore:
    return ScheduleStore(
        admin.redis, admin.keys, max_payload_bytes=admin.client.settings.tasks.max_payload_bytes
    )


async def _audit_for(admin: Admin, ns: argparse.Namespace, action: str) -> AuditFor:
    """The audit entry of a change, as the REST routes write it, with ``--actor``."""
    stamp = await admin.stamp()

    def entry(spec: ScheduleSpec) -> Fields:
        return stamp.entry(
            action, queue=spec.queue, actor=ns.actor, count=1, detail=audit_detail(spec)
        )

    return entry


def _last_tick(info: ScheduleInfo) -> str:
    last = info.last_tick
    if last is None:
        return "-"
    when = _time(last.at)
    if last.outcome in {"fired", "replayed"} and last.task_id:
        return f"{last.outcome} {last.task_id} at {when}"
    if last.outcome == "skipped":
        why = "misfired" if last.code == MISFIRED else "paused"
        return f"skipped ({why}) at {when}"
    text = f"{last.outcome} at {when}: {last.code}: {last.reason}".replace("\n", " ")
    return text if len(text) <= _ERROR_WIDTH * 2 else text[: _ERROR_WIDTH * 2 - 3] + "..."


async def _schedule_list(ns: argparse.Namespace, admin: Admin) -> int:
    infos = await _store(admin).infos()
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


def _missing(name: str) -> int:
    _fail(f"schedule {name} not found (dtq schedule list shows them)")
    return 1


async def _schedule_show(ns: argparse.Namespace, admin: Admin) -> int:
    info = await _store(admin).info(ns.name)
    if info is None:
        return _missing(ns.name)
    if ns.json:
        _write(_json(info))
        return 0
    rows = [
        ["task", info.task],
        ["queue", info.queue],
        ["when", describe(info)],
        ["timezone", info.timezone],
        ["misfire", info.misfire + (f" (cap {info.misfire_cap})" if info.misfire == "all" else "")],
        ["jitter", f"{info.jitter_s:g}s"],
        ["priority", str(info.priority)],
        ["args", msgspec.json.encode(info.args).decode()],
        ["kwargs", msgspec.json.encode(info.kwargs).decode()],
        ["state", "paused" if info.paused else "active"],
        ["next fire", _time(info.next_fire_at)],
        ["last tick", _last_tick(info)],
    ]
    _write(f"schedule {info.name}")
    _write(_table(["FIELD", "VALUE"], rows))
    return 0


async def _schedule_next(ns: argparse.Namespace, admin: Admin) -> int:
    if not 1 <= ns.count <= 100:
        _fail(f"--count must be from 1 to 100, got {ns.count}")
        return 1
    try:
        upcoming = await _store(admin).upcoming(ns.name, ns.count)
    except ValueError as exc:  # a zone this host's tz database lacks; a cron that never fires
        _fail(f"schedule {ns.name} has no next tick here: {exc}")
        return 1
    if upcoming is None:
        return _missing(ns.name)
    if ns.json:
        _write(_json(upcoming))
        return 0
    if upcoming.paused:
        _write(f"schedule {ns.name} is paused: it fires none of these until it is resumed")
    rows = [[_time(i.at), i.local, f"{i.delay_s:g}s"] for i in upcoming.items]
    _write(_table(["TICK (UTC)", f"LOCAL ({upcoming.timezone})", "DELAY"], rows))
    return 0


_FLAGS = (
    "task", "queue", "cron", "every_s", "args", "kwargs", "priority", "timezone", "misfire",
    "misfire_cap", "jitter_s",
)  # fmt: skip


async def _put_body(ns: argparse.Namespace) -> dict[str, Any] | None:
    """The file's body with the flags over it (a timing flag replaces the file's timing);
    None after saying why not."""
    body: Any = {}
    if ns.file is not None:
        body = await _read_json(ns.file, "a schedule")
        if body is None:
            return None
        if not isinstance(body, dict):
            _fail(f"{ns.file} must hold a JSON object")
            return None
    unknown = sorted(set(body) - set(ScheduleSpec.__struct_fields__) - {"allow_unknown_task"})
    if unknown:
        raise ValidationError(f"unknown field {unknown[0]!r} in {ns.file}", field=unknown[0])
    if ns.cron is not None or ns.every_s is not None:
        body = {k: v for k, v in body.items() if k not in {"cron", "every_s"}}
    body.update({f: getattr(ns, f) for f in _FLAGS if getattr(ns, f) is not None})
    if ns.paused:
        body["paused"] = True
    if ns.allow_unknown_task:
        body["allow_unknown_task"] = True
    if body.setdefault("name", ns.name) != ns.name:
        raise ValidationError(
            f"the file names schedule {body['name']!r} but the command names {ns.name!r}",
            field="name",
        )
    if not isinstance(body.get("task"), str):
        raise ValidationError('give the task (--task or "task" in the file)', field="task")
    return dict(body)


async def _schedule_put(ns: argparse.Namespace, admin: Admin) -> int:
    """The file holds the body of ``PUT /api/v1/schedules/{name}``; flags win over it."""
    body = await _put_body(ns)
    if body is None:
        return 1
    allow = bool(body.pop("allow_unknown_task", False))
    try:
        body["queue"] = await admin.client.route_for(
            body["task"], body.get("queue"), enforce=not allow
        )
    except (UnknownTaskError, UnknownQueueError) as exc:
        _fail(
            f"{exc.message}; every tick would be refused (store it anyway with "
            "--allow-unknown-task)"
        )
        return 1
    try:
        spec = msgspec.convert(body, ScheduleSpec)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"invalid schedule: {exc}") from None
    audit_for = await _audit_for(admin, ns, "schedule.put")
    created = await _store(admin).put(spec, audit_for=audit_for)
    audit.logged(audit_for(spec))
    info = await _store(admin).info(spec.name)
    after = f"; next fire {_time(info.next_fire_at)}" if info is not None else ""
    _write(f"schedule {spec.name} {'created' if created else 'replaced'}: {describe(spec)}{after}")
    return 0


def _change(
    action: str, done: str, change: Callable[[ScheduleStore], Callable[..., Awaitable[Any]]]
) -> Callable[[argparse.Namespace, Admin], Awaitable[int]]:
    async def handler(ns: argparse.Namespace, admin: Admin) -> int:
        audit_for = await _audit_for(admin, ns, f"schedule.{action}")
        spec = await change(_store(admin))(ns.name, audit_for=audit_for)
        if spec is None:
            return _missing(ns.name)
        audit.logged(audit_for(spec))
        _write(f"schedule {ns.name} {done}")
        return 0

    return handler


_schedule_pause = _change("pause", "paused: it fires nothing until resumed", lambda s: s.pause)
_schedule_resume = _change("resume", "resumed: it fires from its next tick on", lambda s: s.resume)
_schedule_delete = _change("delete", "deleted", lambda s: s.delete)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def schedule_commands(
    subs: Any,
    command: Command,
    json_array: Callable[[str], Any],
    json_object: Callable[[str], Any],
) -> None:
    """Add ``dtq schedule ...`` to the parser (``command``: ``parser._command``; the JSON
    flag parsers of ``parser``)."""
    schedule = subs.add_parser(
        "schedule", help="list, show, put, pause, resume, delete schedules; their next ticks"
    )
    ssubs = schedule.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    command(
        ssubs,
        "list",
        _schedule_list,
        "every schedule with its next fire time and its last tick: the task it fired, or why "
        "it was refused",
        listing=True,
    )
    p = command(ssubs, "show", _schedule_show, "one schedule and its last tick", listing=True)
    p.add_argument("name", metavar="NAME")
    p = command(
        ssubs,
        "next",
        _schedule_next,
        "a schedule's next ticks (UTC and on its clock), as the scheduler computes them",
        listing=True,
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--count", type=_int, default=5, metavar="N", help="1-100 (default 5)")
    p = command(
        ssubs,
        "put",
        _schedule_put,
        "create or replace a schedule from a JSON file (the body of PUT "
        "/api/v1/schedules/NAME; '-': stdin) and/or flags (flags win)",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("file", metavar="FILE", nargs="?")
    p.add_argument("--task", help="the task submitted at each tick")
    p.add_argument("--queue", help="default: the queue the task is registered on")
    p.add_argument("--cron", help="five cron fields or an alias such as @hourly")
    p.add_argument("--every", dest="every_s", type=float, metavar="S", help="interval, seconds")
    p.add_argument("--timezone", metavar="ZONE", help="IANA zone of --cron (default UTC)")
    p.add_argument("--misfire", choices=("skip", "latest", "all"), help="default latest")
    p.add_argument("--misfire-cap", dest="misfire_cap", type=_int, metavar="N", help="1-1000")
    p.add_argument("--jitter", dest="jitter_s", type=float, metavar="S", help="0-3600 s")
    p.add_argument("--args", type=json_array, metavar="JSON", help="a JSON array")
    p.add_argument("--kwargs", type=json_object, metavar="JSON", help="a JSON object")
    p.add_argument("--priority", type=_int, metavar="N", help="0-9, 9 runs first (default 5)")
    p.add_argument("--paused", action="store_true", help="store it paused")
    p.add_argument(
        "--allow-unknown-task",
        action="store_true",
        help="store it although no live worker of its queue handles the task yet",
    )
    for name, handler, text in (
        ("pause", _schedule_pause, "stop a schedule firing (ticks that pass are skipped)"),
        ("resume", _schedule_resume, "let a paused schedule fire again from its next tick"),
        ("delete", _schedule_delete, "delete a schedule, its watermark and last tick"),
    ):
        p = command(ssubs, name, handler, text)
        p.add_argument("name", metavar="NAME")
