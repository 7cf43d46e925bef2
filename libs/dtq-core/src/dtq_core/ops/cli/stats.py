"""``dtq stats``: the per-minute history of one queue or every queue in a terminal, one line
per figure: its total over the range and a sparkline of it (``GET /api/v1/stats/history``,
:mod:`dtq_core.ops.admin.history`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from dtq_core.ops.admin import Admin, QueueHistory
from dtq_core.ops.cli.output import _age, _json, _table, _write

SPARK = "▁▂▃▄▅▆▇█"
"""Eight heights; a column with nothing in it is a space."""
COLUMNS = 60
"""At most this many columns per sparkline: minutes are put together into as many."""


def _bins(values: Sequence[float | None], width: int) -> list[list[float]]:
    """``values`` in ``width`` consecutive groups (or one per value when fewer), Nones left out."""
    n = len(values)
    width = max(1, min(width, n))
    return [
        [v for v in values[i * n // width : (i + 1) * n // width] if v is not None]
        for i in range(width)
    ]


def sparkline(
    values: Sequence[float | None],
    combine: Callable[[list[float]], float] = sum,
    width: int = COLUMNS,
) -> str:
    """A line of block characters, one per group of values (``combine`` makes a group one
    value: a count's sum, a depth's largest); an empty group is a space."""
    groups = [combine(g) if g else None for g in _bins(values, width)]
    top = max((g for g in groups if g is not None), default=0.0)
    out = []
    for g in groups:
        if g is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARK[0])
        else:
            out.append(SPARK[min(len(SPARK) - 1, int(g / top * (len(SPARK) - 1) + 0.5))])
    return "".join(out)


def _seconds(value: float | None) -> str:
    """A run time: ``350ms``, ``2.4s``, ``3m05s``."""
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else _age(value)


def _mean(runs: list[float]) -> float:
    return sum(runs) / len(runs)


def _rows(h: QueueHistory) -> list[list[str]]:
    minutes = len(h.succeeded)
    rows = []
    for name, values in (
        ("submitted", h.submitted),
        ("succeeded", h.succeeded),
        ("failed", h.failed),
        ("retried", h.retried),
        ("expired", h.expired),
    ):
        total = sum(values)
        rows.append([name, f"{total:,}", f"{total / minutes:.1f}/min", sparkline(values)])
    runs = sum(h.run_count)
    means = [t / n if n else None for t, n in zip(h.run_total_s, h.run_count, strict=True)]
    longest = max((v for v in h.run_max_s if v is not None), default=None)
    mean = sum(h.run_total_s) / runs if runs else None
    rows.append(
        [
            "run time",
            f"mean {_seconds(mean)}",
            f"longest {_seconds(longest)}",
            sparkline(means, _mean),
        ]
    )
    for name, sampled in (
        ("waiting", h.waiting),
        ("in flight", h.in_flight),
        ("delayed", h.delayed),
    ):
        noted = [v for v in sampled if v is not None]
        last = f"now {noted[-1]:,}" if noted else "not noted"
        peak = f"max {max(noted):,}" if noted else ""
        rows.append([name, last, peak, sparkline(sampled, max)])
    return rows


async def _stats(ns: argparse.Namespace, admin: Admin) -> int:
    h = await admin.history(ns.range, ns.queue)
    if ns.json:
        _write(_json(h))
        return 0
    end = datetime.fromtimestamp(h.as_of_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    which = f"queue {h.queue}" if h.queue else f"{len(h.queues)} queues"
    _write(f"dtq stats: {which}, the last {ns.range} per minute, up to {end}")
    _write(_table(["FIGURE", f"OVER {ns.range.upper()}", "", "EACH MINUTE"], _rows(h)))
    return 0
