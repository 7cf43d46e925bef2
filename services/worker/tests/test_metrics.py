"""The worker's per-queue series exist at zero from the start (rate() and alerts see 0)."""

from __future__ import annotations

from dtq_worker.metrics import REDIS_LOOPS, WorkerMetrics


def test_prepare_creates_every_per_queue_series_at_zero() -> None:
    m = WorkerMetrics()
    get = m.registry.get_sample_value
    assert get("dtq_reclaimed_total", {"queue": "mail", "outcome": "buried"}) is None
    m.prepare(["mail", "sms"])
    for queue in ("mail", "sms"):
        for outcome in ("requeued", "buried"):
            assert get("dtq_reclaimed_total", {"queue": queue, "outcome": outcome}) == 0
        for name in ("dtq_lease_lost_total", "dtq_worker_claimed_total", "dtq_stale_finish_total"):
            assert get(name, {"queue": queue}) == 0
        assert get("dtq_released_total", {"queue": queue, "reason": "drain_timeout"}) == 0
    for loop in REDIS_LOOPS:
        assert get("dtq_worker_redis_errors_total", {"loop": loop}) == 0
    assert get("dtq_lease_lost_total", {"queue": "other"}) is None
