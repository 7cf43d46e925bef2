"""One section per service: what the ingest API, the event gateway, the worker and the
scheduler leader read and no other process needs."""

from __future__ import annotations

import os
import socket
from typing import Annotated

import msgspec
from msgspec import Meta

from dtq_core.infra.settings.base import Section
from dtq_core.names import END

MAX_WORKER_PROCESSES = 256
"""The most worker processes (and handler processes) one ``dtq-worker`` runs."""


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class ApiSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ingest API's listener, API keys and long-poll limits (``settings.api``)."""

    title = "Ingest API"

    host: Annotated[str, Meta(description="Address the ingest API binds.")] = msgspec.field(
        default="127.0.0.1", name="api_host"
    )
    port: Annotated[int, Meta(ge=1, le=65535, description="Port of the ingest API.")] = (
        msgspec.field(default=8000, name="api_port")
    )
    workers: Annotated[
        int,
        Meta(
            ge=1,
            le=64,
            description="Processes serving the ingest API (one event loop each); raise it on "
            "hosts with spare cores.",
        ),
    ] = msgspec.field(default=1, name="api_workers")
    trusted_proxies: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=4096,
            description="Addresses or networks (CIDR), comma-separated, whose "
            "X-Forwarded-For and X-Forwarded-Proto the API believes: the client address in "
            "its logs is then the proxy's client; `*` trusts every peer (only where nothing "
            "but the proxy can reach the API).",
        ),
    ] = msgspec.field(default="127.0.0.1,::1", name="api_trusted_proxies")
    keys: Annotated[
        str,
        Meta(
            description=(
                "API keys, comma separated, each `name:scope+scope:sha256-of-secret`; "
                "empty means open local-dev mode."
            )
        ),
    ] = msgspec.field(default="", name="api_keys")
    keys_file: Annotated[
        str,
        Meta(
            description="File of API key entries (one per line or comma separated, `#` starts "
            "a comment), read at start-up; replaces DTQ_API_KEYS, which must then be empty."
        ),
    ] = msgspec.field(default="", name="api_keys_file")
    waits_max: Annotated[
        int,
        Meta(
            ge=1,
            le=100000,
            description="Long-polls (`GET /tasks/{id}/result?wait=`) an API process holds at "
            "once; one more gets a 429 `too_many_waits` with Retry-After. All of them share one "
            "Redis reader, so this bounds memory, not connections.",
        ),
    ] = msgspec.field(default=500, name="api_waits_max")
    waits_per_key: Annotated[
        int,
        Meta(
            ge=1,
            le=100000,
            description="Long-polls one API key (or, in open mode, everyone) holds at once in "
            "an API process; at most DTQ_API_WAITS_MAX.",
        ),
    ] = msgspec.field(default=50, name="api_waits_per_key")


class GatewaySettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The event gateway's listener, client limits and browser origins (``settings.gateway``)."""

    title = "Event gateway"

    host: Annotated[str, Meta(description="Address the event gateway binds.")] = msgspec.field(
        default="127.0.0.1", name="gateway_host"
    )
    port: Annotated[int, Meta(ge=1, le=65535, description="Port of the event gateway.")] = (
        msgspec.field(default=8002, name="gateway_port")
    )
    max_clients: Annotated[
        int,
        Meta(ge=1, le=100000, description="Clients per event-gateway process; more get a 503."),
    ] = msgspec.field(default=1000, name="gateway_max_clients")
    client_buffer: Annotated[
        int,
        Meta(
            ge=10,
            le=1000000,
            description="Events queued per gateway client; a client that falls further behind "
            "gets a gap and is closed, and resumes by cursor.",
        ),
    ] = msgspec.field(default=1000, name="gateway_client_buffer")
    allowed_origins: Annotated[
        str,
        Meta(
            max_length=4096,
            description="Browser origins allowed to open event streams besides the gateway's "
            "own host, comma-separated (`https://ops.example.com`), or `*` for any. A browser "
            "request from any other origin gets a 403, so a foreign web page cannot read events "
            "through a visitor's browser; clients that send no Origin (not browsers) are not "
            "affected.",
        ),
    ] = msgspec.field(default="", name="gateway_allowed_origins")
    ws_path: Annotated[
        str, Meta(pattern=r"^/", description="Path of the event gateway's WebSocket endpoint.")
    ] = "/ws/events"

    @property
    def origins(self) -> tuple[str, ...]:
        """``DTQ_GATEWAY_ALLOWED_ORIGINS`` as a tuple, without blanks or a trailing ``/``."""
        return tuple(o.strip().rstrip("/") for o in self.allowed_origins.split(",") if o.strip())


class WorkerSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A worker process: its name, concurrency, claiming, leases and drain
    (``settings.worker``). The scheduler leader reads the two lease periods too."""

    title = "Worker"

    concurrency: Annotated[
        int, Meta(ge=1, le=10000, description="Handlers a worker process runs at once.")
    ] = msgspec.field(default=100, name="worker_concurrency")
    processes: Annotated[
        str,
        Meta(
            max_length=8,
            description="Worker processes `dtq-worker` runs under one supervisor, each with "
            "DTQ_WORKER_CONCURRENCY handlers: a number from 1 to "
            f"{MAX_WORKER_PROCESSES}, or `auto` for the CPUs the worker may use (its CPU "
            "affinity and cgroup CPU quota). The supervisor restarts a process that dies, "
            "drains them all on SIGTERM, and serves one `/metrics` and `/health`; the "
            "registry shows them as one worker. `--processes` overrides it.",
        ),
    ] = msgspec.field(default="1", name="worker_processes")
    process_pool: Annotated[
        int,
        Meta(
            ge=0,
            le=MAX_WORKER_PROCESSES,
            description="Processes each worker process keeps for the handlers registered "
            'with `executor="process"` (a timeout or a cancel kills the handler\'s process '
            "and starts a new one); 0 picks the CPUs the worker may use divided by its "
            "worker processes, at least 1.",
        ),
    ] = msgspec.field(default=0, name="worker_process_pool")
    id: Annotated[
        str,
        Meta(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}" + END,
            description="Name of this worker process; defaults to `<hostname>-<pid>`. The worker "
            "registers and reads its queues as `<DTQ_WORKER_ID>:<6 random hex digits>`, new "
            "at every start, so a restarted worker or two processes given the same name never "
            "share pending entries.",
        ),
    ] = msgspec.field(default_factory=_default_worker_id, name="worker_id")
    metrics_port: Annotated[
        int,
        Meta(
            ge=0,
            le=65535,
            description="Port of the worker's `/metrics` (Prometheus) and `/health` (liveness: "
            "event loop and heartbeat age); 0 turns the listener off.",
        ),
    ] = msgspec.field(default=8001, name="worker_metrics_port")
    claim_batch: Annotated[
        int,
        Meta(
            ge=0,
            le=500,
            description="Tasks claimed per round trip; 0 picks min(100, concurrency / 2).",
        ),
    ] = 0
    prefetch: Annotated[
        int,
        Meta(
            ge=-1,
            le=10000,
            description=(
                "Tasks a worker holds claimed beyond its concurrency; -1 picks one claim batch."
            ),
        ),
    ] = msgspec.field(default=-1, name="worker_prefetch")
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
    drain_timeout_s: Annotated[
        float,
        Meta(
            ge=0,
            le=3600,
            description="On SIGTERM, how long in-flight handlers may finish before they are "
            "cancelled and handed back.",
        ),
    ] = 30.0

    @property
    def process_count(self) -> int | None:
        """``DTQ_WORKER_PROCESSES`` as a number; ``None`` for ``auto`` (the worker counts the
        CPUs it may use: :func:`dtq_worker.cpus.usable_cpus`)."""
        return None if self.processes == "auto" else int(self.processes)

    @property
    def effective_claim_batch(self) -> int:
        """Tasks claimed per round trip: ``DTQ_CLAIM_BATCH``, or half the concurrency (1..100)."""
        return self.claim_batch or max(1, min(100, self.concurrency // 2))

    @property
    def effective_prefetch(self) -> int:
        """Tasks held claimed beyond the concurrency: ``DTQ_WORKER_PREFETCH``, or one batch."""
        return self.effective_claim_batch if self.prefetch < 0 else self.prefetch


class SchedulerSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The scheduler leader's lease, its loops' periods and its metrics listener
    (``settings.scheduler``)."""

    title = "Scheduler leader"

    metrics_port: Annotated[
        int,
        Meta(
            ge=0,
            le=65535,
            description="Port of the scheduler's `/metrics` (Prometheus) and `/health` "
            "(liveness: event loop and lease calls to Redis); 0 turns the listener off.",
        ),
    ] = msgspec.field(default=8003, name="scheduler_metrics_port")
    queue_metrics_interval_s: Annotated[
        float,
        Meta(
            gt=0,
            le=3600,
            description="How often the scheduler leader refreshes the queue gauges "
            "(`dtq_queue_*`, `dtq_workers_registered`); a few pipelined reads per queue.",
        ),
    ] = 5.0
    leader_ttl_s: Annotated[
        float,
        Meta(gt=0, le=3600, description="Scheduler leader lease; a follower takes over after it."),
    ] = 10.0
    misfire_grace_s: Annotated[
        float,
        Meta(
            gt=0,
            le=86400,
            description="How late a schedule's tick may fire and still count as on time; "
            "older, it is missed (no leader ran at its time) and the schedule's `misfire` "
            "policy decides: `skip` does not fire it (docs/operations.md, Schedules).",
        ),
    ] = msgspec.field(default=60.0, name="scheduler_misfire_grace_s")
    reconcile_interval_s: Annotated[
        float,
        Meta(
            gt=0,
            le=86400,
            description="How often the scheduler leader checks task records against their "
            "stream entries (repairs entries deleted by hand; a SCAN of every queue).",
        ),
    ] = 300.0
    tick_s: Annotated[
        float,
        Meta(gt=0, le=60, description="Longest pause between two promotion passes."),
    ] = msgspec.field(default=0.25, name="scheduler_tick_s")
