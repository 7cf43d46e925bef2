"""Following the partitions of the served queues: a queue that grows is claimed from whole
within about a second, without a restart (docs/scaling.md, "Partitioned queues").

A queue's partition count is in its meta hash, one read per queue. Reading every served
queue's every second would cost a worker serving 1,000 queues 1,000 commands a second and a
pause of tens of milliseconds of its event loop for each batch. So after the first pass, which
reads them all, a pass reads the layouts of:

- the queues known to be partitioned (they may grow again);
- the queues whose partition 1 the queue registry lists, found with one ``SMISMEMBER``: a
  growth registers the new partitions before it raises the count, so a queue that has just
  grown is among them;
- and a share of the others, so that every layout is read again within
  :data:`LAYOUT_SWEEP_S` whatever the registry says (a failover may lose a write to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import structlog

from dtq_core.names import partition_name
from dtq_core.partitions import LAYOUT_TTL_S, read_layouts
from dtq_worker.claim_plan import ClaimPlan
from dtq_worker.context import WorkerContext

log = structlog.get_logger()

LAYOUT_SWEEP_S = 30.0
"""Every served queue's layout is read at least this often, whatever the registry says."""


class PartitionFollower:
    """Adds the partitions of the served queues to the worker's queues as they appear."""

    def __init__(self, ctx: WorkerContext, plan: ClaimPlan, *, added: Callable[[], None]) -> None:
        """Args:
        added: called when a pass added partitions (they have work to claim, maybe).
        """
        self.ctx = ctx
        self.plan = plan
        self._added = added
        self._partitioned: set[str] = set()
        """Served queues of more than one partition."""
        self._read_all = True
        self._turn = 0

    async def follow(self) -> int:
        """One pass; returns how many partitions were added."""
        ctx = self.ctx
        queues = list(ctx.served) if self._read_all else await self._due()
        layouts = await read_layouts(ctx.redis, ctx.keys, queues)
        self._read_all = False
        added = 0
        for queue, layout in zip(queues, layouts, strict=True):
            if layout.count > 1:
                self._partitioned.add(queue)
            for name in layout.names(queue)[1:]:
                ctx.add_partition(name)
                if self.plan.add_partition(queue, name):
                    added += 1
                    log.info("partition_followed", queue=queue, partition=name)
        if added:
            self._added()
        return added

    async def _due(self) -> list[str]:
        """The queues whose layout this pass reads (see the module's docstring)."""
        ctx = self.ctx
        others = [q for q in ctx.served if q not in self._partitioned]
        due = dict.fromkeys(q for q in ctx.served if q in self._partitioned)
        if not others:
            return list(due)
        flags = await ctx.redis.smismember(ctx.keys.queues, [partition_name(q, 1) for q in others])
        due.update(dict.fromkeys(q for q, grown in zip(others, flags, strict=True) if grown))
        share = math.ceil(len(others) * LAYOUT_TTL_S / LAYOUT_SWEEP_S)
        start = self._turn % len(others)
        due.update(dict.fromkeys((others + others)[start : start + share]))
        self._turn = start + share
        return list(due)
