"""Task definitions: the ``@registry.task`` decorator, the registry and the handler context."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Protocol, TypeVar, cast, overload

import msgspec

from dtq_core.errors import ValidationError
from dtq_core.handles import TaskHandle
from dtq_core.messages import TaskRequest
from dtq_core.partitions import check_partitions
from dtq_core.protocol.queue_config import SETTINGS, QueueConfig, checked
from dtq_core.protocol.submit import MAX_ATTEMPTS_CAP, MAX_TIMEOUT_S, check_name
from dtq_core.protocol.workflows import Expr, Policy, Step, children_id

ProgressSink = Callable[["TaskContext", float, str | None], Awaitable[bool]]


class Children(Protocol):
    """What one attempt spawns (:class:`dtq_core.workflows.Children`)."""

    async def add(self, exprs: Sequence[Expr]) -> None: ...

    async def wait(self, then: Expr, on_failure: Policy) -> None: ...

    def payload(self) -> str: ...


Spawner = Callable[["TaskContext"], Children]


class TaskContext:
    """What a handler knows about the attempt it runs; passed as the first argument.

    Attributes:
        task_id: the task's id (stable across attempts: use it to make side effects
            idempotent, since a crash after a side effect re-runs the handler).
        queue: the queue it came from.
        task: the task name.
        attempt: 1 for the first attempt, 2 for the first retry, ...
        max_attempts: the attempt budget.
        metadata: the submitter's metadata, if any.
    """

    __slots__ = (
        "_children",
        "_loop",
        "_sink",
        "_spawner",
        "attempt",
        "lease",
        "max_attempts",
        "metadata",
        "queue",
        "rand",
        "task",
        "task_id",
    )

    def __init__(
        self,
        *,
        task_id: str,
        queue: str,
        task: str,
        attempt: int,
        max_attempts: int,
        rand: str = "",
        lease: str = "",
        metadata: dict[str, Any] | None = None,
        sink: ProgressSink | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        self.task_id = task_id
        self.queue = queue
        self.task = task
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.rand = rand
        self.lease = lease
        self.metadata = metadata
        self._sink = sink
        self._loop = loop
        self._spawner = spawner
        self._children: Children | None = None

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    async def progress(self, value: float, message: str | None = None) -> bool:
        """Report progress (``value`` from 0 to 1, and an optional message).

        Returns:
            False when the attempt's lease is gone (the task was reclaimed elsewhere).
        """
        if not 0 <= value <= 1:
            raise ValueError(f"progress must be between 0 and 1, got {value!r}")
        if self._sink is None:
            return True
        return await self._sink(self, value, message)

    def progress_threadsafe(self, value: float, message: str | None = None) -> bool:
        """:meth:`progress` for synchronous handlers (they run in a worker thread)."""
        if self._loop is None:
            return True
        future = asyncio.run_coroutine_threadsafe(self.progress(value, message), self._loop)
        return future.result(timeout=30)

    # -- children (docs/workflows.md, "Child tasks") ------------------------------------------

    @property
    def children_workflow_id(self) -> str:
        """The id of the workflow its children make (the same for every attempt)."""
        return children_id(self.task_id)

    @property
    def children(self) -> Children | None:
        """What this attempt spawned (``None``: nothing)."""
        return self._children

    async def spawn(self, child: Expr) -> None:
        """Add a child: a :func:`~dtq_core.step`, or a chain, group or chord of them. It is
        routed and checked now, and created only when this attempt succeeds, with its
        finish: an attempt that fails or is retried creates nothing, so a parent re-run after
        a crash does not create its children twice.

        Raises:
            ValidationError, UnknownTaskError, UnknownQueueError: the child is refused.
        """
        await self.spawn_many([child])

    async def spawn_many(self, children: Iterable[Expr]) -> None:
        """:meth:`spawn` each of ``children``, in order (all or none of them)."""
        await self._kids().add(list(children))

    async def wait_children(self, then: Expr, *, on_failure: Policy = "fail") -> None:
        """Continue this task with ``then`` when its children have ended, without holding a
        slot: ``then`` receives the list of their results, in spawn order, first in its
        arguments (a chord of the children and ``then``). Call it after the last spawn.

        Args:
            on_failure: what a failed child does: ``fail`` (the others not started are
                cancelled and ``then`` does not run), ``continue`` (``then`` gets its error
                value) or ``ignore`` (``then`` gets ``None``). Without ``wait_children`` the
                children are independent (``continue``).
        """
        await self._kids().wait(then, on_failure)

    def spawn_threadsafe(
        self, *children: Expr, then: Expr | None = None, on_failure: Policy = "fail"
    ) -> None:
        """:meth:`spawn_many`, then :meth:`wait_children` when ``then`` is given, for
        synchronous handlers (they run in a worker thread)."""

        async def both() -> None:
            await self.spawn_many(children)
            if then is not None:
                await self.wait_children(then, on_failure=on_failure)

        if self._loop is None:
            raise RuntimeError("spawn_threadsafe needs the worker's event loop")
        asyncio.run_coroutine_threadsafe(both(), self._loop).result(timeout=60)

    def _kids(self) -> Children:
        if self._children is None:
            if self._spawner is None:
                raise RuntimeError("this context cannot spawn children (not run by a worker)")
            self._children = self._spawner(self)
        return self._children


Handler = Callable[..., Any]
ExecutorKind = Literal["thread", "process"]
"""Where a sync handler runs (``@registry.task(executor=...)``)."""
P = ParamSpec("P")
R = TypeVar("R")


class Submitter(Protocol):
    """What a typed task submits through (:class:`dtq_core.Client` is one)."""

    async def submit(
        self, requests: TaskRequest, *, defaults: TaskDef | None = None
    ) -> TaskHandle[Any]: ...


@dataclass(frozen=True, slots=True)
class TaskDef:
    """A registered task: its handler and its defaults."""

    name: str
    fn: Handler
    queue: str = "default"
    max_attempts: int | None = None
    timeout_s: float | None = None
    priority: int = 5
    is_async: bool = False
    takes_context: bool = True
    group_by: str | None = None
    """A keyword argument whose value is the task's group, when the submit names none."""
    executor: ExecutorKind = "thread"
    """Where a sync handler runs: ``thread`` (a thread of the worker process) or ``process``
    (a process of the worker's pool, killed at its timeout or cancel). Async handlers run on
    the worker's event loop whatever this says."""


