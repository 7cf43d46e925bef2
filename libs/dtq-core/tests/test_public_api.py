"""The public SDK surface is chosen on purpose: ``dtq_core.__all__`` is pinned here
(as httpx's ``tests/test_exported_members.py`` does)."""

from __future__ import annotations

import importlib.metadata
import inspect
import types

import dtq_core
from dtq_core.errors import DtqError

EXPORTED = [
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


def test_all_is_pinned() -> None:
    assert dtq_core.__all__ == EXPORTED
    assert len(set(dtq_core.__all__)) == len(dtq_core.__all__)


def test_all_imports_are_exported() -> None:
    """Every public name the package defines is in ``__all__``, and nothing else is."""
    members = {
        name
        for name, value in vars(dtq_core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert members == set(dtq_core.__all__)


def test_design_import_line() -> None:
    from dtq_core import (  # noqa: PLC0415 - the import itself is under test
        Client,
        PermanentError,
        Retry,
        SyncClient,
        TaskContext,
        TaskRegistry,
    )

    assert all(
        inspect.isclass(obj)
        for obj in (Client, SyncClient, TaskRegistry, TaskContext, Retry, PermanentError)
    )


def test_every_exported_name_is_documented() -> None:
    for name in dtq_core.__all__:
        obj = getattr(dtq_core, name)
        assert inspect.getdoc(obj), f"dtq_core.{name} has no docstring"
        assert obj.__module__.startswith("dtq_core."), name


def test_exported_errors_have_stable_codes() -> None:
    codes = {}
    for name in dtq_core.__all__:
        obj = getattr(dtq_core, name)
        if inspect.isclass(obj) and issubclass(obj, DtqError) and obj is not DtqError:
            assert obj.code != DtqError.code, f"{name} has no code of its own"
            codes[obj.code] = name
    assert codes == {
        "idempotency_conflict": "IdempotencyConflictError",
        "invalid_name": "InvalidNameError",
        "invalid_state": "InvalidStateError",
        "payload_too_large": "PayloadTooLargeError",
        "queue_full": "QueueFullError",
        "redis_unavailable": "RedisUnavailableError",
        "invalid_setting": "SettingsError",
        "task_not_found": "TaskNotFoundError",
        "validation_error": "ValidationError",
        "unknown_task": "UnknownTaskError",
        "unknown_queue": "UnknownQueueError",
        "queue_limit": "QueueLimitError",
        "batch_refused": "BatchRefusedError",
        "workflow_failed": "WorkflowFailedError",
        "workflow_not_found": "WorkflowNotFoundError",
    }


def test_handler_signals_are_not_dtq_errors() -> None:
    """``Retry`` and ``PermanentError`` steer a handler's outcome; they are not failures of
    dtq itself, so a ``except DtqError`` around SDK calls never swallows them."""
    assert not issubclass(dtq_core.Retry, DtqError)
    assert not issubclass(dtq_core.PermanentError, DtqError)
    retry = dtq_core.Retry(delay_s=2.5, reason="busy")
    assert (retry.delay_s, retry.reason) == (2.5, "busy")


def test_version() -> None:
    assert dtq_core.__version__ == importlib.metadata.version("dtq-core")
