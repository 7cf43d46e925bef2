"""Operator operations: one implementation shared by the REST API and the ``dtq`` CLI.

Queue statistics, pause and resume, purge, the dead-letter queue and the worker registry.
Every operation that changes state appends an entry to the audit stream (``Keys.audit``:
fields ``action``, ``queue``, ``actor``, ``count``, ``ts`` in server microseconds, and
``detail`` when the operation had a filter or explicit ids).

:class:`Admin` is the entry point; each part owns one concern:

- :mod:`~dtq_core.ops.admin.stats`: queue statistics (depth, in flight, delayed, dead, age);
- :mod:`~dtq_core.ops.admin.history`: the per-minute history (read; the leader's depth notes);
- :mod:`~dtq_core.ops.admin.queues`: create, delete, pause, resume and purge a queue;
- :mod:`~dtq_core.ops.admin.config`: a queue's configuration (partitions and limits);
- :mod:`~dtq_core.ops.admin.dlq`: list, requeue, discard and purge dead tasks;
- :mod:`~dtq_core.ops.admin.groups`: a queue's groups (list, pause, resume, weight);
- :mod:`~dtq_core.ops.admin.workers`: the worker registry;
- :mod:`~dtq_core.ops.admin.base`: what the parts share (known-queue check, actor check);
- :class:`dtq_core.ops.audit.AuditWriter`: the audit entries.
"""

from dtq_core.ops.admin.base import BATCH
from dtq_core.ops.admin.config import UNSET, QueueConfig
from dtq_core.ops.admin.dlq import AUDIT_IDS, DLQ_PAGE_MAX, DlqPage
from dtq_core.ops.admin.facade import Admin
from dtq_core.ops.admin.groups import GROUPS_PAGE_MAX, MAX_WEIGHT, GroupPage, GroupStats
from dtq_core.ops.admin.history import HistoryRange, QueueHistory
from dtq_core.ops.admin.stats import COUNT_PAGE, QueueStats
from dtq_core.ops.admin.workers import STALE_HEARTBEATS, ProcessInfo, WorkerInfo

__all__ = [
    "AUDIT_IDS",
    "BATCH",
    "COUNT_PAGE",
    "DLQ_PAGE_MAX",
    "GROUPS_PAGE_MAX",
    "MAX_WEIGHT",
    "STALE_HEARTBEATS",
    "UNSET",
    "Admin",
    "DlqPage",
    "GroupPage",
    "GroupStats",
    "HistoryRange",
    "ProcessInfo",
    "QueueConfig",
    "QueueHistory",
    "QueueStats",
    "WorkerInfo",
]
