"""The operator CLI ``dtq``: status, submit and inspect tasks, steer queues and the DLQ.

Every operation goes through :class:`dtq_core.ops.admin.Admin` or the SDK :class:`Client`, the
same code the REST API runs. Settings come from ``DTQ_*`` variables (``DTQ_REDIS_URL``).

Exit status: 0 done; 1 the operation failed (bad input, no such task or queue, Redis did not
answer, or ``enqueue --wait`` saw the task end other than ``succeeded``); 2 usage or settings
errors; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq_core.client import Client
from dtq_core.errors import DtqError, LibraryMissingError, RedisUnavailableError
from dtq_core.infra.log import configure_logging
from dtq_core.infra.settings import Settings, public_url, settings_or_exit
from dtq_core.messages import TaskSummary
from dtq_core.names import split_task_id
from dtq_core.ops.admin import Admin, QueueStats, WorkerInfo
from dtq_core.ops.schedules import ScheduleInfo, ScheduleStore, describe
from dtq_core.protocol.scripts import load_library, prune_libraries

Handler = Callable[[argparse.Namespace, Admin], Awaitable[int]]

_ERROR_WIDTH = 60
DLQ_LIST_DEFAULT = 50
"""Tasks per page of ``dtq dlq list`` unless ``--limit`` says otherwise."""


def _write(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _fail(text: str) -> None:
    sys.stderr.write(f"dtq: {text}\n")


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [headers]]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _by_priority(depth: dict[str, int]) -> str:
    parts = [f"p{p}:{depth[str(p)]}" for p in range(9, -1, -1) if depth.get(str(p))]
    return " ".join(parts) or "-"


def _time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


# -- commands ---------------------------------------------------------------------------------


def _queue_rows(queues: Sequence[QueueStats]) -> list[list[str]]:
    return [
        [
            q.name,
            "yes" if q.paused else "no",
            str(q.depth),
            _by_priority(q.depth_by_priority),
            str(q.delayed),
            str(q.in_flight),
            str(q.dead),
            _age(q.oldest_waiting_age_s),
        ]
        for q in queues
    ]


def _worker_rows(workers: Sequence[WorkerInfo]) -> list[list[str]]:
    return [
        [
            w.id,
            w.host or "-",
            str(w.pid or "-"),
            ",".join(w.queues) or "-",
            str(w.concurrency),
            str(w.in_flight),
            str(w.processed),
            str(w.failed),
            w.state,
            _age(w.heartbeat_age_s) + " ago",
        ]
        for w in workers
    ]


async def _status(ns: argparse.Namespace, admin: Admin) -> int:
    queues = await admin.queues()
    workers = await admin.workers()
    if ns.json:
        _write(_json({"queues": queues, "workers": workers}))
        return 0
    if queues:
        headers = ["QUEUE", "PAUSED", "DEPTH", "P9..P0", "DELAYED", "IN FLIGHT", "DEAD", "OLDEST"]
        _write(_table(headers, _queue_rows(queues)))
    else:
        _write("no queues yet: start a worker, or create one with `dtq queue create`")
    _write()
    if workers:
        headers = [
            "WORKER", "HOST", "PID", "QUEUES", "CONC", "IN FLIGHT", "PROCESSED", "FAILED",
            "STATE", "HEARTBEAT",
        ]  # fmt: skip
        _write(_table(headers, _worker_rows(workers)))
    else:
        _write("no workers")
    return 0


async def _enqueue(ns: argparse.Namespace, admin: Admin) -> int:
    handle = await admin.client.enqueue(
        ns.task,
        ns.args,
        ns.kwargs,
        queue=ns.queue,
        priority=ns.priority,
        delay_s=ns.delay,
        idempotency_key=ns.idempotency_key,
    )
    if not handle.created:
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
            _last_tick(i),
        ]
        for i in infos
    ]
    _write(_table(["SCHEDULE", "TASK", "QUEUE", "WHEN", "STATE", "LAST TICK"], rows))
    return 0


async def _dlq_requeue(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.dlq_requeue(
        ns.queue, ns.ids or None, all=ns.all, task=ns.task, actor=ns.actor
    )
    _write(f"requeued {count} dead tasks of queue {ns.queue}")
    return 0


async def _dlq_discard(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.dlq_discard(ns.queue, ns.ids, actor=ns.actor)
    _write(f"discarded {count} dead tasks of queue {ns.queue}")
    return 0


async def _dlq_purge(ns: argparse.Namespace, admin: Admin) -> int:
    count = await admin.dlq_purge(ns.queue, actor=ns.actor)
    _write(f"removed {count} entries from the dead-letter queue of {ns.queue}")
    return 0


async def _migrate(ns: argparse.Namespace, admin: Admin) -> int:
    name = await load_library(admin.client.redis)
    _write(f"loaded function library {name}")
    if ns.prune:
        pruned = await prune_libraries(admin.client.redis)
        _write(
            f"deleted {len(pruned)} older libraries" + (f": {', '.join(pruned)}" if pruned else "")
        )
    return 0


# -- arguments --------------------------------------------------------------------------------


def _json_array(text: str) -> list[Any]:
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError("must be a JSON array, e.g. '[1, \"a\"]'")
    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, e.g. \'{"to": "a@b.c"}\'')
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _command(
    subs: Any, name: str, handler: Handler, help_text: str, *, listing: bool = False
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subs.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(handler=handler, parser=parser)
    if listing:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``dtq`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="dtq",
        description="Operate a dtq deployment (Redis from DTQ_REDIS_URL).",
        epilog="Exit status: 0 done, 1 the operation failed, 2 usage or settings error.",
    )
    parser.add_argument(
        "--actor", default="cli", help="who to record in the audit stream (default: cli)"
    )
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _command(subs, "status", _status, "queues and workers at a glance", listing=True)

    p = _command(subs, "enqueue", _enqueue, "submit a task and print its id")
    p.add_argument("task", metavar="TASK", help="task name, e.g. emails.send")
    p.add_argument("--queue", help="queue (default: the queue the task is registered on)")
    p.add_argument("--args", type=_json_array, metavar="JSON", help="positional args, a JSON array")
    p.add_argument(
        "--kwargs", type=_json_object, metavar="JSON", help="keyword args, a JSON object"
    )
    p.add_argument("--priority", type=int, metavar="N", help="0-9, 9 runs first (default: 5)")
    p.add_argument("--delay", type=float, metavar="S", help="run no earlier than S seconds")
    p.add_argument("--idempotency-key", metavar="K", help="same key + same request = same task")
    p.add_argument(
        "--wait",
        type=_positive,
        metavar="S",
        help="wait up to S seconds and print the outcome as JSON (exit 1 unless it succeeded)",
    )

    p = _command(subs, "task", _task, "print a task's record as JSON")
    p.add_argument("id", metavar="ID", help="task id, <queue>:<32 hex digits>")

    queue = subs.add_parser("queue", help="create, delete, pause, resume or purge a queue")
    qsubs = queue.add_subparsers(dest="queue_command", required=True, metavar="ACTION")
    for name, handler, text in (
        ("create", _create, "create a queue, so it accepts submits before its workers start"),
        ("delete", _delete, "delete an empty queue (refused while it holds any task)"),
        ("pause", _pause, "stop starting tasks of a queue (running ones finish)"),
        ("resume", _resume, "start tasks of a paused queue again"),
        ("purge", _purge, "cancel every waiting task of a queue (needs --yes)"),
    ):
        p = _command(qsubs, name, handler, text)
        p.add_argument("queue", metavar="QUEUE")
        if name == "purge":
            p.add_argument("--yes", action="store_true", help="really purge")

    p = _command(
        subs,
        "migrate",
        _migrate,
        "load this version's function library into Redis (run at each deploy, as a user "
        "allowed FUNCTION LOAD)",
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="also delete older dtq libraries (once no older service version runs)",
    )

    schedule = subs.add_parser("schedule", help="list the schedules and how their last tick went")
    ssubs = schedule.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    _command(
        ssubs,
        "list",
        _schedule_list,
        "every schedule with its last tick: the task it fired, or why it was refused",
        listing=True,
    )

    dlq = subs.add_parser("dlq", help="browse and steer a queue's dead-letter queue")
    dsubs = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    p = _command(dsubs, "list", _dlq_list, "dead tasks, newest first", listing=True)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--limit",
        type=int,
        default=DLQ_LIST_DEFAULT,
        help=f"tasks per page, 1-1000 (default {DLQ_LIST_DEFAULT})",
    )
    p.add_argument("--task", metavar="NAME", help="only tasks with this name")
    p.add_argument("--cursor", help="the cursor printed under the previous page")
    p = _command(dsubs, "requeue", _dlq_requeue, "run dead tasks again")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="*", help="task ids")
    p.add_argument("--all", action="store_true", help="every dead task of the queue")
    p.add_argument("--task", metavar="NAME", help="every dead task with this name")
    p = _command(dsubs, "discard", _dlq_discard, "delete dead tasks")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", metavar="ID", nargs="+", help="task ids")
    p = _command(dsubs, "purge", _dlq_purge, "delete every dead task of a queue (needs --yes)")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--yes", action="store_true", help="really purge")
    return parser


def _usage_problem(ns: argparse.Namespace) -> str | None:
    # Only the purge commands have --yes; the others pass this check.
    if getattr(ns, "yes", True) is False:
        if ns.handler is _purge:
            return (
                f"this cancels every waiting task of queue {ns.queue} (queued, scheduled and"
                " retrying ones; running tasks finish), and the cancelled tasks cannot be"
                " requeued: add --yes to go ahead"
            )
        return (
            f"this deletes every dead task of queue {ns.queue} and its record for good:"
            " add --yes to go ahead"
        )
    if ns.handler is _dlq_requeue and sum((bool(ns.ids), ns.all, ns.task is not None)) != 1:
        return "give exactly one of: --all, --task NAME, or task ids"
    return None


# -- running ----------------------------------------------------------------------------------


async def _run(ns: argparse.Namespace, settings: Settings) -> int:
    url = public_url(settings.redis.url)
    try:
        client = Client.from_settings(settings, client_name="dtq-cli")
    except ValueError as exc:  # redis-py refuses the URL itself (unknown scheme, bad port)
        _fail(f"DTQ_REDIS_URL={url!r} is invalid: {exc}")
        return 2
    try:
        handler: Handler = ns.handler
        return await handler(ns, Admin(client))
    except AuthenticationError as exc:
        _fail(f"Redis at {url} refused the credentials: {exc}")
    except LibraryMissingError as exc:
        _fail(exc.message)
    except (RedisUnavailableError, RedisConnectionError, RedisTimeoutError):
        _fail(f"Redis at {url} did not answer")
    except DtqError as exc:
        _fail(exc.message)
    except RedisError as exc:
        _fail(f"Redis at {url} refused the command: {exc}")
    finally:
        await client.aclose()
    return 1


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``dtq``."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    problem = _usage_problem(ns)
    if problem:
        ns.parser.error(problem)
    settings = settings_or_exit("dtq")
    # Log lines would interleave with the output; admin actions are in the audit stream.
    configure_logging("WARNING")
    try:
        code = asyncio.run(_run(ns, settings))
    except KeyboardInterrupt:
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
