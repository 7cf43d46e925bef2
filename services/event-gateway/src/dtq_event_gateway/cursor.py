"""The resume cursor: a client's position in every event stream it follows.

Events live in one stream per queue plus the global stream, and one stream entry holds a whole
batch (``expand_events``), so a position is an entry id plus how many of that entry's events
were delivered. The cursor a client gets with an event is its position AFTER that event in
every stream it follows; a client that reconnects with it is replayed exactly what follows.

Text form (opaque to clients): ``1~<stream>~<position>~<stream>~<position>...``, where
``<stream>`` is a queue name, a partition's (``hot~3``: its ``~`` is the separator too, and the
partition number tells itself from a position, which always holds a ``-``), or ``_`` for the
global stream (no queue name can be ``_``) and
``<position>`` is ``<ms>-<seq>`` when the whole entry was delivered or ``<ms>-<seq>.<n>`` when
its first ``n`` events were; ``0-0`` is the start of a stream. Every character is unreserved
in URLs (RFC 3986), so a cursor goes into a query string as it is. It is built for every
frame of every client, so it is a plain join of cached parts (no base64, no JSON).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from dtq_core.names import valid_stored_name

GLOBAL_STREAM = "_"
"""The name of the global event stream (``Keys.events``: ``worker.stale``) inside a cursor."""

COMPLETE = 1 << 62
"""``Position.delivered`` of an entry whose every event was delivered (above any batch size)."""

MAX_CURSOR_CHARS = 65536
"""Longer cursors are refused: one position costs about 40 characters, so this allows well over
a thousand streams while bounding the work a hostile cursor can cause."""

VERSION = "1"
_SEP = "~"
_ID_LIMIT = 1 << 64  # both halves of a stream id are unsigned 64-bit integers
_PARTITION_RE = re.compile(r"[1-9][0-9]?")
_POSITION_RE = re.compile(r"(0|[1-9][0-9]{0,19})-(0|[1-9][0-9]{0,19})(?:\.(0|[1-9][0-9]{0,8}))?")


class CursorError(ValueError):
    """A cursor that this gateway did not issue (or that was altered); the message says why."""


class Position(NamedTuple):
    """A point in one stream; tuple order is stream order."""

    ms: int
    seq: int
    delivered: int = COMPLETE

    @classmethod
    def of_entry(cls, entry_id: str) -> Position:
        """The position after the whole entry ``entry_id`` (``<ms>-<seq>``)."""
        ms, _, seq = entry_id.partition("-")
        return cls(int(ms), int(seq or 0))

    @classmethod
    def after_event(cls, entry_id: str, index: int, count: int) -> Position:
        """The position after event ``index`` of an entry that holds ``count`` events."""
        ms, _, seq = entry_id.partition("-")
        delivered = COMPLETE if index + 1 >= count else index + 1
        return cls(int(ms), int(seq or 0), delivered)

    @property
    def entry_id(self) -> str:
        return f"{self.ms}-{self.seq}"

    @property
    def complete(self) -> bool:
        return self.delivered == COMPLETE

    def __str__(self) -> str:
        return self.entry_id if self.complete else f"{self.entry_id}.{self.delivered}"


START = Position(0, 0)
"""Before the first entry of a stream."""


def encode_part(stream: str, position: Position | str) -> str:
    """One stream's part of a cursor; clients keep these and re-join them per frame."""
    return f"{stream}{_SEP}{position}"


def encode_parts(parts: Iterable[str]) -> str:
    """A cursor from parts made by :func:`encode_part`."""
    return _SEP.join((VERSION, *parts))


def encode(positions: Mapping[str, Position]) -> str:
    """The cursor of ``positions`` (stream name -> position)."""
    return encode_parts(encode_part(s, p) for s, p in positions.items())


def decode(cursor: str) -> dict[str, Position]:
    """The positions a cursor holds.

    Raises:
        CursorError: the cursor is not one this gateway issues.
    """
    if len(cursor) > MAX_CURSOR_CHARS:
        raise CursorError(f"cursor is longer than {MAX_CURSOR_CHARS} characters")
    version, *tokens = cursor.split(_SEP)
    if version != VERSION:
        raise CursorError("cursor is not one this gateway issued (unknown format)")
    fields: list[str] = []
    i = 0
    while i < len(tokens):
        # A partition's name is two tokens: the queue's and the partition's number.
        if i + 2 < len(tokens) and _PARTITION_RE.fullmatch(tokens[i + 1]):
            fields += [f"{tokens[i]}{_SEP}{tokens[i + 1]}", tokens[i + 2]]
            i += 3
        else:
            fields += tokens[i : i + 2]
            i += 2
    if len(fields) % 2:
        raise CursorError("cursor is not one this gateway issued (incomplete)")
    positions: dict[str, Position] = {}
    for stream, text in zip(fields[::2], fields[1::2], strict=True):
        if not (stream == GLOBAL_STREAM or valid_stored_name(stream)):
            raise CursorError(f"cursor names an invalid stream {stream[:70]!r}")
        if stream in positions:
            raise CursorError(f"cursor names the stream {stream!r} twice")
        match = _POSITION_RE.fullmatch(text)
        if match is None:
            raise CursorError(f"cursor has an invalid position {text[:70]!r} for {stream!r}")
        ms_text, seq_text, delivered = match.groups()
        ms, seq = int(ms_text), int(seq_text)
        if ms >= _ID_LIMIT or seq >= _ID_LIMIT:
            raise CursorError(f"cursor has an out-of-range position for {stream!r}")
        positions[stream] = Position(ms, seq, COMPLETE if delivered is None else int(delivered))
    return positions
