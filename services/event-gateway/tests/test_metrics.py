"""The gateway's labelled series exist at zero from the start (rate() and alerts see 0)."""

from __future__ import annotations

from dtq_event_gateway.metrics import GatewayMetrics


def test_every_reason_and_transport_starts_at_zero() -> None:
    get = GatewayMetrics().registry.get_sample_value
    for reason in ("unauthorized", "forbidden", "limit", "bad_request", "unavailable"):
        assert get("dtq_gateway_refused_total", {"reason": reason}) == 0
    for reason in ("slow_consumer", "retention", "reset"):
        assert get("dtq_gateway_gaps_total", {"reason": reason}) == 0
    for transport in ("ws", "sse"):
        assert get("dtq_gateway_clients", {"transport": transport}) == 0
