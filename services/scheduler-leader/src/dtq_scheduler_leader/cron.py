"""Schedule firing: submit one task per due tick of each cron and interval schedule.

While leading, each pass reads every schedule and its watermark (``dtq_core.ops.schedules``),
takes Redis ``TIME`` as now, lists each schedule's due ticks and submits those its misfire
policy fires (one, the latest, by default), oldest first, through the SDK with the idempotency
key ``schedule:<name>:<tick ms>`` (and the tick's jitter as ``delay_s``), recording each tick
before the next. A leader that dies between a submit and its record leaves that tick to the
next leader, whose submit is an idempotent replay of the same request: each tick yields one
task across a failover (while the idempotency key lives, ``DTQ_IDEM_TTL_S``), with
``misfire="all"`` too.

Ticks missed while no leader ran fire by the schedule's ``misfire`` policy (see
``dtq_core.ops.schedules``): ``latest`` (the default), ``skip`` or ``all``. A tick skipped by
``skip`` is recorded as ``skipped`` with code ``misfired``. A new schedule first fires at its
first tick after the leader first sees it. Ticks of a
paused schedule are recorded as handled without firing. A tick refused because its queue is
full is tried again (at most every :data:`FULL_RETRY_S`) rather than dropped. How each
schedule's latest tick went (fired, refused and why, ...) is kept with the schedule
(:class:`dtq_core.ops.schedules.LastTick`), where the API, the CLI and the dashboard show it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

import msgspec
import structlog

from dtq_core.client import Client
from dtq_core.errors import DtqError, IdempotencyConflictError, QueueFullError, ValidationError
from dtq_core.infra.settings import Settings
from dtq_core.messages import TaskRequest
from dtq_core.ops.schedules import (
    MISFIRED,
    LastTick,
    ScheduleSpec,
    ScheduleStore,
    TickOutcome,
    due_limit,
    due_ticks,
    fire_plan,
    idempotency_key,
    jitter_delay,
    next_fire,
    tick_ms,
    validate,
)
from dtq_core.tasks import Schedule, TaskRegistry
from dtq_scheduler_leader.leader import Leadership
from dtq_scheduler_leader.metrics import SchedulerMetrics

log = structlog.get_logger()

FULL_RETRY_S = 1.0
"""How often a tick refused by admission control is tried again (not every pass)."""


def declared_specs(
    schedules: Iterable[Schedule], max_payload_bytes: int | None = None
) -> list[ScheduleSpec]:
    """The specs of schedules declared in code, validated (so a bad one stops start-up).

    Raises:
        ValidationError: a declared schedule breaks a rule.
    """
    return [
        validate(ScheduleSpec.from_schedule(s), max_payload_bytes=max_payload_bytes)
        for s in schedules
    ]


async def declare_schedules(store: ScheduleStore, specs: Iterable[ScheduleSpec]) -> list[str]:
    """Store code-declared schedules: the code's definition wins over the stored one, but an
    operator's pause survives a restart. Returns the names stored."""
    names: list[str] = []
    for spec in specs:
        stored = await store.get(spec.name)
        paused = stored is not None and stored.paused
        await store.put(msgspec.structs.replace(spec, paused=paused))
        names.append(spec.name)
    if names:
        log.info("schedules_declared", schedules=names)
    return names


