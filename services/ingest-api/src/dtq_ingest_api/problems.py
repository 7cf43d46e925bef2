"""Errors as RFC 9457 problem details: the ONE place where an error code becomes an HTTP status.

Every error the API returns is ``application/problem+json`` with ``type``, ``title``,
``status``, ``detail``, a stable ``code`` and the ``request_id`` (also in the ``X-Request-ID``
header), plus ``errors`` for field-level details. Bodies never carry stack traces, Redis
addresses or exception texts of libraries: an unexpected error is logged with its traceback
and answered with a fixed message (docs/testing.md, reliability catalogue C16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import structlog
from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.openapi.datastructures import ResponseSpec
from redis.exceptions import (
    ClusterDownError,
    MaxConnectionsError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq_core.errors import DtqError, RedisBusyError, RedisUnavailableError, ValidationError
from dtq_ingest_api.context import request_id
from dtq_ingest_api.schemas import FieldError, Problem

log = structlog.get_logger()

PROBLEM_JSON: Final = "application/problem+json"

STATUS: Final[Mapping[str, int]] = {
    # dtq-core's codes (dtq_core.errors)
    "validation_error": 422,
    "invalid_name": 422,
    "unknown_task": 422,
    "unknown_queue": 422,
    "payload_too_large": 413,
    "queue_full": 429,
    "queue_limit": 409,
    "queue_not_empty": 409,
    "idempotency_conflict": 409,
    "invalid_state": 409,
    "stale_lease": 409,
    "stale_leader": 409,
    "task_not_found": 404,
    "queue_not_found": 404,
    "schedule_not_found": 404,
    "workflow_not_found": 404,
    "workflow_failed": 409,
    "redis_unavailable": 503,
    "redis_busy": 503,
    "redis_not_replicated": 503,
    "invalid_setting": 500,
    "batch_refused": 422,
    # the HTTP layer's own
    "too_many_waits": 429,
    "malformed_json": 400,
    "bad_request": 400,
    "unknown_field": 422,
    "duplicate_key": 422,
    "unauthorized": 401,
    "forbidden": 403,
    "forbidden_origin": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "unsupported_media_type": 415,
    "overloaded": 503,
    "host_not_allowed": 421,
    "internal_error": 500,
}
"""Error code -> HTTP status. docs/api.md has the same table with meanings."""

TITLES: Final[Mapping[str, str]] = {
    "validation_error": "Invalid request",
    "batch_refused": "Some tasks of the batch were refused",
    "invalid_name": "Invalid queue or task name",
    "unknown_task": "Unknown task",
    "unknown_queue": "Unknown queue",
    "queue_limit": "Too many queues",
    "queue_not_empty": "Queue not empty",
    "payload_too_large": "Payload too large",
    "queue_full": "Queue full",
    "idempotency_conflict": "Idempotency key conflict",
    "invalid_state": "Not allowed in the current state",
    "stale_lease": "Stale lease",
    "stale_leader": "Stale leader",
    "task_not_found": "Task not found",
    "queue_not_found": "Queue not found",
    "schedule_not_found": "Schedule not found",
    "workflow_not_found": "Workflow not found",
    "workflow_failed": "Workflow failed",
    "redis_unavailable": "Redis unavailable",
    "redis_busy": "Server busy",
    "redis_not_replicated": "Not confirmed by replicas",
    "invalid_setting": "Internal error",
    "too_many_waits": "Too many waits",
    "malformed_json": "Malformed JSON",
    "bad_request": "Bad request",
    "unknown_field": "Unknown field",
    "duplicate_key": "Duplicate key",
    "unauthorized": "Unauthorized",
    "forbidden": "Forbidden",
    "forbidden_origin": "Foreign origin",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "unsupported_media_type": "Unsupported media type",
    "overloaded": "Overloaded",
    "host_not_allowed": "Host not served",
    "internal_error": "Internal error",
}

QUEUE_FULL_RETRY_AFTER_S = 5
"""Retry-After of a 429: long enough for workers to drain part of a full queue."""
REDIS_RETRY_AFTER_S = 2
"""Retry-After of a 503: a Redis restart or failover usually takes a few seconds (so does a
replica that lagged past ``DTQ_REDIS_WAIT_TIMEOUT_MS``, for ``redis_not_replicated``)."""
BUSY_RETRY_AFTER_S = 1
"""Retry-After of a ``redis_busy`` 503: the pool frees connections within milliseconds."""

_FIXED_DETAIL = {
    "redis_unavailable": "Redis did not answer; retry later",
    "invalid_setting": "the server failed to handle the request",
    "internal_error": "the server failed to handle the request",
}
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}
_NAME_PARAMS = frozenset({"queue", "task", "name"})
_REDIS_BUSY = (
    "OOM",
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "BUSY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOREPLICAS",  # min-replicas-to-write: too few replicas connected to take writes
)
"""Error replies of a Redis that is up but cannot serve writes now (when redis-py does not
already raise a class of its own for them)."""


class ApiError(Exception):
    """An error of the HTTP layer itself (bodies, authentication), with its stable code."""

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        errors: Sequence[FieldError] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        if code not in STATUS:
            raise ValueError(f"unknown error code {code!r}")
        self.code = code
        self.detail = detail
        self.errors = list(errors) if errors else None
        self.headers = dict(headers or {})


def problem(
    code: str,
    detail: str,
    *,
    errors: Sequence[FieldError] | None = None,
    **extra: Any,
) -> Problem:
    """The problem body for ``code`` (its status and title come from the tables above)."""
    return Problem(
        type=f"urn:dtq:problem:{code}",
        title=TITLES[code],
        status=STATUS[code],
        detail=detail,
        code=code,
        request_id=request_id(),
        errors=list(errors) if errors else None,
        **extra,
    )


def problem_body(code: str, detail: str, rid: str, **extra: Any) -> bytes:
    """:func:`problem` encoded, for answers written outside a request's context (the HTTP
    protocol's own refusals, protocol.py), with the request id they were given."""
    return msgspec.json.encode(
        msgspec.structs.replace(problem(code, detail, **extra), request_id=rid)
    )


