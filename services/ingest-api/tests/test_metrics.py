"""The API's metrics: failure series exist at zero from the start; with several processes,
every scrape adds all of them up."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dtq_devtools.testing import free_port, wait_until_sync
from dtq_devtools.testing.processes import ServiceProcess, services
from dtq_ingest_api.metrics import ApiMetrics


def test_auth_failure_reasons_start_at_zero() -> None:
    get = ApiMetrics().registry.get_sample_value
    for reason in ("missing", "invalid", "scope"):
        assert get("dtq_auth_failures_total", {"reason": reason}) == 0
    assert get("dtq_auth_failures_total", {"reason": "other"}) is None


def test_with_several_processes_every_scrape_counts_all_of_them(
    redis_url: str, tmp_path: Path
) -> None:
    """``DTQ_API_WORKERS=2``: a scrape lands on one process at random, yet each one reports
    the requests both processes served."""
    port = free_port()
    api = ServiceProcess(
        "dtq_ingest_api",
        [],
        {"DTQ_REDIS_URL": redis_url, "DTQ_API_PORT": str(port), "DTQ_API_WORKERS": "2"},
        tmp_path / "api.log",
    )
    base = f"http://127.0.0.1:{port}"
    sent = 0

    def health() -> bool:
        nonlocal sent
        try:
            ok = httpx.get(f"{base}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False
        sent += 1
        return ok

    with services(api):
        wait_until_sync(health, timeout=30, interval=0.1, message="API up")
        with httpx.Client(base_url=base) as http:  # several connections: both processes serve
            for _ in range(60):
                assert httpx.get(f"{base}/health", timeout=5).status_code == 200
                sent += 1
            for _ in range(8):
                text = http.get("/metrics", headers={"Connection": "close"}).text
                samples = {
                    (s.name, s.labels.get("route"), s.labels.get("status")): s.value
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                }
                assert samples[("dtq_http_requests_total", "/health", "200")] == sent
    assert api.log().count("auth_open_mode") == 2  # two processes served
