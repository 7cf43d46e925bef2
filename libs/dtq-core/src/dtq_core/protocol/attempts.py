"""The attempts a worker claims, holds and finishes, as the typed values the wrappers of
:mod:`dtq_core.protocol.scripts` take and return (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dtq_core.protocol.outcomes import FinishOutcome

CLAIMED_WIDTH = 12
"""Values per started task in a claim reply (``lua/claim.lua``)."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """One attempt started by :func:`Scripts.claim`."""

    rand: str
    priority: int
    entry_id: str
    lease: str
    attempt: int
    max_attempts: int
    timeout_ms: int
    task: str
    args: str
    kwargs: str
    headers: str
    queued_at_us: int


def claimed_from_reply(flat: Sequence[Any]) -> list[Claimed]:
    """The started tasks of a claim reply, after its ``state, n`` head."""
    return [
        Claimed(
            rand=flat[i],
            priority=int(flat[i + 1]),
            entry_id=flat[i + 2],
            lease=str(flat[i + 3]),
            attempt=int(flat[i + 4]),
            max_attempts=int(flat[i + 5]),
            timeout_ms=int(flat[i + 6]),
            task=flat[i + 7],
            args=flat[i + 8],
            kwargs=flat[i + 9],
            headers=flat[i + 10],
            queued_at_us=int(flat[i + 11]),
        )
        for i in range(0, len(flat), CLAIMED_WIDTH)
    ]


@dataclass(frozen=True, slots=True)
class Held:
    """An attempt a worker holds: enough to extend, finish or release it."""

    rand: str
    priority: int
    entry_id: str
    lease: str

    def args(self) -> list[Any]:
        """The four values each fenced transition takes per attempt."""
        return [self.rand, self.priority, self.entry_id, self.lease]


@dataclass(frozen=True, slots=True)
class Finish:
    """The outcome of one attempt, for :func:`Scripts.finish`."""

    held: Held
    outcome: FinishOutcome
    payload: str = ""
    extra: str = ""
    children: str = ""
    """The children the attempt spawned (:meth:`dtq_core.workflows.Children.payload`)."""


@dataclass(frozen=True, slots=True)
class RunTimes:
    """The run times of the attempts one finish call ends (cancelled ones left out), as the
    worker measured them from the handler's start: how many, their sum and the longest, in
    µs. The call counts them in the queue's per-minute history
    (:mod:`dtq_core.protocol.history`)."""

    count: int = 0
    total_us: int = 0
    longest_us: int = 0

    @classmethod
    def of(cls, seconds: Iterable[float]) -> RunTimes:
        """The run times of attempts that ran ``seconds`` each."""
        us = [max(0, round(s * 1_000_000)) for s in seconds]
        return cls(len(us), sum(us), max(us, default=0))

    def args(self) -> list[int]:
        """The three values the finish transition takes."""
        return [self.count, self.total_us, self.longest_us]


NO_RUN_TIMES = RunTimes()
"""A finish call that reports no run time (the transitions' tests, hand-made outcomes)."""


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """One reclaim call: attempts requeued and buried, PEL entries whose stream entry was gone,
    and the cursor per stream to go on from."""

    requeued: int
    buried: int
    lost: int
    cursors: list[str]


def task_defaults(
    max_attempts: int, timeout_ms: int, tasks: Sequence[tuple[str, int | None, float | None]] = ()
) -> str:
    """The claim script's defaults argument: the settings' values, and each registered
    task's own ``(name, max_attempts, timeout_s)`` where it declares them."""
    table: dict[str, list[int]] = {"*": [max_attempts, timeout_ms]}
    for name, task_max, task_timeout in tasks:
        if task_max is not None or task_timeout is not None:
            table[name] = [task_max or 0, round(task_timeout * 1000) if task_timeout else 0]
    return msgspec.json.encode(table).decode()