class Task(Generic[P, R]):
    """A registered handler, typed: what ``@registry.task`` returns (README.md, "Using it
    from Python"). ``P`` is the handler's parameters without its context, ``R`` what it
    returns.

    - ``await send.enqueue(client, "a@b.c", subject="hi")`` submits it with its arguments
      checked by the type checker, and returns a ``TaskHandle[R]``;
    - ``send.with_options(priority=7, delay_s=10).enqueue(client, ...)`` with submit options;
    - ``send.step(...)`` is a workflow step of it;
    - ``send(ctx, ...)`` still runs the handler itself (in tests, say).

    Its name works everywhere a task name does, for producers that do not import handlers.
    """

    __slots__ = ("definition", "fn")

    def __init__(self, definition: TaskDef) -> None:
        self.definition = definition
        self.fn = definition.fn

    @property
    def name(self) -> str:
        return self.definition.name

    def __repr__(self) -> str:
        return f"Task({self.definition.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the handler itself, as it was written (with its context first if it takes
        one)."""
        return self.fn(*args, **kwargs)

    async def enqueue(
        self, client: Submitter, /, *args: P.args, **kwargs: P.kwargs
    ) -> TaskHandle[R]:
        """Submit it with these arguments (its definition's queue, priority and defaults)."""
        request = request_of(self.definition, args, kwargs)
        return cast(TaskHandle[R], await client.submit(request, defaults=self.definition))

    def with_options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay_s: float | None = None,
        eta: datetime | None = None,
        max_attempts: int | None = None,
        timeout_s: float | None = None,
        ttl_s: float | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        dedup: str | None = None,
        dedup_key: str | None = None,
        debounce_s: float | None = None,
        throttle_s: float | None = None,
        group: str | None = None,
    ) -> TaskOptions[P, R]:
        """The same task with submit options (those of :meth:`Client.enqueue
        <dtq_core.Client.enqueue>`)."""
        options = {
            "queue": queue,
            "priority": priority,
            "delay_s": delay_s,
            "eta": eta,
            "max_attempts": max_attempts,
            "timeout_s": timeout_s,
            "ttl_s": ttl_s,
            "idempotency_key": idempotency_key,
            "metadata": metadata,
            "dedup": dedup,
            "dedup_key": dedup_key,
            "debounce_s": debounce_s,
            "throttle_s": throttle_s,
            "group": group,
        }
        return TaskOptions(self, {k: v for k, v in options.items() if v is not None})

    def step(self, *args: P.args, **kwargs: P.kwargs) -> Step:
        """A workflow step of it with these arguments (:func:`dtq_core.step`); arguments a
        step receives from the steps before it come first, so give only the others."""
        return Step(request_of(self.definition, args, kwargs))


