"""The fields of the two hashes the transitions keep per queue: the task hash
(``dtq:{q}:t:<rand>``) and the queue's meta hash (``dtq:{q}:meta``), in one table (pure).

The wire names are short because every task carries them (fewer bytes per task in memory and
in the AOF). :class:`TaskField` and :class:`MetaField` are what Python code reads and writes
the hashes with; :data:`TASK_HASH` and :data:`META_HASH` say what each field means, how its
value is written, and which transitions (``lua/<name>.lua``) and Python modules write and read
it (the test kit, :mod:`dtq_devtools.testing`, reads them too and is not listed).
docs/architecture.md renders the table ("Task hash fields",
``python -m dtq_devtools.fieldsdoc``); tests fail when the Lua files or the doc drift from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TaskField(StrEnum):
    """The task hash's fields, by what they hold; the values are the wire names."""

    TASK = "task"
    STATUS = "st"
    PRIORITY = "pri"
    ATTEMPTS = "att"
    MAX_ATTEMPTS = "max"
    TIMEOUT_MS = "to"
    CREATED_AT = "ct"
    QUEUED_AT = "qt"
    DUE_AT = "due"
    STARTED_AT = "sa"
    FINISHED_AT = "ft"
    EXPIRES_AT = "exp"
    ARGS = "args"
    KWARGS = "kwargs"
    METADATA = "meta"
    HEADERS = "hdr"
    IDEMPOTENCY_KEY = "idem"
    ENTRY_ID = "eid"
    LEASE = "lease"
    WORKER = "w"
    CANCEL_REQUESTED = "cxl"
    PROGRESS = "prog"
    RESULT = "res"
    RESULT_TRUNCATED = "rtr"
    ERRORS = "err"
    DLQ_ENTRY_ID = "dlq"
    FINISHED_LEASE = "fin"
    GROUP = "grp"
    WORKFLOW = "wf"
    CHILDREN_WORKFLOW = "kwf"
    CHILDREN = "kids"


