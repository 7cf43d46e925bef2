"""Workflow driving, while leading: advance workflows as their steps end.

The transitions that end a step note it in its queue's workflow outbox and publish the queue's
name on the workflow channel; a submit or a cancel publishes ``wf:<id>``. The listener
collects what it hears; each pass drains those queues' outboxes and kicks those workflows
(:class:`dtq_core.workflows.Workflows`), and every :data:`SWEEP_INTERVAL_S` a sweep picks up
whatever a missed message left behind (the leader was down, changed, or lost its
subscription). Every step of it is idempotent, so a message heard twice, or by a deposed
leader, changes nothing.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from dtq_core.infra.pubsub import listen
from dtq_core.workflows import Workflows
from dtq_scheduler_leader.leader import Leadership
from dtq_scheduler_leader.metrics import SchedulerMetrics

log = structlog.get_logger()

SWEEP_INTERVAL_S = 2.0
WORKFLOW_PREFIX = "wf:"
MAX_HEARD = 100_000
"""Queues and workflows remembered between passes at most (a flood waits for the sweep)."""


class WorkflowDriver:
    """The workflow duty of the leader."""

    def __init__(
        self, workflows: Workflows, leadership: Leadership, metrics: SchedulerMetrics
    ) -> None:
        self.workflows = workflows
        self.leadership = leadership
        self.metrics = metrics
        self._queues: set[str] = set()
        self._kicks: set[str] = set()
        self._heard = asyncio.Event()
        self._swept = 0.0
        workflows.on_event = self._published
        workflows.on_advanced = self._advanced

    def _published(self, etype: str) -> None:
        self.metrics.workflows.labels(etype.removeprefix("workflow.")).inc()

    def _advanced(self, ages: list[float]) -> None:
        for age in ages:
            self.metrics.workflow_advance.observe(age)

    async def listen(self) -> None:
        """Collect the workflow channel's messages (until cancelled)."""
        await listen(
            self.workflows.redis,
            self.workflows.keys.workflow_channel,
            self._message,
            on_error=lambda _exc: self.metrics.redis_errors.labels("workflows").inc(),
            on_subscribed=self._resubscribed,
        )

    def _message(self, data: str) -> None:
        if len(self._queues) + len(self._kicks) >= MAX_HEARD:
            return
        if data.startswith(WORKFLOW_PREFIX):
            self._kicks.add(data.removeprefix(WORKFLOW_PREFIX))
        else:
            self._queues.add(data)
        self._heard.set()

    def _resubscribed(self) -> None:
        self._swept = 0.0  # what was published meanwhile is lost: sweep at once
        self._heard.set()

    async def step(self) -> float:
        """Wait for messages (at most until the next sweep is due), then drive what they
        named; returns 0 (the loop goes straight back to waiting)."""
        wait = self._swept + SWEEP_INTERVAL_S - time.monotonic()
        if wait > 0:
            try:
                async with asyncio.timeout(wait):
                    await self._heard.wait()
            except TimeoutError:
                pass
        self._heard.clear()
        queues, self._queues = self._queues, set()
        kicks, self._kicks = self._kicks, set()
        try:
            if kicks:
                await self.workflows.kick(kicks)
            for queue in sorted(queues):
                await self.workflows.drain(queue)
            if time.monotonic() - self._swept >= SWEEP_INTERVAL_S:
                self._swept = time.monotonic()
                handled = await self.workflows.sweep()
                if handled:
                    log.info("workflows_swept", handled=handled)
        except BaseException:
            # Not done: heard again on the next pass (the sweep would find them too).
            self._queues |= queues
            self._kicks |= kicks
            raise
        return 0.0
