"""``@registry.task(executor=...)``: where a sync handler runs, refused where it cannot apply."""

from __future__ import annotations

import pytest

from dtq_core import TaskContext, TaskRegistry
from dtq_core.errors import ValidationError


def in_thread(ctx: TaskContext) -> None: ...


def in_process(ctx: TaskContext) -> None: ...


async def on_loop(ctx: TaskContext) -> None: ...


def test_sync_handlers_run_in_threads_unless_told_otherwise() -> None:
    registry = TaskRegistry()
    registry.task(name="t.thread")(in_thread)
    registry.task(name="t.process", executor="process")(in_process)
    registry.task(name="t.async")(on_loop)
    executors = [registry.get(n).executor for n in ("t.thread", "t.process", "t.async")]  # type: ignore[union-attr]
    assert executors == ["thread", "process", "thread"]


@pytest.mark.parametrize("executor", ["process", "thread"])
def test_an_async_handler_with_an_executor_is_refused_at_registration(executor: str) -> None:
    registry = TaskRegistry()
    with pytest.raises(ValidationError, match="async def handler runs on the worker's event loop"):

        @registry.task(name="t.a", executor=executor)  # type: ignore[arg-type]
        async def handler(ctx: TaskContext) -> None: ...

    assert "t.a" not in registry


def test_an_unknown_executor_is_refused() -> None:
    with pytest.raises(ValidationError, match="executor must be 'thread' or 'process'"):

        @TaskRegistry().task(name="t.x", executor="fork")  # type: ignore[arg-type]
        def handler(ctx: TaskContext) -> None: ...


def test_a_process_handler_must_be_importable_by_name() -> None:
    with pytest.raises(ValidationError, match="top level of a module"):

        @TaskRegistry().task(name="t.local", executor="process")
        def nested(ctx: TaskContext) -> None: ...
