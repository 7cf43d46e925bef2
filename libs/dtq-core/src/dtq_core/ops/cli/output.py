"""What every command prints with: lines on stdout, ``dtq: ...`` on stderr, JSON, tables
and short ages and times. The names are private to :mod:`dtq_core.ops.cli`."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

_ERROR_WIDTH = 60


def _write(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _done(ns: Any, line: str, **facts: Any) -> int:
    """Report a change: ``line`` for a person, or with ``--json`` the same ``facts`` as one
    JSON object; exit status 0."""
    _write(_json(facts) if ns.json else line)
    return 0


def _fail(text: str) -> None:
    sys.stderr.write(f"dtq: {text}\n")


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; colour codes take no width."""
    widths = [max(_width(c) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = [
        "  ".join(c + " " * (w - _width(c)) for c, w in zip(r, widths, strict=True))
        for r in [headers, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


_SGR = re.compile(r"\x1b\[[0-9;]*m")

_COLOURS = {
    "succeeded": "32",
    "running": "33",
    "retrying": "33",
    "draining": "33",
    "failed": "31",
    "dead": "31",
    "stale": "31",
    "cancelled": "35",
    "expired": "35",
}
"""The SGR colour of each status word: green done, yellow under way, red failed, magenta
stopped; the others (queued, scheduled) stay plain."""


def _width(cell: str) -> int:
    return len(_SGR.sub("", cell))


def _colour_on() -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _paint(word: str) -> str:
    """``word`` (a task, workflow, batch or worker status) in its colour when colour is on."""
    code = _COLOURS.get(word)
    return f"\x1b[{code}m{word}\x1b[0m" if code and _colour_on() else word


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _by_priority(depth: dict[str, int]) -> str:
    parts = [f"p{p}:{depth[str(p)]}" for p in range(9, -1, -1) if depth.get(str(p))]
    return " ".join(parts) or "-"


def _time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"
