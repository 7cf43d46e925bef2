"""The fault tests' figures: one JSON line per test in ``.artifacts/faults.jsonl``.

Each line has the test, the fault, the checker's counts and the durations the test measured.
They are appended before the test asserts, so a failing run keeps what it saw.
``python -m dtq_devtools.testing.figures [path]`` prints them as a table (``.ci/run`` does it at
the end of every run, the failed ones included).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(".artifacts") / "faults.jsonl"
"""Relative to the repository root; ``DTQTEST_FAULTS_JSONL`` names another file."""

COLUMNS = ("accepted", "lost", "dup_terminal", "stuck", "orphans", "dup_exec", "seconds")


def figures_path(root: Path) -> Path:
    override = os.environ.get("DTQTEST_FAULTS_JSONL")
    return Path(override) if override else root / DEFAULT_PATH


def append(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record as a JSON line (the directory is made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record, default=str, sort_keys=False) + "\n")
    sys.stdout.write(json.dumps(record, default=str) + "\n")  # in the test's captured output


def slope_per_minute(samples: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of ``(seconds, value)`` samples, in value per minute: a soak's
    growth rate, which a single first-to-last difference would let one outlier decide.
    0 for fewer than two distinct times."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 60


def table(lines: list[str]) -> str:
    """A fixed-width table of the records: test, fault and the checker's main counts."""
    rows: list[tuple[str, ...]] = [("test", "fault", *COLUMNS)]
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            rows.append(("(unreadable line)", line[:40], *("" for _ in COLUMNS)))
            continue
        name = str(record.get("test", "")).rsplit("::", 1)[-1]
        rows.append((name, str(record.get("fault", "")), *(_cell(record.get(c)) for c in COLUMNS)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_PATH
    if not path.exists():
        sys.stdout.write(f"no fault figures in {path} (no fault test ran)\n")
        return 0
    sys.stdout.write(f"fault figures ({path}):\n")
    sys.stdout.write(table(path.read_text(encoding="utf-8").splitlines()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