class TaskOptions(Generic[P, R]):
    """A typed task with submit options (:meth:`Task.with_options`)."""

    __slots__ = ("options", "task")

    def __init__(self, task: Task[P, R], options: dict[str, Any]) -> None:
        self.task = task
        self.options = options

    async def enqueue(
        self, client: Submitter, /, *args: P.args, **kwargs: P.kwargs
    ) -> TaskHandle[R]:
        """Submit it with these arguments and the options."""
        definition = self.task.definition
        request = request_of(definition, args, kwargs, **self.options)
        return cast(TaskHandle[R], await client.submit(request, defaults=definition))

    def step(self, *args: P.args, **kwargs: P.kwargs) -> Step:
        """A workflow step of it with these arguments and the options (those a step may
        have)."""
        return Step(request_of(self.task.definition, args, kwargs, **self.options))


class Register(Protocol):
    """``@registry.task(...)``: the decorator, typed by the handler it registers."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[TaskContext, P], Coroutine[Any, Any, R]]
    ) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[TaskContext, P], R]) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]]) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Task[P, R]: ...


@dataclass(frozen=True, slots=True)
class Schedule:
    """A cron or interval schedule declared in code (``registry.schedule``)."""

    name: str
    task: str
    queue: str
    cron: str | None = None
    every_s: float | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 5
    timezone: str = "UTC"
    misfire: Literal["skip", "latest", "all"] = "latest"
    misfire_cap: int = 100
    jitter_s: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueDecl:
    """A queue's configuration declared in code (``registry.queue``); every worker serving
    the queue applies it at start."""

    name: str
    partitions: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """The limits given (``max_depth``, ``rate``, ``burst``, ``concurrency``; None clears)."""


def argument_schema(definition: TaskDef) -> dict[str, Any]:
    """The JSON Schema of a handler's parameters, its context left out, from its annotations
    (:mod:`dtq_core.protocol.argschema`); a parameter whose annotation has no JSON form
    takes any value."""
    fn = definition.fn
    params = list(inspect.signature(fn).parameters.values())
    if definition.takes_context:
        params = params[1:]
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    kind = inspect.Parameter
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    positional: list[str] = []
    required: list[str] = []
    variadic = False
    extra: Any = False
    for p in params:
        if p.kind is kind.VAR_POSITIONAL:
            variadic = True
            continue
        if p.kind is kind.VAR_KEYWORD:
            extra, more = _schema_of(hints.get(p.name, Any))
            defs.update(more)
            continue
        if p.kind in {kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD}:
            positional.append(p.name)
        if p.default is p.empty:
            required.append(p.name)
        one, more = _schema_of(hints.get(p.name, Any))
        properties[p.name] = one
        defs.update(more)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extra,
        "x-positional": positional,
        "x-variadic": variadic,
    }
    if defs:
        schema["$defs"] = defs
    return schema


def _schema_of(annotation: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON Schema of one annotation and the definitions it refers to (``{}``: any
    value, for an annotation with no JSON form)."""
    try:
        (one,), defs = msgspec.json.schema_components([annotation], ref_template="#/$defs/{name}")
    except (TypeError, ValueError):
        return {}, {}
    return one, defs


def _check_executor(name: str, fn: Handler, executor: str | None, *, is_async: bool) -> None:
    """``executor`` names a known place, only for a sync handler, and a handler run in a
    process is one that process can import by name."""
    if executor is None:
        return
    if executor not in ("thread", "process"):
        raise ValidationError(
            f"task {name!r}: executor must be 'thread' or 'process', not {executor!r}",
            field="executor",
        )
    if is_async:
        raise ValidationError(
            f"task {name!r}: executor={executor!r} is for sync handlers; an async def handler "
            "runs on the worker's event loop (make it a plain def to run it in a "
            f"{executor}, or run more worker processes with dtq-worker --processes)",
            field="executor",
        )
    if executor == "process" and "<locals>" in getattr(fn, "__qualname__", "<locals>"):
        raise ValidationError(
            f"task {name!r}: a handler with executor='process' must be defined at the top "
            "level of a module (the worker's handler processes import it by name)",
            field="executor",
        )


def _takes_context(fn: Handler) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    first = params[0]
    return first.name in {"ctx", "context"} or first.annotation in {TaskContext, "TaskContext"}


