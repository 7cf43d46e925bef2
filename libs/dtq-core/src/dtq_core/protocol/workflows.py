"""A workflow's state in Redis (pure): the fields of its hash, what ``wf_create`` stores and
what ``wf_advance`` answers.

A workflow is a graph of steps (:mod:`dtq_core.canvas` compiles chains, groups and chords into
one). Its hash ``dtq:{wf:<id>}:h`` lives in its own slot and holds:

===========  ==============================================================================
field        what
===========  ==============================================================================
``st``       ``running``, ``succeeded``, ``failed`` or ``cancelled``
``ct/ft``    created and ended (µs, Redis time)
``n``        the number of steps; ``left``: those not ended
``pol``      the workflow's ``on_failure``; ``p:<i>`` a step's own
``name``     the name the submitter gave it (absent: none)
``out``      the workflow's result: a tree of step indexes (JSON)
``nfail``    steps that failed it (``on_failure`` ``fail`` or ``continue``)
``err``      the error value of the first of them; ``errs`` its index
``ev``       workflow events the leader has yet to publish, comma-separated
``s:<i>``    the step's state: ``pending`` (not submitted), ``queued`` (submitted), or how
             its task ended (``succeeded``, ``failed``, ``dead``, ``cancelled``, ``expired``)
``d:<i>``    its inputs not ended yet (absent: none)
``x:<i>``    the steps that wait for it, comma-separated
``i:<i>``    the steps whose values it receives, comma-separated (absent: none)
``q:<i>``    its definition (:class:`StepDefinition`, JSON)
``r:<i>``    the value its successors get (JSON): its result, or its error value
``t:<i>``    its task id, once submitted
``par``      the task whose children these steps are (absent: not spawned)
``kind``     ``batch`` for a batch (absent: a workflow); a batch's fields follow
``m0``       its callbacks are the steps below this index, its members the steps from it
``sealed``   ``1`` once sealed: no member is added, and it may end
``bok``      members that succeeded; ``bfail``: members that ended otherwise
``g:<i>``    ``ok``: the callback runs only if no member failed, else it is skipped
             (``cancelled``): ``on_success``
===========  ==============================================================================

The task of step ``i`` has the rand :func:`step_rand` of the workflow id and ``i``, so a step
submitted twice (a drain that stopped half-way, then ran again) finds itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from dtq_core.messages import TaskRequest

Policy = Literal["fail", "continue", "ignore"]
POLICIES: tuple[Policy, ...] = ("fail", "continue", "ignore")

MAX_STEPS = 10_000
"""Steps one workflow may have at most (its hash is one key)."""
MAX_EDGES = 200_000
"""Inputs over all steps at most (a group of 1,000 followed by a group of 1,000 is 1,000,000:
put a step between them)."""

# -- definitions (made by dtq_core.canvas.step, chain, group and chord) ----------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One task of a workflow (made by :func:`dtq_core.canvas.step`)."""

    request: TaskRequest
    pass_result: bool = True
    on_failure: Policy | None = None


@dataclass(frozen=True, slots=True)
class Chain:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Group:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Chord:
    header: Group
    callback: Expr


Expr = Step | Chain | Group | Chord
"""A workflow definition, or a part of one."""


Tree = int | list["Tree"]
"""A step's input, and the workflow's result: a step index, or a list of trees (a group's
results, in order)."""


