"""What every command prints with: lines on stdout, ``dtq: ...`` on stderr, JSON, tables
and short ages and times. The names are private to :mod:`dtq_core.ops.cli`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

_ERROR_WIDTH = 60


def _write(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _fail(text: str) -> None:
    sys.stderr.write(f"dtq: {text}\n")


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [headers]]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


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
