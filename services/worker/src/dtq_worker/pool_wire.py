"""What a worker process and its handler processes (``executor="process"``) say to each other.

One message at a time over the handler process's stdin and stdout, each a 4-byte big-endian
length and a msgpack-encoded :data:`Message` (msgspec; never pickle: arguments and results are
the task's JSON, carried as bytes). The exchange:

- worker → handler process: :class:`Load` once (the tasks it may run, by module and name);
  it answers :class:`Ready` or :class:`LoadFailed`;
- then, per attempt, :class:`Run`; the handler process answers :class:`Done` or
  :class:`Failed`, after any number of :class:`Progress` each answered by
  :class:`ProgressAck`.

A handler process runs one attempt at a time; a timeout or a cancel kills it (the worker
starts another), so no message ever stops a handler.
"""

from __future__ import annotations

import struct
from typing import Literal

import msgspec

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 << 20
"""The largest message either side accepts (a result is at most DTQ_RESULT_MAX_BYTES once
stored, but the handler's whole return value travels before it is cut)."""


class _Message(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="m"):
    """Every message is tagged with its class name in the field ``m``."""


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """A task a handler process may run: its handler is ``module.qualname``."""

    name: str
    module: str
    qualname: str
    takes_context: bool = True
    """Whether the handler takes the context first (when the name finds the bare function
    rather than the :class:`dtq_core.tasks.Task` the decorator returned)."""


class Load(_Message, frozen=True, kw_only=True):
    tasks: list[Target]


class Ready(_Message, frozen=True, kw_only=True):
    pid: int


class LoadFailed(_Message, frozen=True, kw_only=True):
    task: str
    error: str


class Run(_Message, frozen=True, kw_only=True):
    task: str
    task_id: str
    queue: str
    attempt: int
    max_attempts: int
    args: bytes
    """The task's positional arguments, JSON (as the task record holds them)."""
    kwargs: bytes
    """Its keyword arguments, JSON."""


class Progress(_Message, frozen=True, kw_only=True):
    value: float
    message: str | None = None


class ProgressAck(_Message, frozen=True, kw_only=True):
    kept: bool
    """False when the attempt's lease is gone (``TaskContext.progress`` returns it)."""


class Done(_Message, frozen=True, kw_only=True):
    result: bytes | None
    """The handler's return value as JSON; ``None`` when it returned ``None``."""


FailureKind = Literal["exception", "retry", "permanent", "not_serializable"]


class Failed(_Message, frozen=True, kw_only=True):
    kind: FailureKind
    """``retry``: the handler raised ``Retry``; ``permanent``: a ``PermanentError``;
    ``not_serializable``: it returned a value JSON cannot hold; else ``exception``."""
    type: str
    message: str
    traceback: str | None = None
    delay_s: float | None = None
    """``Retry(delay_s=...)``."""


Message = Load | Ready | LoadFailed | Run | Progress | ProgressAck | Done | Failed

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def frame(message: Message) -> bytes:
    """The bytes that carry ``message``: its length, then its msgpack encoding."""
    body = _encoder.encode(message)
    return HEADER.pack(len(body)) + body


def length(header: bytes) -> int:
    """The body length a header announces.

    Raises:
        ValueError: past :data:`MAX_MESSAGE` (a stream out of step: never trust it further).
    """
    (n,) = HEADER.unpack(header)
    if n > MAX_MESSAGE:
        raise ValueError(f"a handler-process message of {n} bytes is over the limit")
    return int(n)


def decode(body: bytes) -> Message:
    return _decoder.decode(body)
