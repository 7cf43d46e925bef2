"""The ``dtq`` argument parser: every command, its arguments and the usage checks argparse
cannot express."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from dtq_core import __version__
from dtq_core.ops.admin import Admin, HistoryRange
from dtq_core.ops.cli.completion import SHELLS, completion
from dtq_core.ops.cli.dlq import DLQ_LIST_DEFAULT, _dlq_discard, _dlq_list, _dlq_purge, _dlq_requeue
from dtq_core.ops.cli.groups import (
    GROUP_LIST_DEFAULT,
    _group_list,
    _group_pause,
    _group_resume,
    _group_show,
    _group_weight,
)
from dtq_core.ops.cli.keys import keys_new
from dtq_core.ops.cli.migrate import _migrate
from dtq_core.ops.cli.queues import (
    _configure,
    _create,
    _delete,
    _pause,
    _purge,
    _resume,
    _show,
)
from dtq_core.ops.cli.schedules import schedule_commands
from dtq_core.ops.cli.stats import _stats
from dtq_core.ops.cli.status import _status
from dtq_core.ops.cli.tasks import _enqueue, _task, _task_cancel, _task_retry
from dtq_core.ops.cli.workers import _worker_list
from dtq_core.ops.cli.workflows import (
    _batch_add,
    _batch_cancel,
    _batch_create,
    _batch_seal,
    _batch_show,
    _workflow_cancel,
    _workflow_list,
    _workflow_show,
    _workflow_submit,
)

Handler = Callable[[argparse.Namespace, Admin], Awaitable[int]]


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
    json_help = "print JSON instead of a table" if listing else "print the outcome as JSON"
    parser.add_argument("--json", action="store_true", help=json_help)
    return parser


def _configure_options(p: argparse.ArgumentParser) -> None:
    """``dtq queue configure``'s settings (``none``/``default`` clears a limit)."""
    p.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="split the queue into N partitions, 1 to 64 (it may only grow)",
    )
    p.add_argument(
        "--max-depth",
        metavar="N",
        help="waiting tasks it admits (0: no limit; default: DTQ_MAX_QUEUE_DEPTH)",
    )
    p.add_argument("--rate", metavar="R", help="tasks started per period: 100/s, 6000/m (none)")
    p.add_argument("--burst", metavar="N", help="starts at once after a quiet time")
    p.add_argument("--concurrency", metavar="N", help="tasks running at once, all workers (none)")
    p.add_argument(
        "--group-concurrency", metavar="N", help="tasks of one group running at once (none)"
    )
    p.add_argument("--group-rate", metavar="R", help="tasks of one group started per period")


