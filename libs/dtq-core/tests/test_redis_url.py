"""The three forms of DTQ_REDIS_URL, read the way every process connects."""

from __future__ import annotations

import pytest

from dtq_core.infra.redis_url import RedisUrlError, Topology, expected_form, parse_redis_url


def test_standalone_urls_are_handed_to_redis_py_whole() -> None:
    for url in ("redis://localhost:6379/0", "rediss://h:6380/2", "unix:///run/redis.sock"):
        target = parse_redis_url(url)
        assert target.topology is Topology.STANDALONE
        assert target.url == url
    assert parse_redis_url("rediss://h:6380/2").tls


def test_cluster_url_names_its_startup_nodes_and_credentials() -> None:
    target = parse_redis_url("rediss+cluster://app:p%40ss@10.0.0.1:7000,[::1]:7001,node-c:7002")
    assert target.topology is Topology.CLUSTER
    assert target.tls
    assert target.nodes == (("10.0.0.1", 7000), ("::1", 7001), ("node-c", 7002))
    assert (target.username, target.password) == ("app", "p@ss")


def test_sentinel_url_names_the_master_and_database() -> None:
    target = parse_redis_url(
        "redis+sentinel://:pw@s1:26379,s2:26380/mymaster/3?sentinel_password=spw"
    )
    assert target.topology is Topology.SENTINEL
    assert target.nodes == (("s1", 26379), ("s2", 26380))
    assert (target.master, target.db) == ("mymaster", 3)
    assert (target.username, target.password) == (None, "pw")
    assert target.sentinel_password == "spw"  # noqa: S105 - a test value
    assert parse_redis_url("redis+sentinel://s1:26379/mymaster").db == 0


def test_a_tls_sentinel_url_carries_the_data_nodes_tls_options() -> None:
    target = parse_redis_url(
        "rediss+sentinel://s1:26379/mymaster?ssl_ca_certs=/run/ca.pem&ssl_cert_reqs=required"
        "&ssl_check_hostname=false&sentinel_password=spw"
    )
    assert target.tls
    assert dict(target.tls_options) == {
        "ssl_ca_certs": "/run/ca.pem",
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": False,
    }
    assert target.sentinel_password == "spw"  # noqa: S105 - a test value


def test_a_tls_cluster_url_carries_the_nodes_tls_options() -> None:
    # A CA file's path holds "/": the query is read before the path is split off the hosts.
    target = parse_redis_url(
        "rediss+cluster://n1:7000,n2:7001?ssl_ca_certs=/run/tls/ca.pem&ssl_cert_reqs=required"
    )
    assert target.tls
    assert target.nodes == (("n1", 7000), ("n2", 7001))
    assert dict(target.tls_options) == {
        "ssl_ca_certs": "/run/tls/ca.pem",
        "ssl_cert_reqs": "required",
    }
    assert parse_redis_url("rediss+cluster://n1:7000/?ssl_ca_certs=/ca.pem").tls_options == (
        ("ssl_ca_certs", "/ca.pem"),
    )
    sentinel = parse_redis_url("rediss+sentinel://s1:26379/m/2?ssl_ca_certs=/a/b/ca.pem")
    assert (sentinel.master, sentinel.db) == ("m", 2)


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("memcached://h:1", "the scheme must be one of"),
        ("redis+cluster://h", "'h' is not host:port"),
        ("redis+cluster://h:0", "'h:0' is not host:port"),
        ("redis+cluster://h:7000/1", "database 0 only"),
        ("redis+cluster://h:7000?db=1", "unknown option(s) db"),
        ("redis+sentinel://h:26379", "must name the master"),
        ("redis+sentinel://h:26379/m/x", "must be a number"),
        ("redis+sentinel://h:26379/m?ssl=1", "unknown option(s) ssl"),
        ("redis+sentinel://h:26379/m?ssl_ca_certs=/ca.pem", "need a TLS scheme"),
        ("redis+cluster://h:7000?ssl_ca_certs=/ca.pem", "need a TLS scheme"),
        ("rediss+sentinel://h:26379/m?ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of"),
        ("rediss+sentinel://h:26379/m?ssl_check_hostname=1", "must be true or false"),
        ("rediss+sentinel://h:26379/m?ssl_ca_certs=", "needs a value"),
        ("redis://h:63x9/0", "Port could not be cast"),
    ],
)
def test_a_malformed_url_names_the_rule_it_breaks(url: str, rule: str) -> None:
    with pytest.raises(RedisUrlError) as exc:
        parse_redis_url(url)
    assert rule in str(exc.value)


def test_the_expected_form_follows_the_scheme() -> None:
    assert expected_form("rediss+cluster://x").startswith("rediss+cluster://")
    assert expected_form("redis+sentinel://x").endswith("/master-name[/db]")
    assert "redis+cluster://" in expected_form("ftp://x")
