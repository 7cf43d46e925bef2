"""The Host and Origin rules that the API and the gateway share (pure)."""

from __future__ import annotations

import pytest

from dtq_core.errors import SettingsError
from dtq_core.infra.origins import Origin, parse_origin, request_origin
from dtq_core.infra.settings import load_settings


def test_origins_compare_scheme_host_and_port() -> None:
    assert parse_origin("http://LOCALHOST") == Origin("http", "localhost", 80)
    assert parse_origin("https://[::1]:8443/") == Origin("https", "::1", 8443)
    for bad in ("null", "file://", "ftp://a", "http://a/path", "http://a:99999"):
        assert parse_origin(bad) is None, bad
    assert request_origin("ws", "localhost:80") == Origin("http", "localhost", 80)
    assert request_origin("https", "dtq.example.com") == Origin("https", "dtq.example.com", 443)
    policy = load_settings({}).web_policy(origins=False)
    assert policy.origin_allowed("http://localhost:3000", "http", "localhost:3000")
    assert not policy.origin_allowed("http://localhost:3001", "http", "localhost:3000")
    assert not policy.origin_allowed("https://localhost:3000", "http", "localhost:3000")
    assert policy.origin_allowed(None, "http", "anything")


def test_hosts_served_by_default_and_by_setting() -> None:
    policy = load_settings({"DTQ_ALLOWED_HOSTS": "Dtq.Example.com"}).web_policy(origins=False)
    served = ("localhost:8000", "127.0.0.1", "[::1]:8000", "10.0.0.7:8000", "ingest-api:8000")
    for host in (*served, "dtq.example.com", "localhost."):
        assert policy.host_allowed(host), host
    for host in ("rebind.attacker.example", "127.0.0.1.nip.io", "a b", "dtq.example.com.evil"):
        assert not policy.host_allowed(host), host
    assert load_settings({"DTQ_ALLOWED_HOSTS": "*"}).web_policy(origins=False).host_allowed("x")


@pytest.mark.parametrize("value", ["http://dtq.example.com", "dtq.example.com:443", "a/b"])
def test_allowed_hosts_are_validated_at_start_up(value: str) -> None:
    with pytest.raises(SettingsError, match="DTQ_ALLOWED_HOSTS has"):
        load_settings({"DTQ_ALLOWED_HOSTS": value})
