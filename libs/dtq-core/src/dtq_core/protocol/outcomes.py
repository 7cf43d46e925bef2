"""What the functions answer: every outcome a transition replies, and the codes of its error
replies, as enums (pure).

The values are the wire spellings of ``lua/*.lua`` (each file's header lists its replies).
They are :class:`~enum.StrEnum` members, so a reply compares equal to its member and a member
is sent as its value. An error reply's code is its first word (``STALE_LEADER 7``);
:func:`raise_for_code` turns a known code into its :class:`~dtq_core.errors.DtqError`, so no
caller reads error text; a wrapper calls its transition inside :func:`errors_by_code`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from redis.exceptions import ResponseError

from dtq_core.errors import DtqError, StaleLeaderError


class SubmitOutcome(StrEnum):
    """Per task of a ``submit`` call (``lua/submit.lua``)."""

    NEW = "new"
    DUPLICATE = "dup"  # same idempotency key and request: the reply names the original task
    CONFLICT = "conflict"  # same idempotency key, another request
    QUEUE_FULL = "full"  # admission control refused it
    ORIGINAL = "original"  # a dedup mode: the key's task holds it; the reply names that task
    REPLACED = "replaced"  # debounce: the key's waiting task took this submit's values


class ClaimState(StrEnum):
    """The first value of a ``claim`` reply (``lua/claim.lua``)."""

    OK = "ok"
    PAUSED = "paused"  # nothing claimed; adopted entries were handed back
    FULL = "full"  # the concurrency limit left room for fewer than asked
    LIMITED = "limited"  # the rate limit did; the reply says when the next may start


class FinishOutcome(StrEnum):
    """What a worker reports for one attempt to ``finish`` (``lua/finish.lua``)."""

    OK = "ok"
    RETRY = "retry"
    DEAD = "dead"
    CANCEL = "cancel"


class Fence(StrEnum):
    """What a fenced transition (``finish``) reports for an attempt whose lease is gone, in
    place of a task status: nothing was changed, the attempt belongs to a newer one."""

    STALE = "stale"


class CancelOutcome(StrEnum):
    """The first value of a ``cancel`` reply (``lua/cancel.lua``)."""

    CANCELLED = "cancelled"
    REQUESTED = "requested"  # running: its worker is told to cancel the handler
    NOT_FOUND = "not_found"
    FINAL = "final"  # already in a terminal state; the reply's status says which


class RequeueOutcome(StrEnum):
    """Per task of a ``requeue`` call, unless it names the task's status (``lua/requeue.lua``)."""

    REQUEUED = "requeued"


class DropOutcome(StrEnum):
    """The first value of a ``drop_queue`` reply (``lua/drop_queue.lua``)."""

    DROPPED = "dropped"
    BUSY = "busy"  # the queue holds a task; the reply counts them


class LeaseMode(StrEnum):
    """The modes of ``leader_lease`` (``lua/leader_lease.lua``)."""

    ACQUIRE = "acquire"
    RENEW = "renew"
    RELEASE = "release"


class ErrorCode(StrEnum):
    """The codes of dtq's own error replies (``redis.error_reply('<CODE> ...')``)."""

    STALE_LEADER = "STALE_LEADER"  # promote: a newer leadership epoch acted on the queue


ERROR_TYPES: dict[ErrorCode, type[DtqError]] = {ErrorCode.STALE_LEADER: StaleLeaderError}
"""The typed error each code is raised as."""


def reply_code(exc: ResponseError) -> str:
    """The code of an error reply: its first word."""
    message = str(exc)
    return message.split(" ", 1)[0] if message else ""


def raise_for_code(exc: ResponseError, **detail: Any) -> None:
    """Raise the typed error of ``exc``'s code (from ``exc``, with ``detail``); return when the
    code is not one of dtq's (a Redis error the caller handles or re-raises)."""
    try:
        code = ErrorCode(reply_code(exc))
    except ValueError:
        return
    raise ERROR_TYPES[code](str(exc), **detail) from exc


@contextmanager
def errors_by_code(**detail: Any) -> Iterator[None]:
    """Raise an error reply with one of dtq's codes as its typed error, with ``detail`` (the
    context the wrapper knows: queue, epoch); any other error passes unchanged."""
    try:
        yield
    except ResponseError as exc:
        raise_for_code(exc, **detail)
        raise
