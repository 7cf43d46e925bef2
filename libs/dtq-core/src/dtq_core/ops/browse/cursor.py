"""The cursor of the task list: a position in the merged walk, encoded opaque and checked
before anything of it reaches Redis."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from dtq_core.errors import ValidationError

_CURSOR_VERSION = "1"
_CURSOR_RE = re.compile(
    r"1\|([0-9]{1,20})-([0-9]{1,20})"
    r"\|([A-Za-z0-9][A-Za-z0-9_.-]{0,63}(?:~[1-9][0-9]?)?)"  # a queue or a partition of one
    r"\|([0-9]{1,4})"
)
_CURSOR_MAX = 200


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in the merged walk; the walk goes from larger positions to smaller ones.

    ``index`` is the position of a task id inside its entry (0 for entries that are not
    submits), so a page can end in the middle of a batch.
    """

    ms: int
    seq: int
    queue: str
    index: int


def encode_cursor(pos: Position) -> str:
    raw = f"{_CURSOR_VERSION}|{pos.ms}-{pos.seq}|{pos.queue}|{pos.index}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """Parse a cursor made by :func:`encode_cursor`.

    Raises:
        ValidationError: anything else (it is never passed to Redis as it is).
    """
    invalid = ValidationError(
        f"cursor {cursor[:_CURSOR_MAX]!r} is invalid: pass next_cursor of the previous page",
        field="cursor",
    )
    if not cursor or len(cursor) > _CURSOR_MAX:
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise invalid from None
    match = _CURSOR_RE.fullmatch(raw)
    if match is None:
        raise invalid
    ms, seq, queue, index = match.groups()
    return Position(int(ms), int(seq), queue, int(index))