def _dedup_options(p: argparse.ArgumentParser) -> None:
    """``dtq enqueue``'s dedup mode (docs/flow-control.md, "Deduplication")."""
    p.add_argument(
        "--dedup",
        choices=("until_finished", "debounce", "throttle"),
        help="with --dedup-key: return the key's task instead of making one",
    )
    p.add_argument("--dedup-key", metavar="K", help="the key submits meet on")
    p.add_argument("--debounce", type=float, metavar="S", help="debounce: run S after the last")
    p.add_argument("--throttle", type=float, metavar="S", help="throttle: one task per S")
    p.add_argument("--group", metavar="G", help="the task's group (docs/flow-control.md)")


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
    parser.add_argument(
        "--json",
        dest="global_json",
        action="store_true",
        help="print JSON, as each command's --json does",
    )
    parser.add_argument("--version", action="version", version=f"dtq {__version__}")
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(subs, "status", _status, "queues and workers at a glance", listing=True)
    p.add_argument("--watch", action="store_true", help="redraw it until Ctrl-C")
    p.add_argument(
        "--interval",
        type=_positive,
        default=2.0,
        metavar="S",
        help="with --watch: seconds between redraws (default 2)",
    )

    p = _command(
        subs, "stats", _stats, "throughput, failures, run times and depth per minute", listing=True
    )
    p.add_argument(
        "--range",
        choices=[r.value for r in HistoryRange],
        default=HistoryRange.HOUR.value,
        help="how far back, up to now (default: 1h)",
    )
    p.add_argument("--queue", metavar="Q", help="one queue, its partitions added up (default: all)")

    p = _command(subs, "enqueue", _enqueue, "submit a task and print its id")
    p.add_argument("task", metavar="TASK", help="task name, e.g. emails.send")
    p.add_argument("--queue", help="queue (default: the queue the task is registered on)")
    p.add_argument("--args", type=_json_array, metavar="JSON", help="positional args, a JSON array")
    p.add_argument(
        "--kwargs", type=_json_object, metavar="JSON", help="keyword args, a JSON object"
    )
    p.add_argument(
        "--priority", type=int, default=5, metavar="N", help="0-9, 9 runs first (default: 5)"
    )
    p.add_argument("--delay", type=float, metavar="S", help="run no earlier than S seconds")
    p.add_argument("--idempotency-key", metavar="K", help="same key + same request = same task")
    _dedup_options(p)
    p.add_argument(
        "--wait",
        type=_positive,
        metavar="S",
        help="wait up to S seconds and print the outcome as JSON (exit 1 unless it succeeded)",
    )

    _task_commands(subs)
    worker = subs.add_parser("worker", help="list the workers of the registry")
    wsubs = worker.add_subparsers(dest="worker_command", required=True, metavar="ACTION")
    _command(
        wsubs,
        "list",
        _worker_list,
        "every worker: its queues, concurrency, state and heartbeat age",
        listing=True,
    )

    queue = subs.add_parser(
        "queue", help="create, delete, show, configure, pause, resume or purge a queue"
    )
    qsubs = queue.add_subparsers(dest="queue_command", required=True, metavar="ACTION")
    for name, handler, text in (
        ("create", _create, "create a queue, so it accepts submits before its workers start"),
        ("delete", _delete, "delete an empty queue (refused while it holds any task)"),
        ("show", _show, "print a queue's statistics and configuration as JSON"),
        ("configure", _configure, "change a queue's configuration (stored in Redis)"),
        ("pause", _pause, "stop starting tasks of a queue (running ones finish)"),
        ("resume", _resume, "start tasks of a paused queue again"),
        ("purge", _purge, "cancel every waiting task of a queue (needs --yes)"),
    ):
        p = _command(qsubs, name, handler, text)
        p.add_argument("queue", metavar="QUEUE")
        if name == "purge":
            p.add_argument("--yes", action="store_true", help="really purge")
        if name == "configure":
            _configure_options(p)

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

    schedule_commands(subs, _command, _json_array, _json_object)

    _dlq_commands(subs)
    _group_commands(subs)
    _workflow_commands(subs)
    _batch_commands(subs)
    _keys_commands(subs)
    _completion_command(subs, parser)
    return parser


TASK_ACTIONS = ("show", "cancel", "retry")
"""The actions of ``dtq task``; ``dtq task ID`` is ``dtq task show ID``."""


def _task_commands(subs: Any) -> None:
    task = subs.add_parser(
        "task",
        help="show, cancel or retry a task (`dtq task ID` shows it)",
        usage="dtq task [-h] {show,cancel,retry} ID\n       dtq task ID",
    )
    tsubs = task.add_subparsers(dest="task_command", required=True, metavar="ACTION")
    for name, handler, text in (
        ("show", _task, "print a task's record as JSON"),
        ("cancel", _task_cancel, "cancel a task not ended (a running one's worker is told)"),
        ("retry", _task_retry, "run a dead or failed task again (its attempts start over)"),
    ):
        p = _command(tsubs, name, handler, text)
        p.add_argument("id", metavar="ID", help="task id, <queue>:<32 hex digits>")