class TaskRegistry:
    """The tasks a worker can run, by name.

    Example::

        registry = TaskRegistry()

        @registry.task(name="emails.send", queue="emails", max_attempts=5, timeout_s=30)
        async def send(ctx: TaskContext, to: str, subject: str) -> dict:
            ...
    """

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDef] = {}
        self._schedules: dict[str, Schedule] = {}
        self._queues: dict[str, QueueDecl] = {}

    def queue(self, name: str, *, partitions: int | None = None, **limits: Any) -> None:
        """Declare a queue's configuration in code: a worker serving ``name`` stores it in
        Redis at start, as ``dtq queue configure`` would (a setting not given is left as
        Redis has it, ``None`` clears a limit).

        Example::

            registry.queue("crm", rate="100/s", concurrency=50)

        Args:
            partitions: split the queue into this many partitions, 1 to 64; it only grows,
                so a declaration below what Redis holds changes nothing (docs/scaling.md,
                "Partitioned queues").
            limits: ``max_depth``, ``rate``, ``burst``, ``concurrency``,
                ``group_concurrency``, ``group_rate`` (docs/flow-control.md).

        Raises:
            ValidationError: a value out of range, or an unknown setting.
        """
        check_name("queue", name)
        if partitions is not None:
            check_partitions(partitions)
        unknown = set(limits) - set(SETTINGS)
        if unknown:
            raise ValidationError(
                f"unknown queue setting {sorted(unknown)[0]!r}: give partitions, "
                + ", ".join(SETTINGS),
                field=sorted(unknown)[0],
            )
        checked(QueueConfig(), **limits)
        self._queues[name] = QueueDecl(name, partitions, dict(limits))

    def task(
        self,
        name: str | None = None,
        *,
        queue: str = "default",
        max_attempts: int | None = None,
        timeout_s: float | None = None,
        priority: int = 5,
        group_by: str | None = None,
        executor: ExecutorKind | None = None,
    ) -> Register:
        """Register a handler (async or sync; sync handlers run in a thread, or in a process
        with ``executor="process"``); the decorator returns it as a typed :class:`Task`,
        which still runs the handler when called.

        Args:
            name: the task name; defaults to ``module.function``.
            queue: the queue it is submitted to by default.
            max_attempts: default attempt budget (else ``DTQ_MAX_ATTEMPTS``).
            timeout_s: default timeout (else ``DTQ_TASK_TIMEOUT_MS``).
            priority: default priority 0-9.
            group_by: a keyword argument of the handler whose value (as a string) is the
                task's group when a producer holding this definition submits it without one
                (docs/flow-control.md, "Groups").
            executor: for a sync handler, ``thread`` (the default: a thread of the worker
                process) or ``process``: a process of the worker's pool (the CPU-bound
                handler then runs beside the event loop, on another core, and a timeout or a
                cancel kills its process and starts a new one; docs/task-lifecycle.md,
                "Timeouts"). Arguments and results travel as JSON; the handler must be
                defined at the top level of a module the worker's processes can import.

        Raises:
            ValidationError: an option out of range, or ``executor`` given for an ``async
                def`` handler (it runs on the worker's event loop).
        """

        def register(fn: Handler) -> Task[Any, Any]:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            check_name("task", task_name)
            check_name("queue", queue)
            if task_name in self._tasks:
                raise ValueError(f"task {task_name!r} is registered twice")
            if max_attempts is not None and not 1 <= max_attempts <= MAX_ATTEMPTS_CAP:
                raise ValidationError("max_attempts out of range", field="max_attempts")
            if timeout_s is not None and not 0 < timeout_s <= MAX_TIMEOUT_S:
                raise ValidationError("timeout_s out of range", field="timeout_s")
            is_async = inspect.iscoroutinefunction(fn)
            _check_executor(task_name, fn, executor, is_async=is_async)
            self._tasks[task_name] = TaskDef(
                name=task_name,
                fn=fn,
                queue=queue,
                max_attempts=max_attempts,
                timeout_s=timeout_s,
                priority=priority,
                is_async=is_async,
                takes_context=_takes_context(fn),
                group_by=group_by,
                executor=executor or "thread",
            )
            return Task(self._tasks[task_name])

        return cast(Register, register)

    def schedule(
        self,
        name: str,
        *,
        task: str,
        cron: str | None = None,
        every_s: float | None = None,
        queue: str | None = None,
        args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        priority: int = 5,
        timezone: str = "UTC",
        misfire: Literal["skip", "latest", "all"] = "latest",
        misfire_cap: int = 100,
        jitter_s: float = 0.0,
    ) -> None:
        """Declare a schedule in code; ``dtq-scheduler --app`` stores it in Redis at start
        (and refuses to start if it breaks a rule).

        Example::

            registry.schedule(
                "nightly", task="reports.build", cron="0 2 * * *", timezone="Europe/Paris",
                misfire="skip", jitter_s=300,
            )

        Args:
            timezone: the IANA zone ``cron`` is read in, DST-correct (cron only).
            misfire: which ticks missed while no scheduler led fire: ``latest``, ``skip`` or
                ``all`` (at most ``misfire_cap``, 1-1000).
            jitter_s: a delay in ``[0, jitter_s)``, fixed per tick, for each tick's task.
        """
        if (cron is None) == (every_s is None):
            raise ValueError("give exactly one of cron and every_s")
        check_name("schedule", name)
        default_queue = self._tasks[task].queue if task in self._tasks else "default"
        self._schedules[name] = Schedule(
            name=name,
            task=task,
            queue=queue or default_queue,
            cron=cron,
            every_s=every_s,
            args=args or [],
            kwargs=kwargs or {},
            priority=priority,
            timezone=timezone,
            misfire=misfire,
            misfire_cap=misfire_cap,
            jitter_s=jitter_s,
        )

    def get(self, name: str) -> TaskDef | None:
        return self._tasks.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[TaskDef]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def schedules(self) -> list[Schedule]:
        return list(self._schedules.values())

    @property
    def queues(self) -> list[str]:
        """The queues of the registered tasks, in registration order, then the queues only
        declared with :meth:`queue`."""
        return list(dict.fromkeys([*(t.queue for t in self._tasks.values()), *self._queues]))

    @property
    def declared_queues(self) -> list[QueueDecl]:
        """The queue configurations declared with :meth:`queue`."""
        return list(self._queues.values())


