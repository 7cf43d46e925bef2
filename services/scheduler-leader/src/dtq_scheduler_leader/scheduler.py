"""One scheduler replica: the leader lease plus the duties it runs while leading.

Replicas are interchangeable; any number may run, and exactly one leads at a time.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
import structlog

from dtq_core.client import Client
from dtq_core.infra.settings import Settings
from dtq_core.ops.admin import Admin
from dtq_core.ops.schedules import ScheduleStore
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.scripts import Scripts
from dtq_core.tasks import TaskRegistry
from dtq_scheduler_leader.cron import ScheduleFirer
from dtq_scheduler_leader.history import DepthRecorder
from dtq_scheduler_leader.leader import Leadership
from dtq_scheduler_leader.loops import run_while_leader
from dtq_scheduler_leader.metrics import SchedulerMetrics
from dtq_scheduler_leader.promoter import Promoter
from dtq_scheduler_leader.queue_stats import QueueStatsRefresher
from dtq_scheduler_leader.reconciler import Reconciler
from dtq_scheduler_leader.sweeper import StaleWorkerSweeper
from dtq_scheduler_leader.workflows import WorkflowDriver

log = structlog.get_logger()


class Scheduler:
    """A scheduler replica on one Redis client (the caller owns and closes the client)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        settings: Settings,
        *,
        registry: TaskRegistry | None = None,
        metrics: SchedulerMetrics | None = None,
        replica_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self.metrics = metrics or SchedulerMetrics()
        scripts = Scripts(redis)
        self.leadership = Leadership(
            redis,
            scripts,
            self.keys,
            ttl_s=settings.scheduler.leader_ttl_s,
            metrics=self.metrics,
            poll_s=settings.scheduler.tick_s,
            replica_id=replica_id,
        )
        self.store = ScheduleStore(
            redis, self.keys, max_payload_bytes=settings.tasks.max_payload_bytes
        )
        self.promoter = Promoter(
            redis, scripts, self.keys, settings, leadership=self.leadership, metrics=self.metrics
        )
        self.firer = ScheduleFirer(
            Client(redis, settings),
            self.store,
            self.leadership,
            settings=settings,
            metrics=self.metrics,
            registry=registry,
        )
        self.sweeper = StaleWorkerSweeper(redis, scripts, self.keys, settings, self.metrics)
        self.reconciler = Reconciler(Client(redis, settings), self.metrics)
        self.queue_stats = QueueStatsRefresher(
            Admin(Client(redis, settings)),
            self.metrics.queues,
            settings.scheduler.queue_metrics_interval_s,
        )
        self.history = DepthRecorder(Admin(Client(redis, settings)))
        self.workflows = WorkflowDriver(
            Client(redis, settings).workflows, self.leadership, self.metrics
        )
        self.metrics.queues.watch(lambda: self.leadership.is_leader, self.queue_stats.max_age_s)

    async def run(self, stop: asyncio.Event) -> None:
        """Lead or follow until ``stop`` is set; then let the duties finish their step and
        release the lease, so a follower takes over at once.

        Cancellation (like ``kill -9``) does not release the lease: it expires after the TTL.
        """
        log.info("scheduler_started", replica=self.leadership.replica_id)
        lead = self.leadership
        async with asyncio.TaskGroup() as tg:
            tg.create_task(lead.run(stop), name="leader-lease")
            tg.create_task(run_while_leader("promoter", lead, stop, self.promoter.step))
            tg.create_task(run_while_leader("schedules", lead, stop, self.firer.step))
            # "reaper": the duty's name in the metrics label and logs operators already use.
            tg.create_task(run_while_leader("reaper", lead, stop, self.sweeper.step))
            tg.create_task(run_while_leader("reconciler", lead, stop, self.reconciler.step))
            tg.create_task(run_while_leader("queue_stats", lead, stop, self.queue_stats.step))
            tg.create_task(run_while_leader("history", lead, stop, self.history.step))
            tg.create_task(run_while_leader("workflows", lead, stop, self.workflows.step))
            listener = tg.create_task(self.workflows.listen(), name="workflow-listener")
            await stop.wait()
            listener.cancel()
        await lead.release()
        log.info("scheduler_stopped", replica=lead.replica_id)
