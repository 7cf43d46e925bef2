"""The three forms of ``DTQ_REDIS_URL``: one Redis, a Redis Cluster, a Sentinel-watched master.

=================================================================  ==========================
form                                                               served by
=================================================================  ==========================
``redis://[user:password@]host:port[/db]``, ``rediss://``,          one Redis (as redis-py
``unix:///path.sock``                                              reads the URL)
``redis+cluster://[user:password@]host:port[,host:port...]``,      Redis Cluster: the nodes
``rediss+cluster://``                                              are where discovery starts
``redis+sentinel://[user:password@]host:port[,host:port...]/``     the master the sentinels
``<master-name>[/db]``, ``rediss+sentinel://``                     name, followed on failover
=================================================================  ==========================

The user and password are those of the data nodes. Sentinels that want a password of their own
take it as ``?sentinel_password=`` (and ``sentinel_username=``).

The ``rediss`` forms speak TLS to the data nodes: every node of a cluster, including those
found later; with ``rediss+sentinel://`` the master (the sentinels are asked in plain TCP).
They take redis-py's TLS options as query parameters: ``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs`` (``none``, ``optional``, ``required``) and
``ssl_check_hostname`` (``true``/``false``); ``rediss://`` hands them to redis-py with the URL.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from redis.asyncio.connection import parse_url


class Topology(enum.StrEnum):
    STANDALONE = "standalone"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"


_SCHEMES = {
    "redis": (Topology.STANDALONE, False),
    "rediss": (Topology.STANDALONE, True),
    "unix": (Topology.STANDALONE, False),
    "redis+cluster": (Topology.CLUSTER, False),
    "rediss+cluster": (Topology.CLUSTER, True),
    "redis+sentinel": (Topology.SENTINEL, False),
    "rediss+sentinel": (Topology.SENTINEL, True),
}
_FORMS = {
    Topology.STANDALONE: "redis://[user:password@]host:port/db",
    Topology.CLUSTER: "redis+cluster://[user:password@]host:port[,host:port...]",
    Topology.SENTINEL: "redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]",
}
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d+)$")
_MASTER = re.compile(r"^[A-Za-z0-9_.-]+$")
_SENTINEL_OPTIONS = {"sentinel_username", "sentinel_password"}
_TLS_OPTIONS = {
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
}
_CERT_REQS = {"none", "optional", "required"}
_BOOLS = {"true": True, "false": False}


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """What ``DTQ_REDIS_URL`` names."""

    topology: Topology
    url: str
    """The URL as given (a standalone one is handed to redis-py whole)."""
    tls: bool = False
    nodes: tuple[tuple[str, int], ...] = ()
    """Cluster startup nodes, or the sentinels."""
    master: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls_options: tuple[tuple[str, str | bool], ...] = ()
    """redis-py's ``ssl_*`` connection options for the data nodes (``rediss+cluster://``,
    ``rediss+sentinel://``)."""


class RedisUrlError(ValueError):
    """The URL is not one of the three forms; the message says which rule it broke."""


def expected_form(url: str) -> str:
    """The form a URL with ``url``'s scheme must have (every form when the scheme is unknown)."""
    scheme = urlsplit(url).scheme.lower()
    known = _SCHEMES.get(scheme)
    if known is None:
        return ", ".join(_FORMS.values())
    return scheme + "://" + _FORMS[known[0]].partition("://")[2]


def parse_redis_url(url: str) -> RedisTarget:
    """Read ``url`` as one of the three forms.

    Raises:
        RedisUrlError: ``url`` breaks a rule of its form (the message names the rule).
    """
    scheme, sep, rest = url.partition("://")
    known = _SCHEMES.get(scheme.lower()) if sep else None
    if known is None:
        raise RedisUrlError(f"the scheme must be one of {', '.join(_SCHEMES)}")
    topology, tls = known
    if topology is Topology.STANDALONE:
        try:
            parse_url(url)  # the parser the connection pools use: scheme, port, query options
        except ValueError as exc:
            raise RedisUrlError(str(exc)) from None
        return RedisTarget(Topology.STANDALONE, url, tls=tls)
    # The query first: its values (a CA file's path) may hold a "/".
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    options = dict(parse_qsl(query, keep_blank_values=True))
    master, db = _path(topology, path, options)
    return RedisTarget(
        topology,
        url,
        tls=tls,
        nodes=_nodes(hosts),
        master=master,
        db=db,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None,
        tls_options=_tls_options(options, tls=tls),
    )


def _tls_options(options: dict[str, str], *, tls: bool) -> tuple[tuple[str, str | bool], ...]:
    """The ``ssl_*`` query options, checked (only a TLS scheme takes them)."""
    given = {k: v for k, v in options.items() if k in _TLS_OPTIONS}
    if given and not tls:
        raise RedisUrlError(
            f"{', '.join(sorted(given))} need a TLS scheme (rediss+cluster://, rediss+sentinel://)"
        )
    out: list[tuple[str, str | bool]] = []
    for key, value in sorted(given.items()):
        if key == "ssl_cert_reqs" and value not in _CERT_REQS:
            raise RedisUrlError(f"ssl_cert_reqs must be one of {', '.join(sorted(_CERT_REQS))}")
        if key == "ssl_check_hostname":
            if value not in _BOOLS:
                raise RedisUrlError("ssl_check_hostname must be true or false")
            out.append((key, _BOOLS[value]))
        elif not value:
            raise RedisUrlError(f"{key} needs a value (a file path or a mode)")
        else:
            out.append((key, value))
    return tuple(out)


def _nodes(hosts: str) -> tuple[tuple[str, int], ...]:
    nodes: list[tuple[str, int]] = []
    for item in hosts.split(","):
        match = _HOST_PORT.match(item.strip())
        if match is None or not 0 < int(match["port"]) < 65536:
            raise RedisUrlError(f"{item.strip()!r} is not host:port (every node needs its port)")
        nodes.append((match["v6"] or match["host"], int(match["port"])))
    return tuple(nodes)


def _path(topology: Topology, path: str, options: dict[str, str]) -> tuple[str, int]:
    """The master's name and the database a cluster or Sentinel URL's path names."""
    if topology is Topology.CLUSTER:
        if path not in ("", "0"):
            raise RedisUrlError("a cluster has database 0 only: leave the path empty")
        unknown = options.keys() - _TLS_OPTIONS
        if unknown:
            raise RedisUrlError(f"unknown option(s) {', '.join(sorted(unknown))}")
        return "", 0
    master, _, db_part = path.partition("/")
    if not _MASTER.match(master):
        raise RedisUrlError("the path must name the master, like /mymaster (then /db)")
    if db_part and not db_part.isdigit():
        raise RedisUrlError("the database after the master's name must be a number")
    unknown = options.keys() - _SENTINEL_OPTIONS - _TLS_OPTIONS
    if unknown:
        raise RedisUrlError(f"unknown option(s) {', '.join(sorted(unknown))}")
    return master, int(db_part or 0)
