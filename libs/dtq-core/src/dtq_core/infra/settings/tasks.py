"""The task lifecycle's sections, shared by every service that submits, runs or keeps tasks:
task defaults and retention, queue limits, retries."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from dtq_core.infra.settings.base import Section


class TaskSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a submit may carry, the defaults a task gets, and how long records are kept
    (``settings.tasks``)."""

    title = "Tasks"

    max_payload_bytes: Annotated[
        int,
        Meta(ge=256, le=64 * 1024 * 1024, description="Encoded args + kwargs + metadata cap."),
    ] = 262144
    timeout_ms: Annotated[
        int,
        Meta(ge=1, le=3600000, description="Default handler timeout when a task sets none."),
    ] = msgspec.field(default=30000, name="task_timeout_ms")
    retention_s: Annotated[
        int,
        Meta(
            ge=60,
            description="How long records of waiting, failed, dead, cancelled and expired tasks "
            "are kept; also the longest allowed delay.",
        ),
    ] = msgspec.field(default=604800, name="task_retention_s")
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
    reject_unknown_tasks: Annotated[
        bool,
        Meta(
            description="Refuse a submit unless a live worker serving its queue handles the task "
            "name (only while some live worker has registered tasks), and send a submit that names "
            "no queue to the queue the task is registered on. false: submits go where they say, "
            "`default` when they say nothing."
        ),
    ] = True


class QueueSettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which queues exist, how deep they get and how long their streams grow
    (``settings.queues``)."""

    title = "Queues"

    max_depth: Annotated[
        int,
        Meta(
            ge=0,
            description="Waiting tasks (queued, delayed and retrying) per queue before submits "
            "are refused; 0 means unlimited. A queue's own max_depth (dtq queue configure, "
            "docs/flow-control.md) takes its place.",
        ),
    ] = msgspec.field(default=10000, name="max_queue_depth")
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


class RetrySettings(Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The attempt budget and the retry delay of a task that sets neither
    (``settings.retries``)."""

    title = "Retries"

    max_attempts: Annotated[
        int, Meta(ge=1, le=1000, description="Default attempt budget when a task sets none.")
    ] = 10
    base_delay: Annotated[
        float, Meta(ge=0, le=86400, description="First retry delay in seconds.")
    ] = msgspec.field(default=1.0, name="retry_base_delay")
    max_delay: Annotated[
        float, Meta(ge=0, le=86400 * 7, description="Cap of the exponential retry delay.")
    ] = msgspec.field(default=60.0, name="retry_max_delay")
    jitter: Annotated[
        float,
        Meta(ge=0, le=1, description="Symmetric jitter: delay × (1 ± jitter), uniformly."),
    ] = msgspec.field(default=0.2, name="retry_jitter")
