"""structlog set-up shared by every service: JSON in containers, readable on a terminal."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import msgspec
import structlog

from dtq_core import tracing

_SECRET_URL = re.compile(r"(rediss?://)([^:@/\s]*):([^@\s]+)@")
_SECRET_KEYS = {"authorization", "x-api-key", "password", "api_key"}


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event.items()):
        if key.lower() in _SECRET_KEYS:
            event[key] = "***"
        elif isinstance(value, str) and "://" in value:
            event[key] = _SECRET_URL.sub(r"\1\2:***@", value)
    return event


def _trace_id(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if "trace_id" not in event:
        trace_id = tracing.current_trace_id()
        if trace_id:
            event["trace_id"] = trace_id
    return event


def _json_dumps(obj: Any, default: Any = None, **_: Any) -> str:
    return msgspec.json.encode(obj, enc_hook=str).decode()


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    """Configure structlog once per process (``runtime.run_service`` calls it)."""
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _trace_id,
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
