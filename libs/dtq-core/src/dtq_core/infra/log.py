"""structlog set-up shared by every service: JSON in containers, readable on a terminal.

Every line logged inside a span carries ``trace_id`` and ``span_id``; every line logged while
a handler runs carries its ``task_id``, ``queue`` and ``attempt`` (:data:`current_task`).

One stream: what the libraries log through the standard library (uvicorn, asyncio, redis,
litestar, OpenTelemetry, a handler's ``logging.getLogger``), ``warnings.warn`` and uncaught
exceptions (the main thread's, other threads', and those Python can only report, raised in a
``__del__``) go through the same processors and renderer, so with ``DTQ_LOG_JSON=true`` every
line a service writes is one JSON object.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import MutableMapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Protocol

import msgspec
import structlog
from opentelemetry import trace

from dtq_core.infra import tracing

_SECRET_URL = re.compile(r"(rediss?://)([^:@/\s]*):([^@\s]+)@")
_SECRET_KEYS = {"authorization", "x-api-key", "password", "api_key"}


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event.items()):
        if key.lower() in _SECRET_KEYS:
            event[key] = "***"
        elif isinstance(value, str) and "://" in value:
            event[key] = _SECRET_URL.sub(r"\1\2:***@", value)
    return event


class RunningAttempt(Protocol):
    """What a log line needs of the attempt it is logged in (:class:`dtq_core.TaskContext`)."""

    @property
    def task_id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...


current_task: ContextVar[RunningAttempt | None] = ContextVar("dtq_task", default=None)
"""The attempt running in this context: the worker sets it once per attempt (one
``ContextVar.set``), and every line a handler logs carries its task id, queue and attempt."""


def _task_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    task = current_task.get()
    if task is not None:
        event.setdefault("task_id", task.task_id)
        event.setdefault("queue", task.queue)
        event.setdefault("attempt", task.attempt)
    return event


def _trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if "trace_id" not in event:
        trace_id, span_id = tracing.ids(trace.get_current_span())
        if trace_id is not None:
            event["trace_id"] = trace_id
            event.setdefault("span_id", span_id)
    return event


def _strip_event(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A library's message without its trailing newline (``warnings`` ends with one)."""
    message = event.get("event")
    if isinstance(message, str):
        event["event"] = message.rstrip()
    return event


def _json_dumps(obj: Any, default: Any = None, **_: Any) -> str:
    return msgspec.json.encode(obj, enc_hook=str).decode()


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    """Configure structlog, the standard library's logging and the hooks of uncaught
    exceptions and warnings, once per process (``runtime.startup`` calls it).

    structlog's own lines keep its fast path (a filtering logger writing to stderr); records
    of the standard library's loggers get the same fields and the same renderer through a
    :class:`structlog.stdlib.ProcessorFormatter` on the root logger, plus ``logger``, the
    name of the library's logger (``uvicorn.error``).
    """
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _task_fields,
        _trace_ids,
        _redact,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json_dumps)
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelName(level)
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line (PrintLogger writes the newline apart), so that a line of the
        # standard library's handler from another thread cannot land between the two.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_stdlib(numeric, shared, renderer, json)
    _hook_uncaught()


def _route_stdlib(level: int, shared: list[Any], renderer: Any, json: bool) -> None:
    """One handler on the root logger, rendering like structlog; handlers that write
    elsewhere go (a ``basicConfig`` at import, a library's own stream handler), and their
    loggers propagate to the root instead, so no line leaves in another format."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, _strip_event, *shared],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # The console renderer formats exc_info itself (as structlog's own lines).
            *([structlog.processors.format_exc_info] if json else []),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in list(logging.root.manager.loggerDict):
        named = logging.getLogger(name)
        writers = [h for h in named.handlers if not isinstance(h, logging.NullHandler)]
        for old in writers:
            named.removeHandler(old)
        if writers:
            named.propagate = True  # to the root's handler, not to none
    logging.captureWarnings(True)  # warnings.warn -> the "py.warnings" logger


def _hook_uncaught() -> None:
    """Uncaught exceptions become log lines (``uncaught_exception``, ``thread_exception``,
    ``unraisable_exception``) with the traceback in ``exception``, instead of a traceback
    printed as plain text."""
    log = structlog.get_logger("dtq")

    def main_thread(
        kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        log.critical("uncaught_exception", exc_info=(kind, exc, tb))

    def other_thread(args: threading.ExceptHookArgs) -> None:
        if issubclass(args.exc_type, SystemExit):
            return  # what threading's own hook ignores too
        exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
        thread = args.thread.name if args.thread is not None else None
        log.error("thread_exception", thread=thread, exc_info=exc_info)

    def unraisable(args: Any) -> None:  # sys.UnraisableHookArgs (not in typeshed's 3.11 stubs)
        fields: dict[str, Any] = {"message": args.err_msg or "exception ignored"}
        if args.object is not None:
            fields["object"] = repr(args.object)
        if args.exc_value is not None:
            fields["exc_info"] = (args.exc_type, args.exc_value, args.exc_traceback)
        log.warning("unraisable_exception", **fields)

    sys.excepthook = main_thread
    threading.excepthook = other_thread
    sys.unraisablehook = unraisable
