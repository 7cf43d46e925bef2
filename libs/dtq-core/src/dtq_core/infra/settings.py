"""Typed settings from ``DTQ_*`` environment variables, validated once at start-up.

``load_settings(os.environ)`` is called by each service's entry point and the result is
passed down; no other module reads the environment. ``docs/configuration.md`` is generated
from the :class:`Settings` fields (``python -m dtq_core.infra.settings``), so it cannot drift.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlparse, urlsplit, urlunsplit

import msgspec
from msgspec import Meta
from redis.asyncio.connection import parse_url

from dtq_core.errors import SettingsError
from dtq_core.infra.auth import parse_api_keys
from dtq_core.infra.origins import COMPOSE_HOSTS, LOCAL_HOSTS, WebPolicy, split_host
from dtq_core.names import END

PREFIX = "DTQ_"

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
Environment = Literal["development", "production"]


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every ``DTQ_*`` setting. The field name is the variable name without ``DTQ_``."""

    redis_url: Annotated[
        str, Meta(min_length=1, description="Redis connection URL (redis://, rediss://, unix://).")
    ] = "redis://localhost:6379/0"
    redis_username: Annotated[
        str,
        Meta(
            description="Redis ACL user; overrides a user named in DTQ_REDIS_URL. Empty: the "
            "URL's user, else `default`."
        ),
    ] = ""
    redis_password_file: Annotated[
        str,
        Meta(
            description="File holding the Redis password (a Docker secret); read on every new "
            "connection, so a rotated password needs no restart. The URL must then carry none."
        ),
    ] = ""
    redis_max_connections: Annotated[
        int,
        Meta(
            ge=2,
            le=10000,
            description="Redis connections of each process's pool, for short commands; a "
            "command that finds every one busy for 2 s fails (the API answers 503 `redis_busy` "
            "with Retry-After). Blocking reads (task waits, wake-ups, the gateway's reader) use "
            "connections of their own.",
        ),
    ] = 100
    namespace: Annotated[
        str,
        Meta(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}" + END,
            description="Prefix of every key; several deployments can share one Redis.",
        ),
    ] = "dtq"
    env: Annotated[
        Environment,
        Meta(description="`production` refuses to start the API without API keys."),
    ] = "development"

    api_host: Annotated[str, Meta(description="Address the ingest API binds.")] = "127.0.0.1"
    api_port: Annotated[int, Meta(ge=1, le=65535, description="Port of the ingest API.")] = 8000
    api_workers: Annotated[
        int,
        Meta(
            ge=1,
            le=64,
            description="Processes serving the ingest API (one event loop each); raise it on "
            "hosts with spare cores.",
        ),
    ] = 1
    api_trusted_proxies: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=4096,
            description="Addresses or networks (CIDR), comma-separated, whose "
            "X-Forwarded-For and X-Forwarded-Proto the API believes: the client address in "
            "its logs is then the proxy's client; `*` trusts every peer (only where nothing "
            "but the proxy can reach the API).",
        ),
    ] = "127.0.0.1,::1"
    api_keys: Annotated[
        str,
        Meta(
            description=(
                "API keys, comma separated, each `name:scope+scope:sha256-of-secret`; "
                "empty means open local-dev mode."
            )
        ),
    ] = ""
    api_keys_file: Annotated[
        str,
        Meta(
            description="File of API key entries (one per line or comma separated, `#` starts "
            "a comment), read at start-up; replaces DTQ_API_KEYS, which must then be empty."
        ),
    ] = ""
    api_waits_max: Annotated[
        int,
        Meta(
            ge=1,
            le=100000,
            description="Long-polls (`GET /tasks/{id}/result?wait=`) an API process holds at "
            "once; one more gets a 429 `too_many_waits` with Retry-After. All of them share one "
            "Redis reader, so this bounds memory, not connections.",
        ),
    ] = 500
    api_waits_per_key: Annotated[
        int,
        Meta(
            ge=1,
            le=100000,
            description="Long-polls one API key (or, in open mode, everyone) holds at once in "
            "an API process; at most DTQ_API_WAITS_MAX.",
        ),
    ] = 50
    gateway_host: Annotated[str, Meta(description="Address the event gateway binds.")] = "127.0.0.1"
    gateway_port: Annotated[int, Meta(ge=1, le=65535, description="Port of the event gateway.")] = (
        8002
    )
    gateway_max_clients: Annotated[
        int,
        Meta(ge=1, le=100000, description="Clients per event-gateway process; more get a 503."),
    ] = 1000
    gateway_client_buffer: Annotated[
        int,
        Meta(
            ge=10,
            le=1000000,
            description="Events queued per gateway client; a client that falls further behind "
            "gets a gap and is closed, and resumes by cursor.",
        ),
    ] = 1000
    gateway_allowed_origins: Annotated[
        str,
        Meta(
            max_length=4096,
            description="Browser origins allowed to open event streams besides the gateway's "
            "own host, comma-separated (`https://ops.example.com`), or `*` for any. A browser "
            "request from any other origin gets a 403, so a foreign web page cannot read events "
            "through a visitor's browser; clients that send no Origin (not browsers) are not "
            "affected.",
        ),
    ] = ""
    allowed_hosts: Annotated[
        str,
        Meta(
            max_length=4096,
            description="Host names the ingest API and the event gateway answer, "
            "comma-separated (`dtq.example.com`), besides localhost, 127.0.0.1, [::1], IP "
            "addresses, DTQ_API_HOST, DTQ_GATEWAY_HOST and the compose service names; `*` for "
            "any. A request for any other Host gets a 421, so a DNS-rebinding page cannot reach "
            "the services through a visitor's browser: list the name browsers use for the "
            "dashboard.",
        ),
    ] = ""
    ws_path: Annotated[
        str, Meta(pattern=r"^/", description="Path of the event gateway's WebSocket endpoint.")
    ] = "/ws/events"

    worker_concurrency: Annotated[
        int, Meta(ge=1, le=10000, description="Handlers a worker process runs at once.")
    ] = 100
    worker_id: Annotated[
        str,
        Meta(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}" + END,
            description="Name of this worker process; defaults to `<hostname>-<pid>`. The worker "
            "registers and reads its queues as `<DTQ_WORKER_ID>:<6 random hex digits>`, new "
            "at every start, so a restarted worker or two processes given the same name never "
            "share pending entries.",
        ),
    ] = msgspec.field(default_factory=_default_worker_id)
    worker_metrics_port: Annotated[
        int, Meta(ge=0, le=65535, description="Prometheus port of the worker; 0 turns it off.")
    ] = 8001
    scheduler_metrics_port: Annotated[
        int, Meta(ge=0, le=65535, description="Prometheus port of the scheduler; 0 turns it off.")
    ] = 8003
    metrics_host: Annotated[
        str,
        Meta(
            min_length=1,
            description="Address the worker's and the scheduler's metrics listeners bind (the "
            "API and the gateway serve `/metrics` on their own address).",
        ),
    ] = "0.0.0.0"  # noqa: S104 - Prometheus scrapes every replica from another host
    queue_metrics_interval_s: Annotated[
        float,
        Meta(
            gt=0,
            le=3600,
            description="How often the scheduler leader refreshes the queue gauges "
            "(`dtq_queue_*`, `dtq_workers_registered`); a few pipelined reads per queue.",
        ),
    ] = 5.0
    claim_batch: Annotated[
        int,
        Meta(
            ge=0,
            le=500,
            description="Tasks claimed per round trip; 0 picks min(100, concurrency / 2).",
        ),
    ] = 0
    worker_prefetch: Annotated[
        int,
        Meta(
            ge=-1,
            le=10000,
            description=(
                "Tasks a worker holds claimed beyond its concurrency; -1 picks one claim batch."
            ),
        ),
    ] = -1

    visibility_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            le=86400,
            description="A claimed task whose worker stops heartbeating is reclaimed after this.",
        ),
    ] = 30.0
    heartbeat_interval_s: Annotated[
        float,
        Meta(
            gt=0,
            description="Lease extension and worker heartbeat period; at most a third of the "
            "visibility timeout.",
        ),
    ] = 5.0
    max_queue_depth: Annotated[
        int,
        Meta(
            ge=0,
            description="Waiting tasks (queued, delayed and retrying) per queue before submits "
            "are refused; 0 means unlimited.",
        ),
    ] = 10000
    max_payload_bytes: Annotated[
        int,
        Meta(ge=256, le=64 * 1024 * 1024, description="Encoded args + kwargs + metadata cap."),
    ] = 262144
    task_timeout_ms: Annotated[
        int,
        Meta(ge=1, le=3600000, description="Default handler timeout when a task sets none."),
    ] = 30000
    max_attempts: Annotated[
        int, Meta(ge=1, le=1000, description="Default attempt budget when a task sets none.")
    ] = 10
    retry_base_delay: Annotated[
        float, Meta(ge=0, le=86400, description="First retry delay in seconds.")
    ] = 1.0
    retry_max_delay: Annotated[
        float, Meta(ge=0, le=86400 * 7, description="Cap of the exponential retry delay.")
    ] = 60.0
    retry_jitter: Annotated[
        float,
        Meta(ge=0, le=1, description="Symmetric jitter: delay × (1 ± jitter), uniformly."),
    ] = 0.2
    task_retention_s: Annotated[
        int,
        Meta(
            ge=60,
            description="How long records of waiting, failed, dead, cancelled and expired tasks "
            "are kept; also the longest allowed delay.",
        ),
    ] = 604800
    result_retention_s: Annotated[
        int,
        Meta(ge=1, description="How long a succeeded task's record and result are kept."),
    ] = 3600
    result_max_bytes: Annotated[
        int,
        Meta(ge=0, description="Results larger than this (JSON bytes) are stored truncated."),
    ] = 8192
    idem_ttl_s: Annotated[
        int, Meta(ge=1, description="How long an idempotency key is remembered.")
    ] = 86400
    drain_timeout_s: Annotated[
        float,
        Meta(
            ge=0,
            le=3600,
            description="On SIGTERM, how long in-flight handlers may finish before they are "
            "cancelled and handed back.",
        ),
    ] = 30.0
    dlq_enabled: Annotated[
        bool,
        Meta(description="Exhausted tasks go to the dead-letter queue (`dead`), else `failed`."),
    ] = True
    dlq_maxlen: Annotated[
        int,
        Meta(
            ge=1,
            description="Cap of each queue's dead-letter stream; the record of a dead task "
            "whose entry is trimmed goes with it.",
        ),
    ] = 10000
    events_maxlen: Annotated[
        int,
        Meta(ge=100, description="Approximate cap of each queue's lifecycle-event stream."),
    ] = 100000
    leader_ttl_s: Annotated[
        float,
        Meta(gt=0, le=3600, description="Scheduler leader lease; a follower takes over after it."),
    ] = 10.0
    reconcile_interval_s: Annotated[
        float,
        Meta(
            gt=0,
            le=86400,
            description="How often the scheduler leader checks task records against their "
            "stream entries (repairs entries deleted by hand; a SCAN of every queue).",
        ),
    ] = 300.0
    scheduler_tick_s: Annotated[
        float,
        Meta(gt=0, le=60, description="Longest pause between two promotion passes."),
    ] = 0.25
    reject_unknown_tasks: Annotated[
        bool,
        Meta(
            description="Refuse a submit unless a live worker serving its queue handles the task "
            "name (only while some live worker has registered tasks), and send a submit that names "
            "no queue to the queue the task is registered on. false: submits go where they say, "
            "`default` when they say nothing."
        ),
    ] = True
    reject_unknown_queues: Annotated[
        bool,
        Meta(
            description="Refuse submits to a queue no worker has registered and no admin created "
            "(`POST /api/v1/queues`, `dtq queue create`). false: a submit creates its queue, up to "
            "DTQ_MAX_QUEUES."
        ),
    ] = True
    max_queues: Annotated[
        int,
        Meta(
            ge=1,
            le=1_000_000,
            description="Most queues the queue registry holds (created by workers, admins, or "
            "submits when DTQ_REJECT_UNKNOWN_QUEUES=false); each costs Redis memory and metric "
            "series.",
        ),
    ] = 1000
    log_level: Annotated[LogLevel, Meta(description="Least severe level logged.")] = "INFO"
    log_json: Annotated[
        bool, Meta(description="JSON log lines (containers) instead of the console renderer.")
    ] = False
    otlp_endpoint: Annotated[
        str,
        Meta(description="OTLP/HTTP endpoint for traces, e.g. http://collector:4318; empty: off."),
    ] = ""

    def __post_init__(self) -> None:
        if self.heartbeat_interval_s * 3 > self.visibility_timeout_s:
            raise SettingsError(
                f"DTQ_HEARTBEAT_INTERVAL_S={self.heartbeat_interval_s!r} is invalid: it must be "
                f"at most a third of DTQ_VISIBILITY_TIMEOUT_S={self.visibility_timeout_s!r}, so "
                "that two missed heartbeats do not get a live task reclaimed",
                variable="DTQ_HEARTBEAT_INTERVAL_S",
            )
        if self.retry_max_delay < self.retry_base_delay:
            raise SettingsError(
                f"DTQ_RETRY_MAX_DELAY={self.retry_max_delay!r} is invalid: it must be >= "
                f"DTQ_RETRY_BASE_DELAY={self.retry_base_delay!r}",
                variable="DTQ_RETRY_MAX_DELAY",
            )
        _check_redis_url(self.redis_url)
        if self.redis_password_file:
            if urlparse(self.redis_url).password:
                raise SettingsError(
                    "DTQ_REDIS_URL carries a password and DTQ_REDIS_PASSWORD_FILE is set: keep "
                    "the password in the file only",
                    variable="DTQ_REDIS_URL",
                )
            read_secret_file(self.redis_password_file, "DTQ_REDIS_PASSWORD_FILE")
        # Fail at start-up, naming the bad entry by its position in the variable it came from.
        parse_api_keys(self.api_keys, "DTQ_API_KEYS_FILE" if self.api_keys_file else "DTQ_API_KEYS")
        if self.api_waits_per_key > self.api_waits_max:
            raise SettingsError(
                f"DTQ_API_WAITS_PER_KEY={self.api_waits_per_key!r} is invalid: it must be at "
                f"most DTQ_API_WAITS_MAX={self.api_waits_max!r}",
                variable="DTQ_API_WAITS_PER_KEY",
            )
        self._check_web()
        if self.env == "production" and not self.api_keys:
            raise SettingsError(
                "DTQ_ENV='production' is invalid without DTQ_API_KEYS or DTQ_API_KEYS_FILE: "
                "open mode is for local development only",
                variable="DTQ_ENV",
            )

    def _check_web(self) -> None:
        """The origins, Host names and proxies of the browser-facing services."""
        for origin in self.allowed_origins:
            parts = urlparse(origin)
            if origin != "*" and (
                parts.scheme not in ("http", "https") or not parts.hostname or parts.path
            ):
                raise SettingsError(
                    f"DTQ_GATEWAY_ALLOWED_ORIGINS has {origin!r}: each entry must be * or "
                    "scheme://host[:port], like https://ops.example.com",
                    variable="DTQ_GATEWAY_ALLOWED_ORIGINS",
                )
        for proxy in self.api_trusted_proxies.split(","):
            try:
                if proxy.strip() != "*":
                    ipaddress.ip_network(proxy.strip(), strict=False)
            except ValueError:
                raise SettingsError(
                    f"DTQ_API_TRUSTED_PROXIES has {proxy.strip()!r}: each entry must be *, an "
                    "IP address or a network like 172.16.0.0/12",
                    variable="DTQ_API_TRUSTED_PROXIES",
                ) from None
        for host in self.extra_hosts:
            found = split_host(host)
            if host != "*" and (found is None or found[1] is not None):
                raise SettingsError(
                    f"DTQ_ALLOWED_HOSTS has {host!r}: each entry must be * or a host name "
                    "without scheme or port, like dtq.example.com",
                    variable="DTQ_ALLOWED_HOSTS",
                )

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        """``DTQ_GATEWAY_ALLOWED_ORIGINS`` as a tuple, without blanks or a trailing ``/``."""
        return tuple(
            o.strip().rstrip("/") for o in self.gateway_allowed_origins.split(",") if o.strip()
        )

    @property
    def extra_hosts(self) -> tuple[str, ...]:
        """``DTQ_ALLOWED_HOSTS`` as a tuple of lower-case entries."""
        return tuple(h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip())

    def web_policy(self, *, origins: bool) -> WebPolicy:
        """The Host names served and the browser origins accepted (:mod:`dtq_core.infra.origins`).

        Args:
            origins: whether ``DTQ_GATEWAY_ALLOWED_ORIGINS`` applies (the event gateway); the
                API accepts its own origin only, since it answers no CORS request.
        """
        named = (split_host(h) for h in (self.api_host, self.gateway_host, *self.extra_hosts))
        hosts = {*LOCAL_HOSTS, *COMPOSE_HOSTS, "*" if "*" in self.extra_hosts else ""}
        hosts |= {found[0] for found in named if found is not None}
        hosts.discard("")
        return WebPolicy(frozenset(hosts), self.allowed_origins if origins else ())

    @property
    def effective_claim_batch(self) -> int:
        return self.claim_batch or max(1, min(100, self.worker_concurrency // 2))

    @property
    def effective_prefetch(self) -> int:
        return self.effective_claim_batch if self.worker_prefetch < 0 else self.worker_prefetch


_FIELD_RE = re.compile(r"\$\.(\w+)")
_DB_PATH_RE = re.compile(r"^/?[0-9]*$")
BOOL_SPELLINGS = "true, false, 1, 0 (any case)"
"""What a bool setting accepts (msgspec's lax str -> bool conversion)."""


def public_url(url: str) -> str:
    """``url`` without its password (in the netloc or a ``password=`` query parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username}@{host}" if parts.username else host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _check_redis_url(url: str) -> None:
    """Refuse a ``DTQ_REDIS_URL`` that redis-py would refuse on the first connection, or
    would read other than it is written (a database path that is not a number).

    Every entry point loads settings first, so the mistake is one line at start-up instead of
    a traceback from the first connection attempt (the password never appears in it).
    """
    try:
        parse_url(url)  # the parser the connection pools use: scheme, port, query options
    except ValueError as exc:
        rule = str(exc)
    else:
        parts = urlsplit(url)
        if parts.scheme == "unix" or _DB_PATH_RE.match(parts.path):
            return
        rule = "the path must be a database number, like /0"
    raise SettingsError(
        f"DTQ_REDIS_URL={public_url(url)!r} is invalid: {rule}", variable="DTQ_REDIS_URL"
    )


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


def _api_keys_from_file(raw: dict[str, Any]) -> None:
    """Replace ``api_keys_file`` by its entries in ``api_keys`` (before validation)."""
    path = raw.get("api_keys_file")
    if not path:
        return
    if raw.get("api_keys"):
        raise SettingsError(
            "DTQ_API_KEYS and DTQ_API_KEYS_FILE are both set: keep the keys in one place (the "
            "file)",
            variable="DTQ_API_KEYS_FILE",
        )
    text = read_secret_file(str(path), "DTQ_API_KEYS_FILE")
    entries = []
    for line in text.splitlines():
        content = line.split("#", 1)[0]
        entries += [e.strip() for e in content.split(",") if e.strip()]
    if not entries:
        raise SettingsError(
            f"DTQ_API_KEYS_FILE={path!r} is invalid: it holds no key entry",
            variable="DTQ_API_KEYS_FILE",
        )
    raw["api_keys"] = ",".join(entries)


def env_name(field: str) -> str:
    return PREFIX + field.upper()


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from ``DTQ_*`` variables in ``env`` plus keyword overrides.

    Args:
        env: the environment (``os.environ``); variables without the prefix are ignored.
        overrides: field values that win over ``env`` (tests and entry points use these).

    Raises:
        SettingsError: naming the variable, the value and the rule it breaks.
    """
    fields = {f.name for f in msgspec.structs.fields(Settings)}
    raw: dict[str, Any] = {}
    for name, value in (env or {}).items():
        if not name.startswith(PREFIX):
            continue
        field = name[len(PREFIX) :].lower()
        if field not in fields:
            # A typo in a variable name silently falls back to the default otherwise.
            raise SettingsError(
                f"{name} is not a dtq setting; known settings: "
                + ", ".join(sorted(env_name(f) for f in fields)),
                variable=name,
            )
        raw[field] = value
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise SettingsError(
            f"{unknown[0]!r} ({env_name(unknown[0])}) is not a dtq setting; known settings: "
            + ", ".join(sorted(fields)),
            variable=env_name(unknown[0]),
        )
    raw.update(overrides)
    _api_keys_from_file(raw)
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        match = _FIELD_RE.search(str(exc))
        field = match.group(1) if match else "?"
        rule = str(exc).split(" - at ", 1)[0]
        prop = _schema_properties().get(field, {})
        if prop.get("enum"):
            rule = "must be one of " + ", ".join(str(c) for c in prop["enum"])
        elif prop.get("type") == "boolean":
            rule = f"must be one of {BOOL_SPELLINGS}"
        raise SettingsError(
            f"{env_name(field)}={raw.get(field)!r} is invalid: {rule}", variable=env_name(field)
        ) from None


@contextmanager
def exit_on_settings_error(program: str) -> Iterator[None]:
    """Turn a :class:`SettingsError` raised inside into one line and exit status 2.

    Every entry point starts under it (loading the settings, binding its ports), so a
    mistake in the configuration reads the same everywhere: ``<program>: <what to change>``,
    with no traceback.
    """
    try:
        yield
    except SettingsError as exc:
        sys.stderr.write(f"{program}: {exc}\n")
        raise SystemExit(2) from None


def settings_or_exit(program: str, **overrides: Any) -> Settings:
    """:func:`load_settings` from ``os.environ``, exiting as :func:`exit_on_settings_error`."""
    with exit_on_settings_error(program):
        return load_settings(os.environ, **overrides)


def _schema_properties() -> dict[str, dict[str, Any]]:
    schema = msgspec.json.schema(Settings)
    props: dict[str, dict[str, Any]] = schema["$defs"]["Settings"]["properties"]
    return props


def _markdown_table() -> str:
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable with the `DTQ_` prefix. Values are validated",
        "at start-up; an invalid one stops the service with a message that names the variable,",
        "the value and the rule. An unknown `DTQ_*` variable is an error too (a typo would",
        "otherwise fall back to the default silently).",
        "",
        "This page is generated from `dtq_core.infra.settings.Settings` (`just docs`); a test",
        "fails when it drifts.",
        "",
        "| variable | type | default | rule | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, prop in _schema_properties().items():
        rules = [
            f"{sym} {prop[key]}"
            for key, sym in (
                ("minimum", ">="),
                ("exclusiveMinimum", ">"),
                ("maximum", "<="),
                ("exclusiveMaximum", "<"),
            )
            if key in prop
        ]
        if "pattern" in prop:
            rules.append(f"matches `{prop['pattern']}`")
        if prop.get("type") == "boolean":
            rules.append(BOOL_SPELLINGS)
        if "enum" in prop:
            kind = "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
        else:
            kind = {"number": "float", "integer": "int", "boolean": "bool"}.get(
                prop.get("type", ""), "str"
            )
        if name == "worker_id":
            default = "`<hostname>-<pid>`"
        else:
            value = prop.get("default", "")
            if isinstance(value, bool):
                value = str(value).lower()
            default = f"`{value}`" if value != "" else "(empty)"
        lines.append(
            f"| `{env_name(name)}` | {kind} | {default} | {', '.join(rules)} "
            f"| {prop.get('description', '')} |"
        )
    lines += [
        "",
        "Cross-field rules: `DTQ_HEARTBEAT_INTERVAL_S` × 3 <= `DTQ_VISIBILITY_TIMEOUT_S`; "
        "`DTQ_RETRY_MAX_DELAY` >= `DTQ_RETRY_BASE_DELAY`; `DTQ_ENV=production` requires "
        "`DTQ_API_KEYS` or `DTQ_API_KEYS_FILE`; `DTQ_API_KEYS` and `DTQ_API_KEYS_FILE` are "
        "exclusive; with `DTQ_REDIS_PASSWORD_FILE`, `DTQ_REDIS_URL` carries no password.",
        "",
        "Secrets come from files (Docker secrets), never from the environment: "
        "`DTQ_REDIS_PASSWORD_FILE` and `DTQ_API_KEYS_FILE` name them (see "
        "[deployment.md](deployment.md) and [security.md](security.md)).",
        "",
    ]
    return "\n".join(lines)


def configuration_markdown() -> str:
    """The settings reference as Markdown (``docs/configuration.md``)."""
    return _markdown_table()
