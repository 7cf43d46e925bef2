"""The attempt values the transition wrappers take and return (pure: no Redis)."""

from __future__ import annotations

import msgspec

from dtq_core.protocol.attempts import (
    CLAIMED_WIDTH,
    Claimed,
    Held,
    claimed_from_reply,
    task_defaults,
)

ROW = ["a" * 32, "5", "1-0", 3, "2", "10", "30000", "t.x", "[1]", "{}", "", "1700000000000000"]


def test_a_claim_reply_becomes_typed_attempts() -> None:
    assert len(ROW) == CLAIMED_WIDTH
    (c,) = claimed_from_reply(ROW)
    assert c == Claimed(
        rand="a" * 32,
        priority=5,
        entry_id="1-0",
        lease="3",
        attempt=2,
        max_attempts=10,
        timeout_ms=30000,
        task="t.x",
        args="[1]",
        kwargs="{}",
        headers="",
        queued_at_us=1_700_000_000_000_000,
    )
    assert [c.rand for c in claimed_from_reply(ROW * 3)] == ["a" * 32] * 3
    assert claimed_from_reply([]) == []


def test_held_sends_its_four_values_in_the_scripts_order() -> None:
    assert Held("r", 7, "2-0", "4").args() == ["r", 7, "2-0", "4"]


def test_task_defaults_lists_only_tasks_that_declare_their_own() -> None:
    table = msgspec.json.decode(
        task_defaults(5, 1000, [("a", 3, None), ("b", None, 2.5), ("c", None, None)])
    )
    assert table == {"*": [5, 1000], "a": [3, 0], "b": [0, 2500]}