class MetaField(StrEnum):
    """The queue meta hash's fields; the values are the wire names."""

    VERSION = "v"
    CREATED_AT = "created"
    PAUSED = "paused"
    EPOCH = "epoch"
    PARTITIONS = "parts"
    PARTITIONS_LOG = "parts_log"
    CONFIG_DEPTH = "cfg_depth"
    CONFIG_RATE = "cfg_rate"
    CONFIG_BURST = "cfg_burst"
    CONFIG_CONCURRENCY = "cfg_conc"
    LIMIT_DEPTH = "lim_d"
    LIMIT_CONCURRENCY = "lim_c"
    LIMIT_INTERVAL = "lim_t"
    LIMIT_BURST = "lim_b"
    CONFIG_GROUP_CONCURRENCY = "cfg_gconc"
    CONFIG_GROUP_RATE = "cfg_grate"
    LIMIT_GROUP_CONCURRENCY = "lim_gc"
    LIMIT_GROUP_INTERVAL = "lim_gt"
    LIMIT_GROUP_BURST = "lim_gb"


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One row of the table: a field, what it means, how its value is written, and who writes
    and reads it (transition names, then Python modules by dotted name)."""

    field: TaskField | MetaField
    meaning: str
    type: str
    written_by: tuple[str, ...]
    read_by: tuple[str, ...]


_RECORDS = "dtq_core.protocol.records"
_CONFIG = "dtq_core.ops.admin.config"
_QCONF = "dtq_core.protocol.queue_config"
_US = "µs since the epoch (Redis time)"

TASK_HASH: tuple[FieldSpec, ...] = (
    FieldSpec(TaskField.TASK, "task name", "str", ("submit",),
              ("cancel", "claim", "discard", "finish", "progress", "promote", "reclaim",
               "reconcile", "release", "requeue", _RECORDS)),
    FieldSpec(TaskField.STATUS, "status (`TaskStatus`)", "str",
              ("cancel", "claim", "finish", "group_set", "promote", "purge", "reclaim",
               "reconcile", "release", "requeue", "submit"),
              ("cancel", "claim", "discard", "extend_lease", "finish", "group_set", "progress",
               "promote", "purge", "reclaim", "reconcile", "release", "requeue", "submit",
               _RECORDS, "dtq_core.ops.admin.dlq")),
    FieldSpec(TaskField.PRIORITY, "priority, 0..9: the stream `p<pri>` it is queued in", "int",
              ("submit",), ("claim", "finish", "group_set", "promote", "reclaim", "reconcile",
              "release", "requeue", "submit", _RECORDS)),
    FieldSpec(TaskField.ATTEMPTS, "attempts started (absent: 0)", "int",
              ("claim", "release", "requeue"),
              ("cancel", "claim", "finish", "progress", "reclaim", "reconcile", "release",
               _RECORDS)),
    FieldSpec(TaskField.MAX_ATTEMPTS, "attempt budget (absent or 0: the task's default, "
              "resolved and stored at the first claim)", "int", ("claim", "submit"),
              ("claim", "reclaim", "reconcile", _RECORDS)),
    FieldSpec(TaskField.TIMEOUT_MS, "attempt timeout (absent or 0: as for `max`)", "int ms",
              ("claim", "submit"), ("claim", _RECORDS)),
    FieldSpec(TaskField.CREATED_AT, "submitted at (a grouped task's place in its group)", _US,
              ("submit",), ("claim", "promote", "reclaim", "reconcile", "release", "requeue",
              _RECORDS)),
    FieldSpec(TaskField.QUEUED_AT, "entered its stream or its group's waiting set at (the "
              "claim reports the wait)", _US,
              ("claim", "finish", "group_set", "promote", "reclaim", "reconcile", "release",
               "requeue", "submit"),
              ("claim",)),
    FieldSpec(TaskField.DUE_AT, "due at, while scheduled or retrying", _US,
              ("finish", "requeue", "submit"), (_RECORDS,)),
    FieldSpec(TaskField.STARTED_AT, "the current attempt started at", _US, ("claim",),
              (_RECORDS,)),
    FieldSpec(TaskField.FINISHED_AT, "reached its terminal status at", _US,
              ("cancel", "claim", "finish", "promote", "purge", "reclaim", "reconcile",
               "requeue"), (_RECORDS,)),
    FieldSpec(TaskField.EXPIRES_AT, "not started after this, it expires (the submit's TTL)",
              _US, ("submit",), ("claim", "promote", _RECORDS)),
    FieldSpec(TaskField.ARGS, "positional arguments", "JSON array", ("submit",),
              ("claim", _RECORDS)),
    FieldSpec(TaskField.KWARGS, "keyword arguments", "JSON object", ("submit",),
              ("claim", _RECORDS)),
    FieldSpec(TaskField.METADATA, "the submitter's metadata (absent: none)", "JSON",
              ("submit",), (_RECORDS,)),
    FieldSpec(TaskField.HEADERS, "trace context and other headers (absent: none); a "
              "record's `trace_id` and the events' `tr` come from its `traceparent`",
              "JSON object", ("submit",), ("claim", "finish", _RECORDS)),
    FieldSpec(TaskField.IDEMPOTENCY_KEY, "the idempotency key's hash, when submitted with "
              "one", "sha256 hex", ("submit",), ()),
    FieldSpec(TaskField.ENTRY_ID, "the stream entry the task stands on: an entry that is not "
              "this one never starts it (absent while it waits in its group)", "stream id",
              ("claim", "finish", "group_set", "promote", "reclaim", "reconcile", "release",
               "requeue", "submit"),
              ("cancel", "claim", "extend_lease", "finish", "group_set", "promote", "reclaim",
               "reconcile", "release", "requeue", "submit")),
    FieldSpec(TaskField.LEASE, "fencing token of the current attempt: every worker call "
              "names it, a reclaim or release bumps it", "int",
              ("claim", "reclaim", "reconcile", "release"),
              ("claim", "extend_lease", "finish", "progress", "release")),
    FieldSpec(TaskField.WORKER, "consumer name of the worker running the attempt", "str",
              ("claim",), ("claim", "reclaim", "reconcile", _RECORDS)),
    FieldSpec(TaskField.CANCEL_REQUESTED, "cancellation requested while running", "`1`",
              ("cancel", "requeue"), ("extend_lease", _RECORDS)),
    FieldSpec(TaskField.PROGRESS, "the handler's last progress report", "JSON (`Progress`)",
              ("progress",), (_RECORDS,)),
    FieldSpec(TaskField.RESULT, "the handler's result (absent: None)", "JSON",
              ("finish", "requeue"), (_RECORDS,)),
    FieldSpec(TaskField.RESULT_TRUNCATED, "the result was cut to its size limit", "`1`, or empty",
              ("finish", "requeue"), (_RECORDS,)),
    FieldSpec(TaskField.ERRORS, "error history, one object per failed attempt",
              "JSON array (`StoredError`)",
              ("finish", "reclaim", "reconcile"),
              ("finish", "reclaim", "reconcile", _RECORDS, "dtq_core.ops.browse.summaries")),
    FieldSpec(TaskField.DLQ_ENTRY_ID, "its DLQ entry, while dead", "stream id",
              ("finish", "reclaim", "reconcile", "requeue"),
              ("discard", "finish", "reclaim", "reconcile", "requeue")),
    FieldSpec(TaskField.FINISHED_LEASE, "lease of the attempt whose finish was recorded: a "
              "finish sent again gets its own status", "int", ("finish",), ("finish",)),
    FieldSpec(TaskField.GROUP, "the task's group (absent: none; docs/flow-control.md, "
              "\"Groups\")", "str", ("submit",),
              ("cancel", "claim", "finish", "promote", "reclaim", "reconcile", "release",
               "requeue", _RECORDS)),
    FieldSpec(TaskField.WORKFLOW, "the workflow step it is: `<workflow id>:<step>` (absent: "
              "none; docs/workflows.md); its end is noted in the queue's workflow outbox",
              "str", ("submit",),
              ("cancel", "claim", "finish", "promote", "purge", "reclaim", "reconcile",
               _RECORDS)),
    FieldSpec(TaskField.CHILDREN_WORKFLOW, "the workflow of the children its successful "
              "attempt spawned (absent: none; docs/workflows.md, \"Child tasks\")", "str",
              ("finish",), (_RECORDS,)),
    FieldSpec(TaskField.CHILDREN, "those children's definitions, until the scheduler leader "
              "made their workflow from them", "JSON", ("finish", "dtq_core.workflows"),
              ("dtq_core.workflows",)),
)  # fmt: skip

META_HASH: tuple[FieldSpec, ...] = (
    FieldSpec(MetaField.VERSION, "the queue's layout version; its consumer groups exist",
              "`1`", ("submit",), ("submit",)),
    FieldSpec(MetaField.CREATED_AT, "first submit at", _US, ("submit",), ()),
    FieldSpec(MetaField.PAUSED, "workers claim nothing while set", "`1` or `0`",
              ("dtq_core.ops.admin.queues",), ("claim", "dtq_core.ops.admin.stats",
              "dtq_core.ops.admin.queues", _CONFIG, "dtq_core.reader")),
    FieldSpec(MetaField.EPOCH, "highest scheduler leadership epoch seen: an older leader's "
              "promote is refused", "int", ("promote",), ("promote",)),
    FieldSpec(MetaField.PARTITIONS, "partition 0 only: the queue's partition count (absent: "
              "1); it only grows", "int", ("grow_partitions", "dtq_core.ops.admin.queues"),
              ("grow_partitions", "dtq_core.partitions")),
    FieldSpec(MetaField.PARTITIONS_LOG, "partition 0 only: when each count took effect",
              "`<count>@<ms>,...` (Redis time)", ("grow_partitions", "dtq_core.ops.admin.queues"),
              ("grow_partitions", "dtq_core.partitions")),
    FieldSpec(MetaField.CONFIG_DEPTH, "partition 0 only: the queue's max_depth as asked",
              "int", (_CONFIG,), (_QCONF, "dtq_core.partitions")),
    FieldSpec(MetaField.CONFIG_RATE, "partition 0 only: the queue's rate as asked",
              "`<n>/<s|m|h|d>`", (_CONFIG,), (_QCONF,)),
    FieldSpec(MetaField.CONFIG_BURST, "partition 0 only: the rate's burst as asked", "int",
              (_CONFIG,), (_QCONF,)),
    FieldSpec(MetaField.CONFIG_CONCURRENCY, "partition 0 only: the queue's concurrency as "
              "asked", "int", (_CONFIG,), (_QCONF,)),
    FieldSpec(MetaField.LIMIT_DEPTH, "this partition's share of max_depth: replaces the "
              "producer's DTQ_MAX_QUEUE_DEPTH", "int", (_QCONF,), ("submit",)),
    FieldSpec(MetaField.LIMIT_CONCURRENCY, "this partition's share of the concurrency: "
              "pending entries at most", "int", (_QCONF,), ("claim", "dtq_core.reader")),
    FieldSpec(MetaField.LIMIT_INTERVAL, "this partition's share of the rate: µs between "
              "two starts (GCRA)", "int", (_QCONF,), ("claim", "dtq_core.reader")),
    FieldSpec(MetaField.LIMIT_BURST, "this partition's share of the burst", "int",
              (_QCONF,), ("claim", "dtq_core.reader")),
    FieldSpec(MetaField.CONFIG_GROUP_CONCURRENCY, "partition 0 only: the queue's "
              "group_concurrency as asked", "int", (_CONFIG,), (_QCONF,)),
    FieldSpec(MetaField.CONFIG_GROUP_RATE, "partition 0 only: the queue's group_rate as asked",
              "`<n>/<s|m|h|d>`", (_CONFIG,), (_QCONF,)),
    FieldSpec(MetaField.LIMIT_GROUP_CONCURRENCY, "tasks of one group in the streams and "
              "running at most (a group lives in one partition: not shared out)", "int",
              (_QCONF,), ("claim", "finish", "group_set", "promote", "reclaim", "reconcile",
              "release", "requeue", "submit", "dtq_core.reader")),
    FieldSpec(MetaField.LIMIT_GROUP_INTERVAL, "the group rate: µs between two starts of a "
              "group (GCRA)", "int", (_QCONF,),
              ("claim", "finish", "group_set", "promote", "reclaim", "reconcile", "release",
               "requeue", "submit")),
    FieldSpec(MetaField.LIMIT_GROUP_BURST, "the group rate's burst", "int", (_QCONF,),
              ("claim",)),
)  # fmt: skip


def _cell(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "—"


def _table(rows: tuple[FieldSpec, ...]) -> list[str]:
    lines = ["| field | meaning | value | written by | read by |", "|---|---|---|---|---|"]
    lines += [
        f"| `{r.field.value}` | {r.meaning} | {r.type} | {_cell(r.written_by)} "
        f"| {_cell(r.read_by)} |"
        for r in rows
    ]
    return lines


def fields_markdown() -> str:
    """The section of docs/architecture.md between its ``task-fields`` markers."""
    lines = [
        "Generated from `dtq_core/protocol/fields.py` (`just docs`); transitions by their",
        "`lua/` file, Python by module.",
        "",
        "Task hash `dtq:{q}:t:<id>`:",
        "",
        *_table(TASK_HASH),
        "",
        "Queue meta hash `dtq:{q}:meta`:",
        "",
        *_table(META_HASH),
    ]
    return "\n".join(lines) + "\n"
