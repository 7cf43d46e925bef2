"""What a web page may make a visitor's browser do to the API and the event gateway.

Two attacks need no key in open mode and the visitor's key otherwise, so both services refuse
them before anything else:

- **DNS rebinding.** A page on ``attacker.example`` re-points its own name at 127.0.0.1 and is
  then same-origin with the local service. The browser still sends ``Host: attacker.example``,
  so a server that answers only its own names is out of reach (:meth:`WebPolicy.host_allowed`).
  Any IP literal is served too: a page can only make a browser send an IP as ``Host`` when the
  page itself was loaded from that address, and Prometheus scrapes each replica by its address.
- **Cross-site requests.** A body-less ``POST`` is a CORS "simple" request that a page may send
  with ``mode: "no-cors"``, and a ``WebSocket`` is never subject to CORS. Browsers mark both with
  ``Origin`` (and ``Sec-Fetch-Site``), so an origin that is not the request's own (scheme, host
  and port, :meth:`WebPolicy.origin_allowed`) nor listed is refused.

``X-Forwarded-Proto`` is taken as the scheme when present: a page cannot set it (a custom
header makes a request non-simple, so the browser sends a preflight the services never answer,
and a ``WebSocket`` sets no header at all), and behind a TLS proxy it is the scheme the browser
used.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
"""Names of this machine, always served."""

COMPOSE_HOSTS = ("ingest-api", "event-gateway", "dashboard")
"""docker-compose service names, by which the services reach each other."""

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods that change state; ``GET`` answers cannot be read cross-origin (no CORS headers)."""

_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


@dataclass(frozen=True, slots=True)
class Origin:
    """A web origin: scheme, host and port (the default port when none is written)."""

    scheme: str
    host: str
    port: int


def split_host(authority: str) -> tuple[str, int | None] | None:
    """``Host`` header ``example.com:8080`` as ``("example.com", 8080)``, ``None`` if invalid.

    The host is lower case and without IPv6 brackets (``[::1]`` is ``::1``).
    """
    try:
        parts = urlsplit(f"//{authority.strip()}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.path or parts.query or parts.fragment or parts.username is not None:
        return None
    return host, port


def parse_origin(value: str) -> Origin | None:
    """An ``Origin`` header as an :class:`Origin`; ``None`` for ``null`` or anything invalid."""
    try:
        parts = urlsplit(value.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not host or scheme not in _DEFAULT_PORTS or parts.path not in ("", "/"):
        return None
    return Origin(scheme, host, port or _DEFAULT_PORTS[scheme])


def request_origin(scheme: str, host_header: str) -> Origin | None:
    """The origin a request was sent to: its scheme and its ``Host`` header."""
    split = split_host(host_header)
    scheme = {"ws": "http", "wss": "https"}.get(scheme.lower(), scheme.lower())
    if split is None or scheme not in _DEFAULT_PORTS:
        return None
    host, port = split
    return Origin(scheme, host, port or _DEFAULT_PORTS[scheme])


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class WebPolicy:
    """The Host names a service answers and the browser origins it accepts.

    Attributes:
        hosts: names served besides IP literals (lower case); ``*`` serves any.
        origins: origins accepted besides the request's own, as written in the settings
            (``https://ops.example.com``); ``*`` accepts any.
    """

    hosts: frozenset[str]
    origins: tuple[str, ...] = ()

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether a request with this ``Host`` is served (no header: not a browser)."""
        if host_header is None or "*" in self.hosts:
            return True
        split = split_host(host_header)
        if split is None:
            return False
        host = split[0].rstrip(".")
        return host in self.hosts or is_ip(host)

    def origin_allowed(self, origin: str | None, scheme: str, host_header: str | None) -> bool:
        """Whether a browser request from ``origin`` may be served (no ``Origin``: allowed).

        Args:
            origin: the ``Origin`` header.
            scheme: the scheme the request arrived with (``X-Forwarded-Proto`` when present).
            host_header: the ``Host`` header.
        """
        if origin is None or "*" in self.origins or origin.strip().rstrip("/") in self.origins:
            return True
        sent_from = parse_origin(origin)
        sent_to = request_origin(scheme, host_header or "")
        return sent_from is not None and sent_from == sent_to

    def cross_site(self, fetch_site: str | None, origin: str | None) -> bool:
        """Whether ``Sec-Fetch-Site`` says a foreign site made the request; a listed origin
        may be on another site, so it is let through."""
        if (fetch_site or "").strip().lower() != "cross-site":
            return False
        listed = origin is not None and origin.strip().rstrip("/") in self.origins
        return not (listed or "*" in self.origins)


def header(scope: Any, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) of an ASGI scope, decoded as latin-1
    (as HTTP is)."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def forwarded_scheme(forwarded_proto: str | None, scheme: str) -> str:
    """The scheme the browser used: the first ``X-Forwarded-Proto`` value, else ``scheme``."""
    if forwarded_proto:
        first = forwarded_proto.split(",", 1)[0].strip().lower()
        if first in _DEFAULT_PORTS:
            return first
    return scheme
