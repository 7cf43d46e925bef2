"""dtq: a distributed task queue on Redis. This module is the public Python SDK."""

from importlib.metadata import version as _version

from dtq_core.canvas import chain, chord, group, step
from dtq_core.client import Client
from dtq_core.errors import (
    BatchRefusedError,
    DtqError,
    IdempotencyConflictError,
    InvalidNameError,
    InvalidStateError,
    PayloadTooLargeError,
    PermanentError,
    QueueFullError,
    QueueLimitError,
    RedisUnavailableError,
    Retry,
    SettingsError,
    TaskNotFoundError,
    UnknownQueueError,
    UnknownTaskError,
    ValidationError,
    WorkflowFailedError,
    WorkflowNotFoundError,
)
from dtq_core.handles import TaskHandle
from dtq_core.infra.settings import Settings, load_settings
from dtq_core.messages import (
    BatchRecord,
    Event,
    Outcome,
    Progress,
    TaskError,
    TaskRecord,
    TaskRequest,
    TaskStatus,
    WorkflowRecord,
    WorkflowStatus,
    WorkflowStep,
)
from dtq_core.sync import SyncBatch, SyncClient, SyncTaskHandle, SyncWorkflowHandle
from dtq_core.tasks import TaskContext, TaskDef, TaskRegistry
from dtq_core.workflows import Batch, WorkflowHandle, is_error_value

__all__ = [
    "Batch",
    "BatchRecord",
    "BatchRefusedError",
    "Client",
    "DtqError",
    "Event",
    "IdempotencyConflictError",
    "InvalidNameError",
    "InvalidStateError",
    "Outcome",
    "PayloadTooLargeError",
    "PermanentError",
    "Progress",
    "QueueFullError",
    "QueueLimitError",
    "RedisUnavailableError",
    "Retry",
    "Settings",
    "SettingsError",
    "SyncBatch",
    "SyncClient",
    "SyncTaskHandle",
    "SyncWorkflowHandle",
    "TaskContext",
    "TaskDef",
    "TaskError",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskRecord",
    "TaskRegistry",
    "TaskRequest",
    "TaskStatus",
    "UnknownQueueError",
    "UnknownTaskError",
    "ValidationError",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowNotFoundError",
    "WorkflowRecord",
    "WorkflowStatus",
    "WorkflowStep",
    "chain",
    "chord",
    "group",
    "is_error_value",
    "load_settings",
    "step",
]

__version__: str = _version("dtq-core")
"""The installed version of dtq-core, read from its package metadata (``pyproject.toml`` is
the one place it is written)."""
