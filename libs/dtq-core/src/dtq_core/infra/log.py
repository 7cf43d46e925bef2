"""structlog set-up shared by every service: JSON in containers, readable on a terminal.

Every line logged inside a span carries ``trace_id`` and ``span_id``; every line logged while
a handler runs carries its ``task_id``, ``queue`` and ``attempt`` (:data:`current_task`).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
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


def _json_dumps(obj: Any, default: Any = None, **_: Any) -> str:
    return msgspec.json.encode(obj, enc_hook=str).decode()


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    """Configure structlog once per process (``runtime.run_service`` calls it)."""
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _task_fields,
        _trace_ids,
        _redact,
        structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
    ]
    if json:
        processors.append(structlog.processors.JSONRenderer(serializer=_json_dumps))
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
