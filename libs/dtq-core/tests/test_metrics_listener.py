"""The metrics listeners' bind address (DTQ_METRICS_HOST) and the queue-gauge interval."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge

from dtq_core.errors import SettingsError
from dtq_core.infra.metrics import serve_metrics
from dtq_core.infra.settings import load_settings
from dtq_devtools.testing import free_port


def test_metrics_host_defaults_to_every_interface_and_can_be_set() -> None:
    assert load_settings({}).observability.metrics_host == "0.0.0.0"  # noqa: S104 - the documented default
    assert (
        load_settings({"DTQ_METRICS_HOST": "127.0.0.7"}).observability.metrics_host == "127.0.0.7"
    )
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_METRICS_HOST": ""})
    assert "DTQ_METRICS_HOST" in str(exc.value)


def test_queue_metrics_interval_must_be_positive() -> None:
    assert load_settings({}).scheduler.queue_metrics_interval_s == 5.0
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_QUEUE_METRICS_INTERVAL_S": "0"})
    assert "DTQ_QUEUE_METRICS_INTERVAL_S" in str(exc.value)


def test_serve_metrics_binds_the_given_address_only() -> None:
    registry = CollectorRegistry()
    Gauge("dtq_probe", "A probe", registry=registry).set(7)
    port = free_port()
    # The listener thread lives as long as the test process (prometheus_client offers no stop).
    assert serve_metrics(port, registry, "127.0.0.9", setting="DTQ_WORKER_METRICS_PORT") == port
    text = httpx.get(f"http://127.0.0.9:{port}/metrics", timeout=5).text
    assert "dtq_probe 7.0" in text
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_port_zero_turns_the_listener_off() -> None:
    assert (
        serve_metrics(0, CollectorRegistry(), "127.0.0.9", setting="DTQ_WORKER_METRICS_PORT") == 0
    )
