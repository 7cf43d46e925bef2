"""The retry decision of one failed attempt (pure: no Redis)."""

from __future__ import annotations

import msgspec

from dtq_core.infra.settings import load_settings
from dtq_core.messages import StoredError
from dtq_core.protocol.scripts import Claimed, Held
from dtq_worker.executor import Execution, Executor


def _execution(attempt: int, max_attempts: int) -> Execution:
    c = Claimed("ab" * 16, 5, "1-0", "1", attempt, max_attempts, 1000, "t", "[]", "{}", "", 0)
    return Execution("q", c, Held(c.rand, 5, "1-0", "1"))


def test_failure_with_attempts_left_is_retried_with_backoff() -> None:
    settings = load_settings({}, retry_base_delay=2.0, retry_max_delay=60.0, retry_jitter=0.2)
    ex = Executor(settings, "w", 1)
    for attempt, expected in [(1, 2.0), (2, 4.0), (3, 8.0)]:
        finish = ex.failed_outcome(_execution(attempt, 5), "ValueError", "boom")
        assert finish.outcome == "retry"
        delay_s = int(finish.extra) / 1000
        assert expected * 0.8 <= delay_s <= expected * 1.2
        error = msgspec.json.decode(finish.payload, type=StoredError)
        assert (error.attempt, error.type, error.message) == (attempt, "ValueError", "boom")


def test_last_attempt_and_permanent_failures_are_buried() -> None:
    ex = Executor(load_settings({}), "w", 1)
    assert ex.failed_outcome(_execution(5, 5), "ValueError", "boom").outcome == "dead"
    assert ex.failed_outcome(_execution(1, 5), "Bad", "x", permanent=True).outcome == "dead"


def test_retry_request_sets_its_own_delay() -> None:
    ex = Executor(load_settings({}), "w", 1)
    finish = ex.failed_outcome(
        _execution(1, 5), "Retry", "later", reason="retry_requested", delay_s=7
    )
    assert (finish.outcome, finish.extra) == ("retry", "7000")
