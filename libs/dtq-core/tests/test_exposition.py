"""What every service's ``/metrics`` looks like: ``dtq_build_info``, no ``_created`` series,
and ``le`` values written as ``prometheus_client`` writes them (``1.0``, not ``1``)."""

from __future__ import annotations

import re
from importlib.metadata import version

from prometheus_client import Counter, Histogram, generate_latest

from dtq_core.infra.metrics import DURATION_BUCKETS, FastHistogram, service_registry


def test_the_registry_carries_the_build_info_of_the_package() -> None:
    registry = service_registry("dtq-test", "dtq-core")
    assert (
        registry.get_sample_value(
            "dtq_build_info", {"service": "dtq-test", "version": version("dtq-core")}
        )
        == 1
    )


def test_no_created_series() -> None:
    registry = service_registry("dtq-test", "dtq-core")
    Counter("dtq_things", "Things", ["queue"], registry=registry).labels("q").inc()
    Histogram("dtq_wait_seconds", "Waits", registry=registry).observe(0.3)
    text = generate_latest(registry).decode()
    assert "dtq_things_total" in text
    assert "dtq_wait_seconds_count" in text
    assert "_created" not in text


def le_values(text: str, name: str) -> list[str]:
    return re.findall(rf'^{name}_bucket{{.*?le="([^"]+)"', text, re.M)


def test_fast_histogram_buckets_read_like_the_client_library() -> None:
    registry = service_registry("dtq-test", "dtq-core")
    fast = FastHistogram("dtq_fast_seconds", "Fast", ("queue",))
    registry.register(fast)
    fast.observe(fast.child("q"), 1.0)
    Histogram(
        "dtq_slow_seconds", "Slow", ["queue"], buckets=DURATION_BUCKETS, registry=registry
    ).labels("q").observe(1.0)
    text = generate_latest(registry).decode()
    fast_les = le_values(text, "dtq_fast_seconds")
    assert fast_les == le_values(text, "dtq_slow_seconds")
    assert "1.0" in fast_les
    assert "1" not in fast_les
    assert fast_les[-1] == "+Inf"
    # An observation equal to a bound is counted in that bucket (le: less or equal).
    assert 'dtq_fast_seconds_bucket{le="1.0",queue="q"} 1.0' in text
    assert 'dtq_fast_seconds_bucket{le="0.5",queue="q"} 0.0' in text
