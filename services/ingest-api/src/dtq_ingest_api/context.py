"""Per-request context: the request id (set by the app for every HTTP request) and the actor.

Context variables rather than arguments, because the request id must reach the problem bodies,
the audit entries and every log line without each route passing it along.
"""

from __future__ import annotations

import itertools
import re
import secrets
from contextvars import ContextVar

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._-]{8,64}")

_request_id: ContextVar[str] = ContextVar("dtq_request_id", default="")


_PREFIX = secrets.token_hex(8)
_COUNTER = itertools.count(1)


def new_request_id(presented: str | None = None) -> str:
    """The id of a new request: the caller's ``X-Request-ID`` when it is a sane token (so a
    proxy's id follows the request), else 128 random bits."""
    if presented and _REQUEST_ID_RE.fullmatch(presented):
        return presented
    # Unique, not secret: a random prefix per process and a counter (no syscall per request).
    return f"{_PREFIX}{next(_COUNTER):016x}"


def set_request_id(value: str) -> None:
    _request_id.set(value)


def request_id() -> str:
    """The current request's id ("" outside a request)."""
    return _request_id.get()