def _source(connection: ASGIConnection[Any, Any, Any, Any], field: str) -> str:
    if field in connection.query_params:
        return "query"
    if field in connection.path_params:
        return "path"
    return "body"


def from_dtq_error(
    exc: DtqError, connection: ASGIConnection[Any, Any, Any, Any] | None = None
) -> tuple[Problem, dict[str, str]]:
    """The problem (and headers) for an error raised by dtq-core."""
    code = exc.code if exc.code in STATUS else "internal_error"
    detail = _FIXED_DETAIL.get(code, exc.message)
    extra: dict[str, Any] = {}
    for key in ("limit", "task_id", "queue", "queues"):
        value = exc.detail.get(key)
        if value is not None:
            extra[key] = value
    headers: dict[str, str] = {}
    if code == "queue_full":
        headers["Retry-After"] = str(QUEUE_FULL_RETRY_AFTER_S)
        extra["retry_after_s"] = QUEUE_FULL_RETRY_AFTER_S
    elif code in ("redis_unavailable", "redis_not_replicated"):
        headers["Retry-After"] = str(REDIS_RETRY_AFTER_S)
        extra["retry_after_s"] = REDIS_RETRY_AFTER_S
    elif code == "redis_busy":
        headers["Retry-After"] = str(BUSY_RETRY_AFTER_S)
        extra["retry_after_s"] = BUSY_RETRY_AFTER_S
    errors = None
    if isinstance(exc, ValidationError) and exc.field:
        source = _source(connection, exc.field) if connection is not None else "body"
        errors = [
            FieldError(
                message=exc.message,
                field=exc.field,
                source=source,
                pointer=f"/{exc.field}" if source == "body" else None,
                code=code,
            )
        ]
    return problem(code, detail, errors=errors, **extra), headers


