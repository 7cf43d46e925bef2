"""A queue's groups: list them, pause and resume one, give one a weight
(``/queues/{q}/groups``, ``dtq group``; docs/flow-control.md, "Groups").

A group lives in one partition (producers place its tasks by its name), but a pause or a
weight is written to every partition, so that it holds wherever a growth puts the group's
next tasks.
"""

from __future__ import annotations

from typing import cast

import msgspec

from dtq_core.errors import ValidationError
from dtq_core.infra.connection import answering
from dtq_core.ops.admin.base import AdminPart, _check_actor
from dtq_core.protocol.keys import QueueKeys
from dtq_core.protocol.submit import check_group

MAX_WEIGHT = 100
GROUPS_PAGE_MAX = 1000


class GroupStats(msgspec.Struct, frozen=True, kw_only=True):
    """One group of a queue at one moment."""

    name: str
    waiting: int
    """Tasks waiting in the group for its turn or its limits."""
    queued: int
    """Tasks in the queue's streams, for the next worker with room."""
    running: int
    """Tasks running: the group's concurrency slots in use."""
    paused: bool = False
    weight: int = 1
    """Tasks of the group the queue's streams hold at once: its share of the turns."""


class GroupPage(msgspec.Struct, frozen=True, kw_only=True):
    groups: list[GroupStats]
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page (groups sorted by name); ``None``: the last."""


def parse_settings(value: str | None) -> tuple[int, bool]:
    """``(weight, paused)`` from a group's entry in ``gq:set`` (``None``: 1, not paused)."""
    if value is None:
        return 1, False
    return int(value.rstrip("p")), value.endswith("p")


def _weight(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise ValidationError(
            f"weight must be an integer from 1 to {MAX_WEIGHT}, got {value!r}", field="weight"
        )
    return value


class GroupSteering(AdminPart):
    """Lists a queue's groups and steers one."""

    @answering
    async def groups(self, queue: str, *, limit: int = 100, cursor: str | None = None) -> GroupPage:
        """A page of ``queue``'s groups, by name: those holding tasks, and those paused or
        given a weight.

        Raises:
            ValidationError: ``limit`` out of range.
            InvalidNameError, QueueNotFoundError: the queue is not known.
        """
        if not 1 <= limit <= GROUPS_PAGE_MAX:
            raise ValidationError(
                f"limit must be an integer from 1 to {GROUPS_PAGE_MAX}", field="limit"
            )
        parts = await self._partitions(queue)
        async with self.redis.pipeline(transaction=False) as pipe:
            for qk in parts:
                await pipe.smembers(qk.groups)
                await pipe.hkeys(qk.groups_settings)
            replies = await pipe.execute()
        names: set[str] = set()
        for reply in replies:
            names.update(cast(list[str], reply))
        page = sorted(n for n in names if cursor is None or n > cursor)[: limit + 1]
        stats = await self._stats(parts, page[:limit])
        return GroupPage(groups=stats, next_cursor=page[limit - 1] if len(page) > limit else None)

    async def _stats(self, parts: list[QueueKeys], names: list[str]) -> list[GroupStats]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                for qk in parts:
                    g = qk.group(name)
                    await pipe.zcard(f"{g}:w")
                    await pipe.scard(f"{g}:s")
                    await pipe.scard(f"{g}:r")
                await pipe.hget(parts[0].groups_settings, name)
            replies = iter(await pipe.execute())
        out: list[GroupStats] = []
        for name in names:
            counts = [0, 0, 0]
            for _ in parts:
                for i in range(3):
                    counts[i] += int(next(replies))
            weight, paused = parse_settings(next(replies))
            out.append(
                GroupStats(
                    name=name,
                    waiting=counts[0],
                    queued=counts[1],
                    running=counts[2],
                    paused=paused,
                    weight=weight,
                )
            )
        return out

    @answering
    async def group(self, queue: str, group: str) -> GroupStats:
        """One group of ``queue`` (all zero when it holds nothing).

        Raises:
            ValidationError: not a group name.
            InvalidNameError, QueueNotFoundError: the queue is not known.
        """
        check_group(group)
        return (await self._stats(await self._partitions(queue), [group]))[0]

    @answering
    async def set_group(
        self,
        queue: str,
        group: str,
        *,
        paused: bool | None = None,
        weight: int | None = None,
        actor: str = "cli",
    ) -> GroupStats:
        """Pause or resume ``group`` of ``queue``, or give it a weight (1 to 100, default 1):
        a paused group's waiting tasks stay waiting, its running tasks finish; a heavier group
        gets that many turns for another's one. Audited.

        Raises:
            ValidationError: not a group name, or a weight out of range (nothing changed).
            InvalidNameError, QueueNotFoundError: the queue is not known.
        """
        _check_actor(actor)
        check_group(group)
        if weight is not None:
            _weight(weight)
        if paused is None and weight is None:
            raise ValidationError("nothing to change: give paused or weight", field="paused")
        parts = await self._partitions(queue)
        for qk in reversed(parts):
            await self.client.scripts.group_set(qk, group, paused=paused, weight=weight)
        changes = []
        if paused is not None:
            changes.append(f"paused={str(paused).lower()}")
        if weight is not None:
            changes.append(f"weight={weight}")
        action = "group.pause" if paused else "group.resume" if paused is False else "group.weight"
        await self._audit(action, queue, actor, 0, detail=f"group={group} " + " ".join(changes))
        return (await self._stats(parts, [group]))[0]
