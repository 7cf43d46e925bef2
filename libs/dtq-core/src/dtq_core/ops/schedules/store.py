"""Schedules in Redis: definitions, watermarks and last ticks (three global hashes)."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
import redis.asyncio as aioredis
import structlog
from redis.exceptions import WatchError

from dtq_core.infra import replication
from dtq_core.infra.connection import answering, server_ms
from dtq_core.infra.transaction import Write
from dtq_core.ops import audit
from dtq_core.ops.schedules.spec import (
    AuditFor,
    LastTick,
    NextTick,
    ScheduleInfo,
    ScheduleNext,
    ScheduleSpec,
    _decoder,
    _encoder,
    _last_decoder,
    encode,
)
from dtq_core.ops.schedules.ticks import jitter_delay, next_fire_at, next_fires, zone
from dtq_core.ops.schedules.validation import validate
from dtq_core.protocol.keys import Keys

log = structlog.get_logger()


class ScheduleStore:
    """Schedule definitions, their watermarks and last ticks in Redis (three global hashes).

    Every call is a single-key command, a pipeline of them, or a transaction on the schedules
    hash whose companions follow it on a cluster, so it works on every topology.

    Args:
        redis: a client with ``decode_responses=True`` (what ``dtq_core.infra.connection`` makes).
        keys: the namespace's keys.
        max_payload_bytes: cap of a schedule's encoded args and kwargs on :meth:`put`.
    """

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, *, max_payload_bytes: int | None = None
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.max_payload_bytes = max_payload_bytes

    @answering
    async def put(self, spec: ScheduleSpec, *, audit_for: AuditFor | None = None) -> bool:
        """Create or replace a schedule.

        Args:
            audit_for: the audit entry to write with it
                (:func:`dtq_core.ops.audit.execute_audited`).

        Returns:
            True when it is new, False when it replaced one.

        Raises:
            ValidationError: ``spec`` breaks a rule; nothing was written.
        """
        validate(spec, max_payload_bytes=self.max_payload_bytes)
        entry = audit_for(spec) if audit_for is not None else None
        async with replication.pipeline(self.redis, transaction=True) as pipe:
            await pipe.hset(self.keys.schedules, spec.name, encode(spec))
            (added,) = await audit.execute_audited(pipe, self.redis, self.keys.audit, entry)
        return bool(added)

    @answering
    async def get(self, name: str) -> ScheduleSpec | None:
        """The schedule called ``name``, or None."""
        raw = await self.redis.hget(self.keys.schedules, name)
        return None if raw is None else _decoder.decode(raw)

    @answering
    async def list(self) -> builtins.list[ScheduleSpec]:
        """Every schedule, by name. A stored value that no longer decodes is logged and left
        out, so one bad entry cannot stop the others from firing."""
        stored = await self.redis.hgetall(self.keys.schedules)
        return [spec for _, spec in _decoded(stored)]

    @answering
    async def infos(self) -> builtins.list[ScheduleInfo]:
        """Every schedule with its last tick outcome and its next tick after now (Redis
        time), by name."""
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hgetall(self.keys.schedules)
            await pipe.hgetall(self.keys.schedules_last)
            stored, last = await pipe.execute()
        now = await self.now_ms() / 1000
        return [_info(spec, last.get(name), now) for name, spec in _decoded(stored)]

    @answering
    async def info(self, name: str) -> ScheduleInfo | None:
        """The schedule called ``name`` with its last tick outcome and its next tick after
        now (Redis time), or None."""
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hget(self.keys.schedules, name)
            await pipe.hget(self.keys.schedules_last, name)
            raw, last = await pipe.execute()
        if raw is None:
            return None
        return _info(_decoder.decode(raw), last, await self.now_ms() / 1000)

    @answering
    async def upcoming(self, name: str, count: int) -> ScheduleNext | None:
        """The next ``count`` ticks of schedule ``name`` after now (Redis time), computed by
        the scheduler's own tick function (paused or not), or None if there is no such
        schedule.

        Raises:
            ValueError: its cron expression never fires, or its zone is unknown here.
        """
        spec = await self.get(name)
        if spec is None:
            return None
        tz = zone(spec.timezone)
        ticks = next_fires(spec, await self.now_ms() / 1000, count)
        items = [
            NextTick(
                at=datetime.fromtimestamp(t, UTC),
                local=datetime.fromtimestamp(t, tz).isoformat(),
                delay_s=jitter_delay(spec, t),
            )
            for t in ticks
        ]
        return ScheduleNext(name=name, timezone=spec.timezone, paused=spec.paused, items=items)

    async def record_tick(self, name: str, last: LastTick) -> None:
        """Keep how the latest tick of ``name`` went (one field per schedule)."""
        await self.redis.hset(self.keys.schedules_last, name, _encoder.encode(last))

    @answering
    async def delete(self, name: str, *, audit_for: AuditFor | None = None) -> ScheduleSpec | None:
        """Remove a schedule, its watermark and its last tick; the removed schedule, or None if
        absent.

        Args:
            audit_for: the audit entry, from the removed schedule, to write in the same
                transaction.
        """
        return await self._changed(name, None, audit_for)

    @answering
    async def pause(self, name: str, *, audit_for: AuditFor | None = None) -> ScheduleSpec | None:
        """Stop a schedule from firing; returns the updated schedule, or None if absent."""
        return await self._changed(name, True, audit_for)

    @answering
    async def resume(self, name: str, *, audit_for: AuditFor | None = None) -> ScheduleSpec | None:
        """Let a paused schedule fire again from its next tick on (ticks that passed while it
        was paused are not fired); returns the updated schedule, or None if absent."""
        return await self._changed(name, False, audit_for)

    async def _changed(
        self, name: str, paused: bool | None, audit_for: AuditFor | None
    ) -> ScheduleSpec | None:
        """Pause (True), resume (False) or delete (None) schedule ``name`` and write its audit
        entry with it (:func:`dtq_core.ops.audit.execute_audited`). Read-modify-write under
        WATCH: a concurrent put() is not overwritten by a stale copy, and the entry describes
        what was changed.

        A deleted schedule's watermark and last tick go with it (in its transaction, or right
        after it on a cluster, where they are keys of other slots). A resumed schedule's
        watermark moves to now before it is resumed, so that ticks that passed while it was
        paused are skipped even on a cluster; a paused schedule fires nothing, so moving it
        first changes nothing if the resume does not happen."""
        keys = self.keys
        while True:
            async with replication.pipeline(self.redis, transaction=True) as pipe:
                try:
                    await pipe.watch(keys.schedules)
                    raw = await pipe.hget(keys.schedules, name)
                    if raw is None:
                        return None
                    spec = _decoder.decode(raw)
                    if paused is False:
                        await self.set_watermark(name, await self.now_ms())
                    if paused is not None:
                        spec = msgspec.structs.replace(spec, paused=paused)
                    pipe.multi()  # type: ignore[no-untyped-call]  # unannotated in redis-py
                    then: list[Write] = []
                    if paused is None:
                        await pipe.hdel(keys.schedules, name)
                        then = [
                            lambda p: p.hdel(keys.schedules_state, name),
                            lambda p: p.hdel(keys.schedules_last, name),
                        ]
                    else:
                        await pipe.hset(keys.schedules, name, encode(spec))
                    entry = audit_for(spec) if audit_for is not None else None
                    await audit.execute_audited(pipe, self.redis, keys.audit, entry, then=then)
                except WatchError:
                    continue
                return spec

    async def watermarks(self) -> dict[str, int]:
        """Every schedule's watermark in ms (see the module docstring)."""
        stored = await self.redis.hgetall(self.keys.schedules_state)
        return {str(name): int(value) for name, value in stored.items()}

    async def set_watermark(self, name: str, ms: int) -> None:
        await self.redis.hset(self.keys.schedules_state, name, ms)

    async def init_watermark(self, name: str, ms: int) -> int:
        """Set the watermark of a schedule seen for the first time (no-op if it has one).

        Returns:
            The watermark now stored.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hsetnx(self.keys.schedules_state, name, ms)
            await pipe.hget(self.keys.schedules_state, name)
            _, value = await pipe.execute()
        return int(value)

    async def now_ms(self) -> int:
        """Redis server time in ms: no host clock decides a tick (hosts' clocks differ). On a
        cluster, the clock of the schedules' master, so every tick is read on one clock."""
        return await server_ms(self.redis, self.keys.schedules)


def _info(spec: ScheduleSpec, last: str | None, now: float) -> ScheduleInfo:
    tick = None
    if last is not None:
        try:
            tick = _last_decoder.decode(last)
        except (msgspec.ValidationError, msgspec.DecodeError):
            tick = None  # written by another version: shown as no outcome yet
    fired = tick.tick if tick is not None and tick.outcome in {"fired", "replayed"} else None
    return ScheduleInfo(
        **msgspec.structs.asdict(spec),
        next_fire_at=next_fire_at(spec, now),
        last_fired_at=fired,
        last_tick=tick,
    )


def _decoded(stored: Mapping[Any, str | bytes]) -> Iterator[tuple[str, ScheduleSpec]]:
    """``(name, schedule)`` of every stored value, by name. A value that no longer decodes is
    logged and left out, so one bad entry cannot stop the others from firing."""
    for name in sorted(stored):
        try:
            yield name, _decoder.decode(stored[name])
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.error("schedule_skipped", schedule=name, reason="undecodable", error=str(exc))