def _from_http(
    exc: HTTPException, request: Request[Any, Any, Any]
) -> tuple[Problem, dict[str, str]]:
    headers = dict(exc.headers or {})
    if isinstance(exc, ValidationException):
        errors = []
        for item in exc.extra if isinstance(exc.extra, list) else []:
            key = str(item.get("key", "")) if isinstance(item, dict) else ""
            message = str(item.get("message", "")) if isinstance(item, dict) else str(item)
            if key == "data":
                message = "a JSON request body is required"
            errors.append(
                FieldError(
                    message=message,
                    field=key or None,
                    source=_source_name(item.get("source", "body"))
                    if isinstance(item, dict)
                    else None,
                )
            )
        detail = "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in errors)
        names = [e for e in errors if e.field in _NAME_PARAMS]
        kind = "invalid_name" if errors and len(names) == len(errors) else "validation_error"
        return problem(kind, detail or "invalid request", errors=errors), headers
    if isinstance(exc, NotFoundException):
        return problem("not_found", f"no route for {request.method} {request.url.path}"), {}
    if isinstance(exc, MethodNotAllowedException):
        return problem("method_not_allowed", f"{request.method} is not allowed here"), headers
    code = _HTTP_CODES.get(exc.status_code)
    if exc.status_code == 413:
        limit = _body_limit(request)
        detail = "the request body is larger than the limit" + (
            f" of {limit} bytes" if limit else ""
        )
        return problem("payload_too_large", detail, limit=limit), {}
    if code is None:
        log.error("http_error_unmapped", status=exc.status_code, detail=exc.detail)
        return problem("internal_error", _FIXED_DETAIL["internal_error"]), {}
    return problem(code, str(exc.detail)), headers


def _source_name(source: object) -> str:
    """Litestar reports a parameter's source as a ``ParamType`` enum or a plain string."""
    return str(getattr(source, "value", source))


def _body_limit(request: Request[Any, Any, Any]) -> int | None:
    try:
        return request.route_handler.resolve_request_max_body_size() or None
    except (AttributeError, KeyError):
        return None


def _response(body: Problem, headers: Mapping[str, str]) -> Response[Problem]:
    return Response(
        content=body, status_code=body.status, media_type=PROBLEM_JSON, headers=dict(headers)
    )


def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    """Litestar's exception handler for every exception: map it, never leak internals."""
    body: Problem
    headers: dict[str, str]
    match exc:
        case ApiError():
            retry = exc.headers.get("Retry-After")
            extra = {"retry_after_s": int(retry)} if retry is not None else {}
            body, headers = problem(exc.code, exc.detail, errors=exc.errors, **extra), exc.headers
        case DtqError():
            if isinstance(exc, RedisUnavailableError):
                log.warning(exc.code, error=str(exc.__cause__ or exc))
            body, headers = from_dtq_error(exc, request)
        case HTTPException():
            body, headers = _from_http(exc, request)
        case MaxConnectionsError():
            log.warning("redis_busy", error=str(exc))
            body, headers = from_dtq_error(RedisBusyError(f"Redis is busy: {exc}; retry"))
        case RedisConnectionError() | RedisTimeoutError():
            log.warning("redis_unavailable", error=str(exc))
            body, headers = from_dtq_error(RedisUnavailableError(str(exc)))
        case OutOfMemoryError() | ReadOnlyError() | TryAgainError() | ClusterDownError():
            log.warning("redis_refused", error=str(exc), kind=type(exc).__name__)
            body, headers = from_dtq_error(RedisUnavailableError(str(exc)))
        case ResponseError() if str(exc).startswith(_REDIS_BUSY):
            log.warning("redis_refused", error=str(exc))
            body, headers = from_dtq_error(RedisUnavailableError(str(exc)))
        case _:
            log.error(
                "request_failed",
                exc_info=exc,
                method=request.method,
                path=request.url.path,
                request_id=request_id(),
            )
            body, headers = problem("internal_error", _FIXED_DETAIL["internal_error"]), {}
    return _response(body, headers)


def responses(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the problem statuses a route can answer (400, 401, 403 and 503
    are added everywhere: bad framing, authentication and Redis outages)."""
    out: dict[int, ResponseSpec] = {}
    for status in sorted({400, 401, 403, 503, *statuses}):
        codes = sorted(code for code, s in STATUS.items() if s == status)
        out[status] = ResponseSpec(
            data_container=Problem,
            description="Problem details; code: " + ", ".join(codes),
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
    return out