class ScheduleFirer:
    """The schedule duty of the leader."""

    def __init__(
        self,
        client: Client,
        store: ScheduleStore,
        leadership: Leadership,
        *,
        settings: Settings,
        metrics: SchedulerMetrics,
        registry: TaskRegistry | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.leadership = leadership
        self.settings = settings
        self.metrics = metrics
        self.registry = registry
        self._retry_at: dict[str, float] = {}
        self.declared = {
            spec.name: spec
            for spec in declared_specs(registry.schedules if registry is not None else [])
        }
        """Code-declared schedules: put back whenever Redis has lost them."""

    async def step(self) -> float:
        """Fire what is due; returns the seconds until the next pass (at most one tick)."""
        wake = await self.fire_due()
        return min(self.settings.scheduler.tick_s, wake)

    async def fire_due(self, now_ms: int | None = None) -> float:
        """Fire the due ticks of every schedule; returns seconds until the next tick.

        Args:
            now_ms: now, ms since the epoch (tests drive the clock); Redis time by default.
        """
        specs = await self.store.list()
        lost = self.declared.keys() - {spec.name for spec in specs}
        if lost:
            # Redis came back empty (or someone deleted them): the code still declares them.
            # Their watermarks are gone too, so they fire from now on, with no backfill.
            log.warning("schedules_restored", schedules=sorted(lost))
            await declare_schedules(self.store, [self.declared[name] for name in sorted(lost)])
            specs = await self.store.list()
        marks = await self.store.watermarks()
        if now_ms is None:
            now_ms = await self.store.now_ms()
        now = now_ms / 1000
        wake = self.settings.scheduler.tick_s
        for spec in specs:
            if not self.leadership.is_leader:
                break
            if self._retry_at.get(spec.name, 0.0) > time.monotonic():
                continue
            mark = marks.get(spec.name)
            if mark is None:
                mark = await self.store.init_watermark(spec.name, now_ms)
            try:
                ticks = due_ticks(spec, mark / 1000, now, limit=due_limit(spec))
                wake = min(wake, max(0.0, next_fire(spec, now) - now))
            except ValueError as exc:
                log.error("schedule_skipped", schedule=spec.name, reason="no_tick", error=str(exc))
                continue
            if ticks:
                await self._handle_ticks(spec, ticks, now_ms=now_ms)
        return wake

    async def _handle_ticks(self, spec: ScheduleSpec, ticks: list[float], *, now_ms: int) -> None:
        """Fire what the misfire policy picks of the due ``ticks``, oldest first, moving the
        watermark after each; the others are handled without firing."""
        if spec.paused:
            log.info("schedule_tick_skipped", schedule=spec.name, tick=ticks[-1], reason="paused")
            await self._record(spec, ticks[-1], now_ms, "skipped")
            await self.store.set_watermark(spec.name, tick_ms(ticks[-1]))
            return
        plan = fire_plan(spec, ticks, now_ms / 1000, self.settings.scheduler.misfire_grace_s)
        if not plan:
            late = now_ms / 1000 - ticks[-1]
            reason = f"{len(ticks)} missed tick(s), the latest {late:.0f} s late; misfire=skip"
            log.info("schedule_tick_skipped", schedule=spec.name, tick=ticks[-1], reason=reason)
            await self._record(spec, ticks[-1], now_ms, "skipped", code=MISFIRED, reason=reason)
            await self.store.set_watermark(spec.name, tick_ms(ticks[-1]))
            return
        for tick in plan:
            if not self.leadership.is_leader:
                return
            if not await self._submit(spec, tick, missed=len(ticks) - len(plan), now_ms=now_ms):
                return  # deferred: this tick and the later ones wait for the next try
            await self.store.set_watermark(spec.name, tick_ms(tick))

    async def _record(
        self,
        spec: ScheduleSpec,
        tick: float,
        now_ms: int,
        outcome: TickOutcome,
        *,
        task_id: str | None = None,
        error: DtqError | None = None,
        code: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Keep the tick's outcome with the schedule (before its watermark moves, so a tick
        handled is never without its outcome)."""
        await self.store.record_tick(
            spec.name,
            LastTick(
                tick=datetime.fromtimestamp(tick, tz=UTC),
                at=datetime.fromtimestamp(now_ms / 1000, tz=UTC),
                outcome=outcome,
                task_id=task_id,
                code=error.code if error is not None else code,
                reason=error.message if error is not None else reason,
            ),
        )

    async def _submit(self, spec: ScheduleSpec, tick: float, *, missed: int, now_ms: int) -> bool:
        """Submit one tick; returns whether the tick is done with (fired or never fireable)."""
        delay = jitter_delay(spec, tick)
        request = TaskRequest(
            task=spec.task,
            args=spec.args,
            kwargs=spec.kwargs,
            queue=spec.queue,
            priority=spec.priority,
            delay_s=delay or None,  # None without jitter: the request of earlier versions
            idempotency_key=idempotency_key(spec.name, tick),
            metadata={"schedule": spec.name, "tick": tick_ms(tick)},
        )
        # The definition this process registered, if any: its attempt budget and timeout.
        definition = self.registry.get(spec.task) if self.registry is not None else None
        try:
            handle = await self.client.submit(request, defaults=definition)
        except QueueFullError as exc:
            self._retry_at[spec.name] = time.monotonic() + FULL_RETRY_S
            log.warning("schedule_tick_deferred", schedule=spec.name, tick=tick, error=exc.message)
            await self._record(spec, tick, now_ms, "deferred", error=exc)
            return False
        except IdempotencyConflictError as exc:
            # The tick was fired already, before the schedule was edited.
            log.info("schedule_tick_replayed", schedule=spec.name, tick=tick, error=exc.message)
            await self._record(spec, tick, now_ms, "replayed", task_id=exc.detail.get("task_id"))
            return True
        except ValidationError as exc:
            log.error(
                "schedule_tick_refused",
                schedule=spec.name,
                tick=tick,
                code=exc.code,
                error=exc.message,
            )
            await self._record(spec, tick, now_ms, "refused", error=exc)
            return True
        self._retry_at.pop(spec.name, None)
        if handle.created:
            self.metrics.schedule_fired.labels(schedule=spec.name).inc()
            log.info(
                "schedule_fired",
                schedule=spec.name,
                tick=tick,
                missed=missed,
                delay_s=delay,
                task_id=handle.id,
                queue=handle.queue,
                epoch=self.leadership.epoch,
            )
            await self._record(spec, tick, now_ms, "fired", task_id=handle.id)
        else:
            log.info("schedule_tick_replayed", schedule=spec.name, tick=tick, task_id=handle.id)
            await self._record(spec, tick, now_ms, "replayed", task_id=handle.id)
        return True