def with_default_task_action(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with ``show`` put in ``dtq task ID`` (the form from before the actions)."""
    takes_value = {
        o for a in parser._actions if a.nargs != 0 for o in a.option_strings
    }  # --actor: its value is not the command
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in takes_value else 1
    if i + 1 < len(argv) and argv[i] == "task":
        word = argv[i + 1]
        if word not in TASK_ACTIONS and not word.startswith("-"):
            return [*argv[: i + 1], "show", *argv[i + 1 :]]
    return argv


def _workflow_commands(subs: Any) -> None:
    workflow = subs.add_parser("workflow", help="submit, show, list and cancel workflows")
    wsubs = workflow.add_subparsers(dest="workflow_command", required=True, metavar="ACTION")
    p = _command(
        wsubs,
        "submit",
        _workflow_submit,
        "submit a workflow from a JSON file ('-': standard input) and print its id",
    )
    p.add_argument(
        "file", metavar="FILE", help="the body of POST /api/v1/workflows, or its workflow"
    )
    p.add_argument("--name", help="the workflow's name (wins over the file's)")
    p.add_argument(
        "--on-failure", choices=["fail", "continue", "ignore"], help="wins over the file's"
    )
    p.add_argument(
        "--wait",
        type=_positive,
        metavar="S",
        help="wait up to S seconds for its end and print its result (exit 1: it failed)",
    )
    p = _command(wsubs, "show", _workflow_show, "a workflow and each step", listing=True)
    p.add_argument("id", metavar="ID", help="workflow id (32 hex digits)")
    p = _command(wsubs, "list", _workflow_list, "recent workflows, newest first", listing=True)
    p.add_argument("--status", choices=["running", "succeeded", "failed", "cancelled"])
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = _command(wsubs, "cancel", _workflow_cancel, "cancel a workflow and its steps not ended")
    p.add_argument("id", metavar="ID", help="workflow id (32 hex digits)")


def _batch_commands(subs: Any) -> None:
    batch = subs.add_parser("batch", help="create batches, add tasks, seal, show and cancel them")
    bsubs = batch.add_subparsers(dest="batch_command", required=True, metavar="ACTION")
    p = _command(bsubs, "create", _batch_create, "create an open batch and print its id")
    p.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        help="the body of POST /api/v1/batches (name, on_success, on_complete); '-': stdin",
    )
    p.add_argument("--name", help="the batch's name (wins over the file's)")
    p = _command(bsubs, "add", _batch_add, "add tasks to an open batch and print their ids")
    p.add_argument("id", metavar="ID", help="batch id (32 hex digits)")
    p.add_argument(
        "file", metavar="FILE", help="a JSON list of steps, or {\"tasks\": [...]}; '-': stdin"
    )
    p = _command(bsubs, "seal", _batch_seal, "seal a batch: its callbacks run once all ended")
    p.add_argument("id", metavar="ID", help="batch id (32 hex digits)")
    p.add_argument(
        "--wait",
        type=_positive,
        metavar="S",
        help="wait up to S seconds for its end (exit 1: a task or callback failed)",
    )
    p = _command(bsubs, "show", _batch_show, "a batch's live counts", listing=True)
    p.add_argument("id", metavar="ID", help="batch id (32 hex digits)")
    p = _command(bsubs, "cancel", _batch_cancel, "cancel a batch and its tasks not ended")
    p.add_argument("id", metavar="ID", help="batch id (32 hex digits)")


def _dlq_commands(subs: Any) -> None:
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


def _group_commands(subs: Any) -> None:
    group = subs.add_parser("group", help="list a queue's groups, pause, resume or weigh one")
    gsubs = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    p = _command(gsubs, "list", _group_list, "a queue's groups, by name", listing=True)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--limit",
        type=int,
        default=GROUP_LIST_DEFAULT,
        help=f"groups per page, 1-1000 (default {GROUP_LIST_DEFAULT})",
    )
    p.add_argument("--cursor", help="the cursor printed under the previous page")
    for name, handler, text in (
        ("show", _group_show, "print one group as JSON"),
        ("pause", _group_pause, "stop starting a group's tasks (its running ones finish)"),
        ("resume", _group_resume, "start a paused group's tasks again"),
        ("weight", _group_weight, "give a group that many turns for another's one (1-100)"),
    ):
        p = _command(gsubs, name, handler, text)
        p.add_argument("queue", metavar="QUEUE")
        p.add_argument("group", metavar="GROUP")
        if name == "weight":
            p.add_argument("weight", metavar="N", type=int)


def _keys_commands(subs: Any) -> None:
    keys = subs.add_parser("keys", help="API keys for the REST API and the event gateway")
    ksubs = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    help_text = "make a key: its secret (shown once) and its DTQ_API_KEYS entry; no Redis needed"
    p = ksubs.add_parser("new", help=help_text, description=help_text)
    p.set_defaults(offline=keys_new, parser=p)
    p.add_argument("name", metavar="NAME", help="who holds it (a queue-name-like word)")
    p.add_argument("scopes", metavar="SCOPES", help="read, submit or admin, joined with +")
    p.add_argument("--json", action="store_true", help="print the secret and entry as JSON")


def _completion_command(subs: Any, root: argparse.ArgumentParser) -> None:
    help_text = "print a shell completion script (bash, zsh or fish); no Redis needed"
    p = subs.add_parser("completion", help=help_text, description=help_text)
    p.set_defaults(offline=completion, parser=p, root=root)
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help=", ".join(SHELLS))


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
