"""The worker registry record: what a worker stamps into ``dtq:worker:<id>`` with each heartbeat.

One type for the writer (the worker's heartbeat) and every reader (task routing, the workers
listing), so the hash's field names and encodings are written down once. The hash expires three
heartbeat intervals after the last beat, so a reader may find it gone, or written by an older
worker with fewer fields: :meth:`WorkerRecord.from_fields` reads what is there and gives every
missing or unreadable field its default.

Fields (all stored as Redis strings):

================  ==========================================================================
field             meaning
================  ==========================================================================
``id``            the registered id, ``<DTQ_WORKER_ID>:<6 random hex digits>``
``worker_id``     ``DTQ_WORKER_ID`` as configured
``host``          the host name
``pid``           the process id
``queues``        the queues served, comma-separated
``concurrency``   handlers that may run at once
``inflight``      handlers running at the last beat
``prefetched``    attempts claimed and waiting for a free slot at the last beat
``processed``     attempts that succeeded since the start
``failed``        attempts that ended otherwise since the start
``started_at``    the process start, microseconds since the epoch (host clock)
``state``         ``starting``, ``running`` or ``draining``
``version``       the worker package's version
``routes``        JSON: task name -> the queue its definition names (:mod:`.routing`)
``schemas``       JSON: task name -> the JSON Schema of its arguments (:mod:`.argschema`)
``slot``          its number among the processes of one ``dtq-worker --processes N`` (0..N-1)
``slots``         N: the worker processes its supervisor runs (1 for a lone worker process)
``restarts``      how often its supervisor restarted this slot before this process
``supervisor``    the supervisor's process id (0 for a lone worker process)
``pool``          its handler processes (``executor="process"``; 0 when none)
================  ==========================================================================

The worker processes of one ``dtq-worker --processes N`` register one record each, under
``<group>/<slot>`` (``<group>/<slot>.<restarts>`` once restarted), where ``<group>`` is the
supervisor's own ``<DTQ_WORKER_ID>:<6 random hex digits>``: each holds its own leases, heartbeats
and is swept alone, and a reader puts them together again by :func:`group_of`.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

ROUTES_FIELD = "routes"
"""The field with the worker's tasks (JSON: name -> declared queue)."""
SCHEMAS_FIELD = "schemas"
"""The field with the worker's tasks' argument schemas (JSON: name -> schema)."""
QUEUES_FIELD = "queues"
STARTED_AT_FIELD = "started_at"
PROCESS_SEPARATOR = "/"
"""Between a supervisor's id and a process's slot in a registered id (``web-1:4f2a9c/0``); a
``DTQ_WORKER_ID`` cannot hold it."""


def group_of(worker_id: str) -> tuple[str, int | None]:
    """The worker a registered id belongs to, and the process slot it names: ``("W:4f2a9c", 1)``
    for ``W:4f2a9c/1.2``, ``("W:4f2a9c", None)`` for a lone worker process's ``W:4f2a9c``.

    Read from the id alone, so a process whose record has already expired (killed, not yet
    swept) is still shown with its worker."""
    group, sep, rest = worker_id.partition(PROCESS_SEPARATOR)
    if not sep:
        return worker_id, None
    slot = rest.partition(".")[0]
    return group, int(slot) if slot.isdigit() else None


def process_id(group: str, slot: int, restarts: int) -> str:
    """The registered id of a worker process: ``<group>/<slot>``, then ``<group>/<slot>.<n>``
    after its n-th restart (new at every start, as every consumer name must be: failure mode
    F7, docs/failure-modes.md)."""
    suffix = f".{restarts}" if restarts else ""
    return f"{group}{PROCESS_SEPARATOR}{slot}{suffix}"


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's registry hash, typed. Field names are the hash's field names."""

    id: str = ""
    worker_id: str = ""
    host: str = ""
    pid: int = 0
    queues: tuple[str, ...] = ()
    concurrency: int = 0
    inflight: int = 0
    prefetched: int = 0
    processed: int = 0
    failed: int = 0
    started_at: int = 0
    """Microseconds since the epoch; 0 when unknown."""
    state: str = ""
    version: str = ""
    routes: str | None = None
    """JSON (see :func:`dtq_core.protocol.routing.encode_routes`); ``None`` when absent."""
    schemas: str | None = None
    """JSON (see :func:`dtq_core.protocol.routing.encode_schemas`); ``None`` when absent."""
    slot: int = 0
    slots: int = 1
    restarts: int = 0
    supervisor: int = 0
    pool: int = 0

    def to_fields(self) -> dict[str, str | int]:
        """The hash fields, as HSET writes them (integers become decimal strings)."""
        fields: dict[str, str | int] = {
            "id": self.id,
            "worker_id": self.worker_id,
            "host": self.host,
            "pid": self.pid,
            QUEUES_FIELD: ",".join(self.queues),
            "concurrency": self.concurrency,
            "inflight": self.inflight,
            "prefetched": self.prefetched,
            "processed": self.processed,
            "failed": self.failed,
            STARTED_AT_FIELD: self.started_at,
            "state": self.state,
            "version": self.version,
            "slot": self.slot,
            "slots": self.slots,
            "restarts": self.restarts,
            "supervisor": self.supervisor,
            "pool": self.pool,
        }
        if self.routes is not None:
            fields[ROUTES_FIELD] = self.routes
        if self.schemas is not None:
            fields[SCHEMAS_FIELD] = self.schemas
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str | None]) -> WorkerRecord:
        """Read a hash as HGETALL (or HMGET zipped with its field names) returns it.

        Missing fields, and integers that do not parse, take their defaults: the hash may be
        partly written by an older worker, or gone.
        """
        get = fields.get
        return cls(
            id=get("id") or "",
            worker_id=get("worker_id") or "",
            host=get("host") or "",
            pid=_int(get("pid")),
            queues=tuple(q for q in (get(QUEUES_FIELD) or "").split(",") if q),
            concurrency=_int(get("concurrency")),
            inflight=_int(get("inflight")),
            prefetched=_int(get("prefetched")),
            processed=_int(get("processed")),
            failed=_int(get("failed")),
            started_at=_int(get(STARTED_AT_FIELD)),
            state=get("state") or "",
            version=get("version") or "",
            routes=get(ROUTES_FIELD),
            schemas=get(SCHEMAS_FIELD),
            slot=_int(get("slot")),
            slots=_int(get("slots")) or 1,
            restarts=_int(get("restarts")),
            supervisor=_int(get("supervisor")),
            pool=_int(get("pool")),
        )


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0
