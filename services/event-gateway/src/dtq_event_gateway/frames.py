"""Frames: what a client receives, and the items that wait in a client's queue.

An event's JSON is encoded once, by the reader, split around its cursor: every client has its
own cursor, so a client's frame is ``head + cursor + tail`` (two string joins, no encoding per
client). Every frame has the fields of :class:`dtq_core.messages.Event`: ``type``, ``cursor``,
``ts``, ``queue``, ``task_id``, ``task``, ``attempt``, ``worker``, ``reason``, ``data`` (null
when unknown).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import msgspec

from dtq_core.messages import Event
from dtq_event_gateway.cursor import Position

_encoder = msgspec.json.Encoder()
_CURSOR_FIELD: Final = '"cursor":"'


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event, as the reader offers it to every client whose filter matches.

    ``snapshot`` is the reader's position in every stream before the read that brought this
    event: everything up to it has been offered already, so a live client may move its cursor
    there (it keeps cursors of quiet streams fresh; see :mod:`dtq_event_gateway.session`).
    """

    stream: str
    position: Position
    position_text: str
    type: str
    ts: float
    head: str
    tail: str
    snapshot: Mapping[str, Position]


@dataclass(frozen=True, slots=True)
class Control:
    """A frame about the connection or the stream rather than about a task (``degraded``,
    ``recovered``, ``pong``, and ``gap`` when the reader itself fell behind retention)."""

    type: str
    reason: str | None = None
    queue: str | None = None
    stream: str | None = None
    """For a reader's gap: the stream that lost entries after ``position``; a client already
    past that point (it was replayed beyond it) has lost nothing."""
    position: Position | None = None


class Overflow:
    """The marker a full client queue ends with: the client is too slow."""


OVERFLOW: Final = Overflow()

Item = Delivery | Control | Overflow


def split(event: Event) -> tuple[str, str]:
    """The event's JSON before and after the cursor's value.

    ``cursor`` is the second field and string values are escaped, so the first ``"cursor":"``
    in the encoding is the field itself.
    """
    text = _encoder.encode(msgspec.structs.replace(event, cursor="")).decode()
    cut = text.index(_CURSOR_FIELD) + len(_CURSOR_FIELD)
    return text[:cut], text[cut:]


def control(
    type_: str,
    cursor: str,
    *,
    queue: str | None = None,
    reason: str | None = None,
    data: dict[str, object] | None = None,
) -> str:
    """A control frame's JSON (``gap``, ``degraded``, ``recovered``, ``subscribed``)."""
    event = Event(type=type_, cursor=cursor, ts=time.time(), queue=queue, reason=reason, data=data)
    return _encoder.encode(event).decode()


def sse(type_: str, cursor: str, text: str) -> str:
    """One Server-Sent Event: the cursor as its id, so browsers resume with Last-Event-ID."""
    return f"id: {cursor}\nevent: {type_}\ndata: {text}\n\n"


SSE_PING: Final = ": ping\n\n"
