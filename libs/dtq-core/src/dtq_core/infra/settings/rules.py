"""The rules no single field's type can state: between fields, across sections, and on the
files and URLs a setting names. :class:`~dtq_core.infra.settings.model.Settings` runs them in
this order at start-up, so the first broken rule is the one reported."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse, urlsplit, urlunsplit

from dtq_core.errors import SettingsError
from dtq_core.infra.auth import parse_api_keys
from dtq_core.infra.origins import split_host
from dtq_core.infra.redis_url import RedisUrlError, Topology, expected_form, parse_redis_url
from dtq_core.infra.settings.base import Environment
from dtq_core.infra.settings.platform import ObservabilitySettings, RedisSettings
from dtq_core.infra.settings.services import (
    MAX_WORKER_PROCESSES,
    ApiSettings,
    GatewaySettings,
    SchedulerSettings,
    WorkerSettings,
)
from dtq_core.infra.settings.tasks import RetrySettings

_DB_PATH_RE = re.compile(r"^/?[0-9]*$")
_COUNT_RE = re.compile(r"^[0-9]{1,3}$")


def public_url(url: str) -> str:
    """``url`` without its password (in the netloc or a ``password=`` query parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username}@{host}" if parts.username else host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def read_secret_file(path: str, variable: str) -> str:
    """The content of a secret file (a Docker secret), without surrounding white space.

    Raises:
        SettingsError: naming ``variable`` and the path when the file is missing, unreadable
            or empty (the secret itself is never part of the message).
    """
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SettingsError(
            f"{variable}={path!r} is invalid: the file cannot be read ({exc.strerror or exc})",
            variable=variable,
        ) from None
    except UnicodeDecodeError:
        raise SettingsError(
            f"{variable}={path!r} is invalid: the file is not UTF-8 text", variable=variable
        ) from None
    if not text:
        raise SettingsError(f"{variable}={path!r} is invalid: the file is empty", variable=variable)
    return text


def check_lease(worker: WorkerSettings) -> None:
    """The heartbeat leaves room for two missed beats below the visibility timeout."""
    if worker.heartbeat_interval_s * 3 > worker.visibility_timeout_s:
        raise SettingsError(
            f"DTQ_HEARTBEAT_INTERVAL_S={worker.heartbeat_interval_s!r} is invalid: it must be "
            f"at most a third of DTQ_VISIBILITY_TIMEOUT_S={worker.visibility_timeout_s!r}, so "
            "that two missed heartbeats do not get a live task reclaimed",
            variable="DTQ_HEARTBEAT_INTERVAL_S",
        )


def check_processes(worker: WorkerSettings) -> None:
    """``DTQ_WORKER_PROCESSES`` is ``auto`` or a count in range."""
    value = worker.processes
    if value == "auto" or (_COUNT_RE.match(value) and 1 <= int(value) <= MAX_WORKER_PROCESSES):
        return
    raise SettingsError(
        f"DTQ_WORKER_PROCESSES={value!r} is invalid: it must be `auto` (the CPUs the worker "
        f"may use) or a number of processes from 1 to {MAX_WORKER_PROCESSES}",
        variable="DTQ_WORKER_PROCESSES",
    )


def check_replica_wait(redis: RedisSettings, scheduler: SchedulerSettings) -> None:
    """A transition that waits for replicas still ends within the leader's call deadline."""
    if redis.wait_replicas and redis.wait_timeout_ms / 1000 >= scheduler.leader_ttl_s / 3:
        raise SettingsError(
            f"DTQ_REDIS_WAIT_TIMEOUT_MS={redis.wait_timeout_ms!r} is invalid: with "
            f"DTQ_REDIS_WAIT_REPLICAS it must stay below a third of DTQ_LEADER_TTL_S="
            f"{scheduler.leader_ttl_s!r} (in ms), the deadline of a lease renewal, or every "
            "renewal that waits for a slow replica is given up before its answer",
            variable="DTQ_REDIS_WAIT_TIMEOUT_MS",
        )


def check_retry_delays(retries: RetrySettings) -> None:
    if retries.max_delay < retries.base_delay:
        raise SettingsError(
            f"DTQ_RETRY_MAX_DELAY={retries.max_delay!r} is invalid: it must be >= "
            f"DTQ_RETRY_BASE_DELAY={retries.base_delay!r}",
            variable="DTQ_RETRY_MAX_DELAY",
        )


def check_redis(redis: RedisSettings) -> None:
    """The URL parses as redis-py will parse it, and the password lives in one place."""
    _check_redis_url(redis.url)
    if redis.password_file:
        if urlparse(redis.url).password:
            raise SettingsError(
                "DTQ_REDIS_URL carries a password and DTQ_REDIS_PASSWORD_FILE is set: keep "
                "the password in the file only",
                variable="DTQ_REDIS_URL",
            )
        read_secret_file(redis.password_file, "DTQ_REDIS_PASSWORD_FILE")


