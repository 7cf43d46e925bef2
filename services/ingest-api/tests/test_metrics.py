"""The API's authentication failure series exist at zero from the start."""

from __future__ import annotations

from dtq_ingest_api.metrics import ApiMetrics


def test_auth_failure_reasons_start_at_zero() -> None:
    get = ApiMetrics().registry.get_sample_value
    for reason in ("missing", "invalid", "scope"):
        assert get("dtq_auth_failures_total", {"reason": reason}) == 0
    assert get("dtq_auth_failures_total", {"reason": "other"}) is None
