"""Workflow definitions: :func:`step`, :func:`chain`, :func:`group` and :func:`chord`, their
JSON form (``POST /api/v1/workflows``, ``dtq workflow submit``), and their compilation into
the graph of steps a workflow runs (pure: no Redis).

A definition is a tree: a chain runs its items one after the other, each receiving the result
of the one before first in its positional arguments; a group runs its items side by side and
its result is the list of theirs, in order; a chord is a group followed by a callback that
receives that list. Compiling flattens the tree into steps, each knowing the steps whose
results it receives (:class:`~dtq_core.protocol.workflows.Node`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import msgspec

from dtq_core.errors import ValidationError
from dtq_core.messages import TaskRequest
from dtq_core.protocol.workflows import (
    MAX_EDGES,
    MAX_STEPS,
    POLICIES,
    Chain,
    Chord,
    Expr,
    Group,
    Node,
    Policy,
    Step,
    StepDefinition,
    Tree,
)
from dtq_core.tasks import Task, TaskDef, request_of

MAX_DEPTH = 64
"""How deeply a definition may nest chains, groups and chords."""


def step(
    task: str | TaskDef | Task[Any, Any],
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    pass_result: bool = True,
    on_failure: Policy | None = None,
    queue: str | None = None,
    priority: int | None = None,
    delay_s: float | None = None,
    eta: datetime | None = None,
    max_attempts: int | None = None,
    timeout_s: float | None = None,
    ttl_s: float | None = None,
    metadata: dict[str, Any] | None = None,
    group: str | None = None,
) -> Step:
    """One task of a workflow, with the options of :meth:`Client.enqueue
    <dtq_core.Client.enqueue>` (a delay counts from when its inputs have ended).

    Args:
        pass_result: False: it waits for the steps before it without receiving their results.
        on_failure: what its failure does, instead of the workflow's policy: ``fail`` the
            workflow, ``continue`` (its successors receive its error value) or ``ignore``
            (they receive ``None``).
    """
    _check_policy(on_failure)
    request = request_of(
        task,
        args,
        kwargs,
        queue=queue,
        priority=priority,
        group=group,
        delay_s=delay_s,
        eta=eta,
        max_attempts=max_attempts,
        timeout_s=timeout_s,
        ttl_s=ttl_s,
        metadata=metadata,
    )
    return Step(request, pass_result, on_failure)


def chain(*items: Expr) -> Chain:
    """Run ``items`` one after the other; each receives the result of the one before."""
    return Chain(_exprs(items))


def group(*items: Expr | Iterable[Expr]) -> Group:
    """Run ``items`` side by side; the result is the list of their results, in order.
    ``group(a, b)`` and ``group([a, b])`` are the same."""
    if len(items) == 1 and not isinstance(items[0], Step | Chain | Group | Chord):
        return Group(_exprs(tuple(items[0])))
    return Group(_exprs(cast(tuple[Expr, ...], items)))


def chord(header: Group | Iterable[Expr], callback: Expr) -> Chord:
    """Run ``header``'s items side by side, then ``callback`` once, with the list of their
    results."""
    head = header if isinstance(header, Group) else group(list(header))
    return Chord(head, _expr(callback))


def _exprs(items: tuple[Any, ...]) -> tuple[Expr, ...]:
    return tuple(_expr(item) for item in items)


def _expr(item: Any) -> Expr:
    if not isinstance(item, Step | Chain | Group | Chord):
        raise ValidationError(
            f"a workflow is made of step(), chain(), group() and chord(), not {item!r}"
        )
    return item


def _check_policy(policy: object, field: str = "on_failure") -> None:
    if policy is not None and policy not in POLICIES:
        raise ValidationError(
            f"{field} must be one of {', '.join(POLICIES)}, got {policy!r}", field=field
        )


# -- JSON form --------------------------------------------------------------------------------

_STEP_ONLY = frozenset({"pass_result", "on_failure"})
_REQUEST_FIELDS = frozenset(TaskRequest.__struct_fields__)
_REFUSED = ("idempotency_key", "dedup", "dedup_key", "debounce_s", "throttle_s")


def to_json(expr: Expr) -> dict[str, Any]:
    """The JSON form of a definition (what ``POST /api/v1/workflows`` takes as
    ``workflow``)."""
    if isinstance(expr, Step):
        out = cast(dict[str, Any], msgspec.to_builtins(expr.request))
        if not expr.pass_result:
            out["pass_result"] = False
        if expr.on_failure is not None:
            out["on_failure"] = expr.on_failure
        return out
    if isinstance(expr, Chain):
        return {"chain": [to_json(e) for e in expr.items]}
    if isinstance(expr, Group):
        return {"group": [to_json(e) for e in expr.items]}
    return {
        "chord": {
            "header": [to_json(e) for e in expr.header.items],
            "callback": to_json(expr.callback),
        }
    }


def from_json(value: Any, path: str = "workflow", depth: int = 0) -> Expr:
    """A definition from its JSON form: a step is an object with ``task`` (and the fields of
    a task submit, ``pass_result``, ``on_failure``); ``{"chain": [...]}``, ``{"group": [...]}``
    and ``{"chord": {"header": [...], "callback": {...}}}`` combine them.

    Raises:
        ValidationError: naming the place (``workflow.chain[2].task``) and what is wrong.
    """
    if depth > MAX_DEPTH:
        raise ValidationError(f"{path}: nested deeper than {MAX_DEPTH}", field=path)
    if not isinstance(value, dict):
        raise ValidationError(f"{path} must be an object, got {type(value).__name__}", field=path)
    kinds = [k for k in ("chain", "group", "chord") if k in value]
    if kinds:
        kind = kinds[0]
        if len(value) != 1:
            raise ValidationError(
                f"{path}: {kind!r} takes no other key, got {sorted(value)}", field=path
            )
        body = value[kind]
        if kind == "chord":
            if not isinstance(body, dict) or set(body) != {"header", "callback"}:
                raise ValidationError(
                    f"{path}.chord must be an object with header and callback", field=path
                )
            header = _list(body["header"], f"{path}.chord.header", depth)
            return Chord(
                Group(header), from_json(body["callback"], f"{path}.chord.callback", depth + 1)
            )
        items = _list(body, f"{path}.{kind}", depth)
        return Chain(items) if kind == "chain" else Group(items)
    if "task" not in value:
        raise ValidationError(
            f"{path} must be a step (an object with task) or one of chain, group, chord",
            field=path,
        )
    unknown = set(value) - _REQUEST_FIELDS - _STEP_ONLY
    if unknown:
        raise ValidationError(f"{path}: unknown fields {sorted(unknown)}", field=path)
    pass_result = value.get("pass_result", True)
    if not isinstance(pass_result, bool):
        raise ValidationError(f"{path}.pass_result must be a boolean", field=f"{path}.pass_result")
    _check_policy(value.get("on_failure"), f"{path}.on_failure")
    try:
        request = msgspec.convert(
            {k: v for k, v in value.items() if k not in _STEP_ONLY}, TaskRequest
        )
    except msgspec.ValidationError as exc:
        raise ValidationError(f"{path}: {exc}", field=path) from None
    return Step(request, pass_result, value.get("on_failure"))


def _list(value: Any, path: str, depth: int) -> tuple[Expr, ...]:
    if not isinstance(value, list):
        raise ValidationError(f"{path} must be a list", field=path)
    return tuple(from_json(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))


# -- compiling --------------------------------------------------------------------------------


def compile_workflow(
    expr: Expr, *, start: int = 0, input: Tree | None = None
) -> tuple[list[Node], Tree | None]:
    """The steps of ``expr``, in definition order (depth first), and the tree of step indexes
    that is the workflow's result.

    Args:
        start: the index of its first step (a part compiled after ``start`` steps of the same
            workflow: a handler's children, :class:`dtq_core.workflows.Children`).
        input: the steps whose values its first steps receive (``None``: none).

    Raises:
        ValidationError: no step, too many steps or inputs, or a step with an option a
            workflow step cannot have (idempotency and dedup: a step's task is its own).
    """
    nodes: list[Node] = []
    edges = 0

    def walk(e: Expr, prev: Tree | None) -> Tree | None:
        nonlocal edges
        if isinstance(e, Step):
            for name in _REFUSED:
                if getattr(e.request, name) is not None:
                    raise ValidationError(
                        f"step {start + len(nodes)} ({e.request.task}): a workflow step cannot "
                        f"have {name} (a step runs once per workflow already)",
                        field=name,
                    )
            if start + len(nodes) >= MAX_STEPS:
                raise ValidationError(f"a workflow has at most {MAX_STEPS} steps")
            node = Node(
                start + len(nodes),
                StepDefinition(request=e.request, input=prev, pass_result=e.pass_result),
                e.on_failure,
            )
            edges += len(node.inputs)
            if edges > MAX_EDGES:
                raise ValidationError(
                    f"a workflow's steps have at most {MAX_EDGES} inputs together (a group "
                    "followed by a group multiplies them: put one step between)"
                )
            nodes.append(node)
            return node.index
        if isinstance(e, Chain):
            if not e.items:
                raise ValidationError("a chain needs at least one item")
            out = prev
            for item in e.items:
                out = walk(item, out)
            return out
        if isinstance(e, Group):
            return [cast(Tree, walk(item, prev)) for item in e.items]
        return walk(e.callback, walk(e.header, prev))

    output = walk(_expr(expr), input)
    if not nodes:
        raise ValidationError("a workflow needs at least one step")
    return nodes, output