def check_api(api: ApiSettings) -> None:
    """Every API key entry parses, and one key's long-polls fit in the process's."""
    # Fail at start-up, naming the bad entry by its position in the variable it came from.
    parse_api_keys(api.keys, "DTQ_API_KEYS_FILE" if api.keys_file else "DTQ_API_KEYS")
    if api.waits_per_key > api.waits_max:
        raise SettingsError(
            f"DTQ_API_WAITS_PER_KEY={api.waits_per_key!r} is invalid: it must be at "
            f"most DTQ_API_WAITS_MAX={api.waits_max!r}",
            variable="DTQ_API_WAITS_PER_KEY",
        )


def check_web(api: ApiSettings, gateway: GatewaySettings, extra_hosts: tuple[str, ...]) -> None:
    """The origins, Host names and proxies of the browser-facing services."""
    for origin in gateway.origins:
        parts = urlparse(origin)
        if origin != "*" and (
            parts.scheme not in ("http", "https") or not parts.hostname or parts.path
        ):
            raise SettingsError(
                f"DTQ_GATEWAY_ALLOWED_ORIGINS has {origin!r}: each entry must be * or "
                "scheme://host[:port], like https://ops.example.com",
                variable="DTQ_GATEWAY_ALLOWED_ORIGINS",
            )
    for proxy in api.trusted_proxies.split(","):
        try:
            if proxy.strip() != "*":
                ipaddress.ip_network(proxy.strip(), strict=False)
        except ValueError:
            raise SettingsError(
                f"DTQ_API_TRUSTED_PROXIES has {proxy.strip()!r}: each entry must be *, an "
                "IP address or a network like 172.16.0.0/12",
                variable="DTQ_API_TRUSTED_PROXIES",
            ) from None
    for host in extra_hosts:
        found = split_host(host)
        if host != "*" and (found is None or found[1] is not None):
            raise SettingsError(
                f"DTQ_ALLOWED_HOSTS has {host!r}: each entry must be * or a host name "
                "without scheme or port, like dtq.example.com",
                variable="DTQ_ALLOWED_HOSTS",
            )


def check_environment(env: Environment, api: ApiSettings) -> None:
    if env == "production" and not api.keys:
        raise SettingsError(
            "DTQ_ENV='production' is invalid without DTQ_API_KEYS or DTQ_API_KEYS_FILE: "
            "open mode is for local development only",
            variable="DTQ_ENV",
        )


TRACE_ID_FIELD = "{trace_id}"
"""What ``DTQ_TRACE_URL`` has in place of the trace id."""


def check_observability(observability: ObservabilitySettings) -> None:
    """The OTLP endpoint is a URL and the trace link a URL template with ``{trace_id}``
    (the exporter would fail on every export, the dashboard link would lead nowhere)."""
    for variable, value in (
        ("DTQ_OTLP_ENDPOINT", observability.otlp_endpoint),
        ("DTQ_TRACE_URL", observability.trace_url),
    ):
        parts = urlsplit(value)
        if value and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise SettingsError(
                f"{variable}={value!r} is invalid: it must be an http:// or https:// URL with "
                "a host",
                variable=variable,
            )
    template = observability.trace_url
    if template and TRACE_ID_FIELD not in template:
        # Replaced as plain text: other braces (a Grafana Explore URL's JSON) stay as they are.
        raise SettingsError(
            f"DTQ_TRACE_URL={template!r} is invalid: it must hold {TRACE_ID_FIELD} where the "
            "trace id goes, like http://127.0.0.1:16686/trace/{trace_id}",
            variable="DTQ_TRACE_URL",
        )


def trace_link(template: str, trace_id: str | None) -> str | None:
    """The link of ``DTQ_TRACE_URL`` to the trace ``trace_id`` (``None`` without either)."""
    if not template or trace_id is None:
        return None
    return template.replace(TRACE_ID_FIELD, trace_id)


def _check_redis_url(url: str) -> None:
    """Refuse a ``DTQ_REDIS_URL`` that is none of the three forms
    (:mod:`dtq_core.infra.redis_url`), that redis-py would refuse on the first connection, or
    that it would read other than it is written (a database path that is not a number).

    Every entry point loads settings first, so the mistake is one line at start-up instead of
    a traceback from the first connection attempt (the password never appears in it).
    """
    try:
        target = parse_redis_url(url)
    except RedisUrlError as exc:
        rule = str(exc)
    else:
        parts = urlsplit(url)
        if (
            target.topology is not Topology.STANDALONE
            or parts.scheme == "unix"
            or _DB_PATH_RE.match(parts.path)
        ):
            return
        rule = "the path must be a database number, like /0"
    raise SettingsError(
        f"DTQ_REDIS_URL={public_url(url)!r} is invalid: {rule}; expected {expected_form(url)}",
        variable="DTQ_REDIS_URL",
    )