class StepDefinition(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a step's task is made from when its inputs have ended (field ``q:<i>``)."""

    request: TaskRequest
    """The task, with its queue resolved at the workflow's submit."""
    input: Any = None
    """A :data:`Tree`: the steps whose values go first in its positional arguments (``None``:
    it has none)."""
    pass_result: bool = True
    """False: it waits for its inputs but does not receive their values."""
    headers: str = ""
    """The trace context of the workflow's span (empty: not traced), whose child its task
    is."""
    summary: bool = False
    """A batch's callback: its batch's counts (:func:`batch_summary`) go first in its
    positional arguments."""


@dataclass(frozen=True, slots=True)
class Node:
    """One compiled step."""

    index: int
    definition: StepDefinition
    policy: Policy | None
    """Its own ``on_failure`` (``None``: the workflow's)."""

    @property
    def inputs(self) -> list[int]:
        """The steps it waits for, each once, in order."""
        return list(dict.fromkeys(leaves(self.definition.input)))


def leaves(tree: Tree | None) -> Iterator[int]:
    """The step indexes in ``tree``, in order."""
    if tree is None:
        return
    if isinstance(tree, int):
        yield tree
        return
    for sub in tree:
        yield from leaves(sub)


def fill(tree: Tree, values: dict[int, Any]) -> Any:
    """``tree`` with each step index replaced by that step's value."""
    if isinstance(tree, int):
        return values[tree]
    return [fill(sub, values) for sub in tree]


def step_rand(workflow_id: str, step: int) -> str:
    """The rand of step ``step``'s task: the same whoever submits it, however often."""
    return hashlib.sha256(f"{workflow_id}:{step}".encode()).hexdigest()[:32]


def children_id(parent_task_id: str) -> str:
    """The id of the workflow of the children a task spawns: the same for every attempt, so
    the children of a task are made once however often its finish is replayed."""
    return hashlib.sha256(f"children:{parent_task_id}".encode()).hexdigest()[:32]


def with_headers(nodes: Iterable[Node], headers: str) -> list[Node]:
    """``nodes``, each carrying the trace context ``headers``."""
    return [
        Node(n.index, msgspec.structs.replace(n.definition, headers=headers), n.policy)
        for n in nodes
    ]


def step_ref(workflow_id: str, step: int) -> str:
    """The task hash's ``wf`` field of a step."""
    return f"{workflow_id}:{step}"


_encoder = msgspec.json.Encoder(order="deterministic")
_definition = msgspec.json.Decoder(StepDefinition)


def encode_batch(callbacks: Sequence[tuple[Node, bool]], *, name: str | None) -> list[str | bytes]:
    """The fields ``wf_create`` stores for a new batch: its callbacks (each with whether it is
    ``on_success``), every one waiting for the seal."""
    out = encode([n for n, _ in callbacks], output=None, policy="continue", name=name)
    out += ["kind", "batch", "m0", str(len(callbacks))]
    for node, guarded in callbacks:
        out += [f"d:{node.index}", "1"]
        if guarded:
            out += [f"g:{node.index}", "ok"]
    return out


def encode_definition(definition: StepDefinition) -> bytes:
    return _encoder.encode(definition)


def encode(
    nodes: Sequence[Node], *, output: Tree | None, policy: Policy, name: str | None
) -> list[str | bytes]:
    """The field-value pairs ``wf_create`` stores for a workflow of ``nodes``."""
    successors: dict[int, list[int]] = {}
    for node in nodes:
        for dep in node.inputs:
            successors.setdefault(dep, []).append(node.index)
    out: list[str | bytes] = ["n", str(len(nodes)), "left", str(len(nodes)), "pol", policy]
    out += ["out", _encoder.encode(output)]
    if name is not None:
        out += ["name", name]
    for node in nodes:
        i = node.index
        out += [f"s:{i}", "pending", f"q:{i}", _encoder.encode(node.definition)]
        inputs = node.inputs
        if inputs:
            out += [f"d:{i}", str(len(inputs))]
            if node.definition.pass_result:
                out += [f"i:{i}", ",".join(map(str, inputs))]
        if i in successors:
            out += [f"x:{i}", ",".join(map(str, successors[i]))]
        if node.policy is not None:
            out += [f"p:{i}", node.policy]
    return out


@dataclass(frozen=True, slots=True)
class Ready:
    """A step whose inputs have all ended: submit it."""

    step: int
    definition: StepDefinition
    values: dict[int, Any]
    """Its inputs' values, decoded."""
    summary: dict[str, Any] | None = None
    """A batch callback's first argument (:func:`batch_summary`)."""

    def request(self) -> TaskRequest:
        """Its task's request: the inputs' values (or its batch's counts) first in its
        arguments."""
        d = self.definition
        if d.summary and self.summary is not None:
            return msgspec.structs.replace(d.request, args=[self.summary, *d.request.args])
        if d.input is None or not d.pass_result:
            return d.request
        args = [fill(d.input, self.values), *d.request.args]
        return msgspec.structs.replace(d.request, args=args)


def batch_summary(batch_id: str, counts: Sequence[int]) -> dict[str, Any]:
    """What a batch's callback receives first: ``{"batch_id", "total", "succeeded",
    "failed"}`` (members)."""
    total, ok, failed = counts
    return {"batch_id": batch_id, "total": total, "succeeded": ok, "failed": failed}


@dataclass(frozen=True, slots=True)
class Advance:
    """What ``wf_advance`` answered."""

    status: str
    events: str
    """Events not yet published, comma-separated (``""``: none)."""
    cancel: list[str]
    """Task ids of steps to cancel."""
    ready: list[Ready]

    @property
    def event_types(self) -> list[str]:
        return self.events.split(",") if self.events else []


def read_advance(workflow_id: str, reply: Sequence[Any]) -> Advance | None:
    """``wf_advance``'s reply; ``None`` when the workflow is gone."""
    if reply[0] == "not_found":
        return None
    summary = batch_summary(workflow_id, [int(c) for c in reply[4]]) if reply[4] else None
    ready = []
    for entry in reply[3]:
        values = {int(entry[k]): msgspec.json.decode(entry[k + 1]) for k in range(2, len(entry), 2)}
        ready.append(Ready(int(entry[0]), _definition.decode(entry[1]), values, summary))
    return Advance(str(reply[0]), str(reply[1]), [str(t) for t in reply[2]], ready)


def advance_args(ended: Iterable[tuple[int, str, bytes]]) -> list[Any]:
    """``wf_advance``'s per-step ARGV: step, state, value."""
    return [v for triple in ended for v in triple]


def decode_definition(raw: str | bytes) -> StepDefinition:
    return _definition.decode(raw)
