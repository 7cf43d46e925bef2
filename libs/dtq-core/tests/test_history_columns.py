"""The per-minute history's layout and reading (pure, :mod:`dtq_core.protocol.history`):
windows and field names, and hashes of several stored queues added up into columns."""

from __future__ import annotations

from dtq_core.protocol.history import (
    WINDOW_MINUTES,
    Columns,
    Metric,
    field_name,
    minute_of,
    windows,
)


def test_minutes_windows_and_fields() -> None:
    assert minute_of(59_999) == 0
    assert minute_of(60_000) == 1
    assert list(windows(18, 21)) == [1, 2]
    assert list(windows(20, 29)) == [2]
    assert len(windows(0, 1439)) == 1440 // WINDOW_MINUTES
    assert field_name(Metric.SUCCEEDED, 123) == "s3"
    assert field_name(Metric.WAITING, 120) == "d0"


def test_columns_add_counts_keep_the_longest_and_leave_unnoted_minutes_empty() -> None:
    c = Columns(first_minute=18, count=4)  # minutes 18..21: window 1 (8, 9), window 2 (0, 1)
    c.add(1, {"s8": "2", "s9": "1", "m9": "500", "d9": "4", "s7": "99"})  # s7: before the range
    c.add(1, {"s9": "3", "m9": "200", "d9": "1"})  # a partition of the same queue
    c.add(2, {"s0": "5", "t0": "1500000", "m0": "900000", "s2": "99", "z1": "7", "s": "1"})
    assert c.counts(Metric.SUCCEEDED) == [2, 4, 5, 0]
    assert c.values[Metric.RUN_MAX_US] == [None, 500, 900_000, None]
    assert c.seconds(Metric.RUN_MAX_US, missing=None) == [None, 0.0005, 0.9, None]
    assert c.counts(Metric.RUN_TOTAL_US) == [0, 0, 1_500_000, 0]
    assert c.sampled(Metric.WAITING) == [None, 5, None, None]
