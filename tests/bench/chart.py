"""The bench's chart of dtq against the best peer, figure by figure, as a hand-written SVG
(no plotting dependency): one bar per figure on a logarithmic axis centred on 1, to the right
where dtq is ahead and to the left where it trails, labelled with the ratio dtq / best peer."""

from __future__ import annotations

import math
from html import escape
from typing import Any

WIDTH = 1000
ROW_H = 34
LABEL_W = 330
PLOT_W = 400
TOP = 70
LIMIT = 8.0
"""The axis runs from 1/8 to 8 (bars beyond are clipped and marked)."""


def _x(advantage: float) -> float:
    span = math.log2(LIMIT)
    clipped = min(max(advantage, 1 / LIMIT), LIMIT)
    return LABEL_W + PLOT_W / 2 + math.log2(clipped) / span * PLOT_W / 2


def ratios_svg(rows: list[dict[str, Any]], title: str, subtitle: str) -> str:
    """``rows`` as :func:`users.ratio_rows` makes them (those with a ratio)."""
    rows = [r for r in rows if "ratio" in r]
    height = TOP + ROW_H * len(rows) + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="16" y="26" font-size="17" font-weight="bold">{escape(title)}</text>',
        f'<text x="16" y="48" fill="#555555">{escape(subtitle)}</text>',
    ]
    bottom = TOP + ROW_H * len(rows)
    for tick in (1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8):
        x = _x(tick)
        label = f"{tick:g}" if tick >= 1 else f"1/{1 / tick:g}"
        stroke = "#333333" if tick == 1 else "#dddddd"
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{bottom}" stroke="{stroke}"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle" fill="#555555">'
            f"{label}</text>"
        )
    out.append(
        f'<text x="{LABEL_W + PLOT_W / 2:.1f}" y="{bottom + 40}" text-anchor="middle" '
        'fill="#555555">dtq trails ← how many times better than the best peer → dtq ahead'
        "</text>"
    )
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        ratio = row["ratio"]
        advantage = ratio if row["higher_is_better"] else 1 / ratio
        x0, x1 = _x(1), _x(advantage)
        colour = "#2e7d32" if advantage >= 1 else "#c62828"
        better = "higher" if row["higher_is_better"] else "lower"
        out.append(f'<text x="16" y="{y + 21}">{escape(row["label"])}</text>')
        out.append(
            f'<rect x="{min(x0, x1):.1f}" y="{y + 7}" width="{max(abs(x1 - x0), 1):.1f}" '
            f'height="{ROW_H - 14}" fill="{colour}"/>'
        )
        clipped = " (off the axis)" if not 1 / LIMIT <= advantage <= LIMIT else ""
        note = f"{ratio:.2f}x vs {row['best_peer']} ({better} is better){clipped}"
        out.append(
            f'<text x="{LABEL_W + PLOT_W + 12}" y="{y + 21}" fill="#333333">{escape(note)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