def request_of(
    task: str | TaskDef | Task[Any, Any],
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    group: str | None = None,
    **options: Any,
) -> TaskRequest:
    """The request of a submit by task name or registered definition (whose queue, priority
    and ``group_by`` apply unless given), with the other :class:`TaskRequest` fields in
    ``options``: what ``Client.enqueue`` submits and ``step()`` makes a workflow step of.

    Raises:
        ValidationError: an option that is not a field, or a ``group_by`` keyword missing.
    """
    definition = definition_of(task)
    if definition is not None:
        queue = queue or definition.queue
        priority = definition.priority if priority is None else priority
        if group is None and definition.group_by is not None:
            group = _group_of(definition, kwargs)
    try:
        return TaskRequest(
            task=definition.name if definition is not None else str(task),
            args=list(args or []),
            kwargs=dict(kwargs or {}),
            queue=queue,
            priority=5 if priority is None else priority,
            group=group,
            **options,
        )
    except TypeError as exc:
        raise ValidationError(str(exc)) from None


def definition_of(task: str | TaskDef | Task[Any, Any]) -> TaskDef | None:
    """The registered definition behind ``task`` (``None``: a name)."""
    if isinstance(task, Task):
        return task.definition
    return task if isinstance(task, TaskDef) else None


def _group_of(definition: TaskDef, kwargs: Mapping[str, Any] | None) -> str:
    """The group a ``group_by`` definition takes from the submit's keyword arguments."""
    key = definition.group_by
    if not kwargs or key is None or kwargs.get(key) is None:
        raise ValidationError(
            f"task {definition.name!r} takes its group from the keyword argument {key!r}: "
            "give it, or pass group=",
            field="group",
        )
    return str(kwargs[key])


def load_registry(path: str) -> TaskRegistry:
    """Import ``pkg.module:attribute`` (a service's ``--app``) and check it is a registry.

    Like uvicorn, a module next to where the service was started is importable.

    Raises:
        ValueError: saying what is wrong with ``path``.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--app {path!r} must look like pkg.module:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--app {path!r}: cannot import {module_name}: {exc}") from exc
    registry = getattr(module, attr, None)
    if not isinstance(registry, TaskRegistry):
        raise ValueError(
            f"--app {path!r}: {module_name}.{attr} is {type(registry).__name__}, not a TaskRegistry"
        )
    return registry


def load_registry_or_exit(path: str, program: str) -> TaskRegistry:
    """:func:`load_registry` for a service's start-up: what is wrong with ``path`` becomes one
    line, ``<program>: <reason>``, and the process exits."""
    try:
        return load_registry(path)
    except ValueError as exc:
        raise SystemExit(f"{program}: {exc}") from exc
