"""Reading back what happened, for fault tests: lifecycle events and side-effect records."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import cast

import redis.asyncio as aioredis

from dtq_core.connection import StreamEntry
from dtq_core.keys import QueueKeys
from dtq_core.messages import TERMINAL_EVENTS, Event, expand_events


async def queue_events(redis: aioredis.Redis, qk: QueueKeys) -> list[Event]:
    """Every retained lifecycle event of a queue, in order."""
    out: list[Event] = []
    cursor = "-"
    while True:
        entries = cast(list[StreamEntry], await redis.xrange(qk.events, min=cursor, count=1000))
        if not entries:
            return out
        for eid, fields in entries:
            out.extend(expand_events(qk.queue, eid, fields))
        cursor = "(" + entries[-1][0]


@dataclass
class Summary:
    """The checker's figures (RELIABILITY 3.0)."""

    accepted: int
    terminal: Counter[str] = field(default_factory=Counter)
    dup_terminal: int = 0
    lost: int = 0
    unexpected: int = 0
    exec_starts: int = 0
    dup_exec: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "accepted": self.accepted,
            "lost": self.lost,
            "dup_terminal": self.dup_terminal,
            "unexpected": self.unexpected,
            "exec_starts": self.exec_starts,
            "dup_exec": self.dup_exec,
        }


async def summarize(
    redis: aioredis.Redis, qk: QueueKeys, accepted: set[str], side: aioredis.Redis | None = None
) -> Summary:
    """Compare what was accepted with the terminal events, and count executions."""
    terminal_per_task: Counter[str] = Counter()
    summary = Summary(accepted=len(accepted))
    for event in await queue_events(redis, qk):
        if event.type in TERMINAL_EVENTS and event.task_id:
            terminal_per_task[event.task_id] += 1
            summary.terminal[event.type] += 1
    summary.dup_terminal = sum(1 for n in terminal_per_task.values() if n > 1)
    summary.lost = len(accepted - set(terminal_per_task))
    summary.unexpected = len(set(terminal_per_task) - accepted)
    if side is not None:
        raw = cast(list[str], await side.lrange("exec_start", 0, -1))
        starts = [s.split("|")[0] for s in raw]
        summary.exec_starts = len(starts)
        summary.dup_exec = len(starts) - len(set(starts))
    return summary
