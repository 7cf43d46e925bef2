"""dtq: a distributed task queue on Redis. This module is the public Python SDK."""

from dtq_core.client import Client, SyncClient, SyncTaskHandle, TaskHandle
from dtq_core.errors import (
    DtqError,
    IdempotencyConflictError,
    InvalidNameError,
    InvalidStateError,
    PayloadTooLargeError,
    PermanentError,
    QueueFullError,
    RedisUnavailableError,
    Retry,
    SettingsError,
    TaskNotFoundError,
    UnknownTaskError,
    ValidationError,
)
from dtq_core.messages import (
    Event,
    Outcome,
    Progress,
    TaskError,
    TaskRecord,
    TaskRequest,
    TaskStatus,
)
from dtq_core.settings import Settings, load_settings
from dtq_core.tasks import TaskContext, TaskDef, TaskRegistry

__all__ = [
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
    "RedisUnavailableError",
    "Retry",
    "Settings",
    "SettingsError",
    "SyncClient",
    "SyncTaskHandle",
    "TaskContext",
    "TaskDef",
    "TaskError",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskRecord",
    "TaskRegistry",
    "TaskRequest",
    "TaskStatus",
    "UnknownTaskError",
    "ValidationError",
    "load_settings",
]

__version__ = "0.1.0"
