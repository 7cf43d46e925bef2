"""The sections every process reads the same way: the Redis connection and observability."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from dtq_core.infra.settings.base import LogLevel, Section


class RedisSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How every process connects to Redis (``settings.redis``)."""

    title = "Redis"

    url: Annotated[
        str,
        Meta(
            min_length=1,
            description="Redis connection URL: redis://, rediss:// or unix:// for one Redis; "
            "redis+cluster://host:port[,host:port...] for Redis Cluster; "
            "redis+sentinel://host:port[,host:port...]/master-name[/db] for a master watched "
            "by Sentinel (docs/scaling.md). The rediss forms (rediss://, rediss+cluster://, "
            "rediss+sentinel://) speak TLS to the data nodes; a private CA goes in the query as "
            "?ssl_ca_certs=/path/ca.pem (docs/scaling.md, TLS to Redis).",
        ),
    ] = msgspec.field(default="redis://localhost:6379/0", name="redis_url")
    username: Annotated[
        str,
        Meta(
            description="Redis ACL user; overrides a user named in DTQ_REDIS_URL. Empty: the "
            "URL's user, else `default`."
        ),
    ] = msgspec.field(default="", name="redis_username")
    password_file: Annotated[
        str,
        Meta(
            description="File holding the Redis password (a Docker secret); read on every new "
            "connection, so a rotated password needs no restart. The URL must then carry none."
        ),
    ] = msgspec.field(default="", name="redis_password_file")
    max_connections: Annotated[
        int,
        Meta(
            ge=2,
            le=10000,
            description="Redis connections of each process's pool, for short commands; a "
            "command that finds every one busy for 2 s fails (the API answers 503 `redis_busy` "
            "with Retry-After). Blocking reads (task waits, wake-ups, the gateway's reader) use "
            "connections of their own.",
        ),
    ] = msgspec.field(default=100, name="redis_max_connections")
    wait_replicas: Annotated[
        int,
        Meta(
            ge=0,
            le=16,
            description="Replicas that must confirm every state transition (a submit, a claim, "
            "a finish, an admin change) before it is acknowledged: each is followed by `WAIT` "
            "on the same connection. 0: acknowledged once the master has it (asynchronous "
            "replication; a failover can lose it). Not confirmed in time: the caller gets "
            "503 `redis_not_replicated` (docs/scaling.md, Replication and acknowledgements).",
        ),
    ] = msgspec.field(default=0, name="redis_wait_replicas")
    wait_timeout_ms: Annotated[
        int,
        Meta(
            ge=1,
            le=60000,
            description="How long a transition waits for `DTQ_REDIS_WAIT_REPLICAS` replicas "
            "to confirm it, in milliseconds; below a third of `DTQ_LEADER_TTL_S` (the "
            "deadline of a lease renewal).",
        ),
    ] = msgspec.field(default=500, name="redis_wait_timeout_ms")


class ObservabilitySettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Logs, traces and the metrics listeners of every process (``settings.observability``)."""

    title = "Observability"

    metrics_host: Annotated[
        str,
        Meta(
            min_length=1,
            description="Address the worker's and the scheduler's metrics listeners bind (the "
            "API and the gateway serve `/metrics` on their own address).",
        ),
    ] = "0.0.0.0"  # noqa: S104 - Prometheus scrapes every replica from another host
    log_level: Annotated[LogLevel, Meta(description="Least severe level logged.")] = "INFO"
    log_json: Annotated[
        bool, Meta(description="JSON log lines (containers) instead of the console renderer.")
    ] = False
    otlp_endpoint: Annotated[
        str,
        Meta(
            description="OTLP/HTTP collector for traces, a base URL like "
            "http://collector:4318 (spans go to its /v1/traces); empty: off. A shorthand: "
            "`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and `OTEL_EXPORTER_OTLP_ENDPOINT` win over "
            'it when set (docs/tracing.md, "Turning it on").'
        ),
    ] = ""
    trace_url: Annotated[
        str,
        Meta(
            max_length=2048,
            description="Link to a task's trace in your trace viewer, `{trace_id}` standing "
            "for the trace id: http://127.0.0.1:16686/trace/{trace_id} for Jaeger. Set on the "
            "API, the dashboard's task page links there; set where `dtq` runs, `dtq task "
            "show` prints the link (`trace_url`). Empty: no link.",
        ),
    ] = ""
