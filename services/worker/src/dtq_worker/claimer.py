"""Claiming: carries out the :class:`dtq_worker.claim_plan.ClaimPlan`'s decisions with the
claim script, blocking wake-up reads that each watch many idle queues
(:mod:`dtq_worker.wake_reads`), and reading back its own pending entries after a failed call.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, cast

import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.infra.cluster import hash_slot, is_cluster
from dtq_core.infra.connection import RETRYABLE, StreamReply
from dtq_core.infra.loops import sleep_or_stop
from dtq_core.names import logical_queue
from dtq_core.partitions import LAYOUT_TTL_S
from dtq_core.protocol.keys import GROUP, QueueKeys
from dtq_core.protocol.outcomes import ClaimState
from dtq_core.protocol.scripts import Claimed, Held
from dtq_worker.claim_plan import ClaimPlan, Delivered
from dtq_worker.context import WorkerContext
from dtq_worker.executor import Execution
from dtq_worker.partition_follower import PartitionFollower
from dtq_worker.running import RunningSet
from dtq_worker.wake_reads import QUEUES_PER_READ

log = structlog.get_logger()

WAKE_BLOCK_MS = 5000
"""The longest block of a wake-up read: a read of many queues (at least half as many as a
read may cover, :data:`~dtq_worker.wake_reads.QUEUES_PER_READ`) that finds nothing is sent
again this often.
Redis spends a few microseconds per stream on each (registering the blocked read on every
key), so 1,000 idle queues cost it about 2 ms a second at 5 s, 10 at 1 s. The blocking
client's socket timeout is set above it."""
SHORT_BLOCK_MS = 1000
"""The block of a read of a few queues (those that just had work, which merge into the
larger reads when their block ends with nothing) and of every read while reads are rationed."""
RECOVER_COUNT = 100
"""Entries per stream a worker takes back from its own PEL after a lost reply."""
NOGROUP_KEY = re.compile(r"'([^']+)'")
"""The stream a ``NOGROUP`` error names (``No such key '<stream>' or consumer group ...``)."""


def read_slots(ctx: WorkerContext) -> Callable[[str], int] | None:
    """Which queues may share a wake-up read: any on one Redis or a Sentinel's master
    (``None``); on a cluster only queues whose keys are in one slot (a multi-key command
    stays in one), so there a queue's slot is returned."""
    if not is_cluster(ctx.blocking):
        return None
    keys = ctx.keys
    return lambda queue: hash_slot(keys.queue(queue).prefix)


class Claimer:
    """Keeps ``concurrency + prefetch`` attempts held: claims a batch as soon as there is room
    for one, so the next batch is on its way while the current one runs. When every queue is
    empty it parks blocking wake-up reads on them (many queues to a read) and adopts what
    they deliver."""

    def __init__(
        self,
        ctx: WorkerContext,
        plan: ClaimPlan,
        running: RunningSet,
        *,
        defaults: str,
        held: Callable[[], dict[str, list[Held]]],
        room: asyncio.Event,
    ) -> None:
        """Args:
        defaults: the claim script's defaults argument (:func:`task_defaults`).
        held: every attempt the worker holds, by queue (never claimed again as adopted).
        room: set when a slot may have freed or a wake-up read returned.
        """
        self.ctx = ctx
        self.plan = plan
        self._running = running
        self._defaults = defaults
        self._held = held
        self._room = room
        self._readers: dict[int, asyncio.Task[None]] = {}
        """Wake-up read id -> the task that sends it."""
        self._streams: dict[str, dict[str, str]] = {}
        """Queue -> its streams, p9 first, each read from ``>`` (new entries)."""
        self._where: dict[str, tuple[str, int]] = {}
        """Stream -> its queue and priority."""
        self._stopping = False
        self._follower = PartitionFollower(ctx, plan, added=room.set)
        self._recover: dict[str, None] = {}
        """Queues whose wake-up read failed: their own pending entries are read back."""
        self._slot_of = read_slots(ctx)

    def is_parked(self, queue: str) -> bool:
        """Whether a wake-up read watches ``queue``."""
        return self.plan.reads.is_watched(queue)

    @property
    def parked_reads(self) -> int:
        """Wake-up reads parked now (each holds a connection of the blocking pool)."""
        return len(self._readers)

    async def run(self, stop: asyncio.Event) -> None:
        """Claim until ``stop`` is set; then nothing more starts from the buffer."""
        backoff = Backoff()
        stop_wait = asyncio.ensure_future(stop.wait())
        plan = self.plan
        running = self._running
        by_name = self.ctx.by_name
        try:
            while not stop.is_set():
                if self._recover:
                    await self._recover_reads()
                count = plan.room(running.running, running.prefetched)
                q = plan.next_queue(time.monotonic()) if count else None
                if q is None:
                    await self._wait_for_work(stop_wait, idle=count > 0)
                    continue
                qk = by_name[q]
                try:
                    await self._claim(qk, count)
                    backoff.reset()
                except RETRYABLE as exc:
                    self.ctx.metrics.redis_errors.labels("claim").inc()
                    delay = backoff.next()
                    log.warning("claim_failed", queue=q, error=str(exc), retry_in_s=delay)
                    await sleep_or_stop(stop, delay)
                    await self.recover_deliveries(qk)
        finally:
            stop_wait.cancel()
            self._stopping = True
            running.stop_starting()

    async def _wait_for_work(self, stop_wait: asyncio.Future[Any], *, idle: bool) -> None:
        """Nothing to claim right now: wait for room, a wake-up read, or an unpaused queue."""
        plan = self.plan
        if idle:
            for read in plan.reads.park():
                self._readers[read.rid] = asyncio.create_task(
                    self._wake_read(read.rid), name=f"wake-{read.rid}"
                )
        self._room.clear()
        timeout = plan.pause_wait(time.monotonic())
        room = asyncio.ensure_future(self._room.wait())
        try:
            await asyncio.wait(
                {room, stop_wait}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            room.cancel()
        plan.expire_pauses(time.monotonic())

    async def _wake_read(self, rid: int) -> None:
        """Block on the streams of the queues read ``rid`` watches; what arrives is delivered
        to us, so adopt it, and go on with the queues that got nothing.

        COUNT applies per stream: up to one entry per priority of each queue arrives
        (docs/performance.md, "Choices on the hot path"). Which queues the read covers, when it
        takes on others and when it ends is :class:`dtq_worker.wake_reads.WakeReads`'s to say;
        an entry that arrives while none covers its queue waits in its stream for the next.
        """
        reads = self.plan.reads
        backoff = Backoff()
        try:
            while not self._stopping:
                queues = reads.queues_of(rid)
                if not queues:
                    break
                streams: dict[Any, Any] = {}
                for q in queues:
                    streams.update(self._streams_of(q))
                try:
                    reply = cast(
                        StreamReply,
                        await self.ctx.blocking.xreadgroup(
                            GROUP,
                            self.ctx.consumer,
                            streams,
                            count=1,
                            block=self._block_ms(len(queues)),
                        ),
                    )
                    backoff.reset()
                except RETRYABLE as exc:
                    if "NOGROUP" in str(exc):
                        self._never_used(queues, str(exc))
                        continue
                    self.ctx.metrics.redis_errors.labels("wake").inc()
                    # Its reply may have been lost with entries delivered: the claim loop
                    # reads them back (it alone claims, so no claim of theirs is in flight).
                    self._recover.update(dict.fromkeys(queues))
                    self._room.set()
                    await asyncio.sleep(backoff.next())
                    continue
                if reply:
                    self._adopt_reply(reply)
                    reads.delivered(rid)
                    self._room.set()
                elif reads.timed_out(rid):
                    break
        finally:
            reads.ended(rid)
            self._readers.pop(rid, None)
            self._room.set()

    def _streams_of(self, queue: str) -> dict[str, str]:
        streams = self._streams.get(queue)
        if streams is None:
            qk = self.ctx.by_name[queue]
            streams = self._streams[queue] = dict.fromkeys(qk.streams_high_first, ">")
            for p, stream in enumerate(qk.streams):
                self._where[stream] = (queue, p)
        return streams

    def _adopt_reply(self, reply: StreamReply) -> None:
        """Hand each queue the entries a wake-up read delivered for it."""
        where = self._where
        by_queue: dict[str, list[Delivered]] = {}
        for stream, entries in reply:
            queue, prio = where[stream]
            by_queue.setdefault(queue, []).extend(
                (prio, eid, fields["t"]) for eid, fields in entries
            )
        for queue, delivered in by_queue.items():
            self.plan.adopt(queue, delivered)

    def _never_used(self, queues: list[str], error: str) -> None:
        """A read met a stream without its group: its queue has never been used (a claim
        creates the groups), or they were deleted. Claim from that queue (all the read's
        queues when the error names none) instead of reading it."""
        named = NOGROUP_KEY.search(error)
        found = self._where.get(named.group(1)) if named else None
        for q in [found[0]] if found else queues:
            self.plan.woken(q)
        self._room.set()

    def _block_ms(self, queues: int) -> int:
        """A wake-up read's block for ``queues`` queues: :data:`WAKE_BLOCK_MS` for a read of
        many, :data:`SHORT_BLOCK_MS` for a read of a few; while reads are rationed a random
        share of :data:`SHORT_BLOCK_MS` from half up, so that reads end spread out and a
        queue waiting for one (a busy queue found empty first) gets the next within
        milliseconds, not at the next second all the parked reads would otherwise end
        together."""
        if self.plan.reads.rationed:
            return random.randint(SHORT_BLOCK_MS // 2, SHORT_BLOCK_MS)  # noqa: S311 - jitter, not cryptography
        if queues * 2 >= self.plan.reads.per_read:
            return WAKE_BLOCK_MS
        return SHORT_BLOCK_MS

    async def _recover_reads(self) -> None:
        """Read back the pending entries of the queues whose wake-up read failed, those of
        one slot together, :data:`~dtq_worker.wake_reads.QUEUES_PER_READ` to a read."""
        queues, self._recover = list(self._recover), {}
        slot_of = self._slot_of
        by_slot: dict[int | None, list[QueueKeys]] = {}
        for q in queues:
            by_slot.setdefault(slot_of(q) if slot_of else None, []).append(self.ctx.by_name[q])
        for qks in by_slot.values():
            for i in range(0, len(qks), QUEUES_PER_READ):
                await self.recover_deliveries(*qks[i : i + QUEUES_PER_READ])

    async def recover_deliveries(self, *qks: QueueKeys) -> int:
        """Adopt the entries Redis delivered to this worker whose reply never came back.

        A wake-up read or a claim whose reply was lost (a dropped or half-open connection)
        leaves its entries pending under this consumer, unknown to the worker: without this
        they would wait for a reclaimer, a visibility timeout later. Read back from the
        worker's own PEL (``XREADGROUP`` from id 0, one read for all of ``qks``: queues of one
        slot) after such a failure, whatever it does not hold or know goes to the next claim,
        whose script starts a queued task from its entry, and reports again, with the same
        lease, an attempt a lost claim had started. Only the claim loop calls this, so no
        claim is in flight whose entries would look unknown; what the worker holds and knows
        is taken after the read, so an entry a wake-up read delivered meanwhile is not
        adopted twice. Returns how many were adopted."""
        streams: dict[Any, Any] = {}
        prio: dict[str, tuple[str, int]] = {}
        for qk in qks:
            for p, stream in enumerate(qk.streams):
                streams[stream] = "0"
                prio[stream] = (qk.queue, p)
        try:
            reply = cast(
                StreamReply,
                await self.ctx.blocking.xreadgroup(
                    GROUP, self.ctx.consumer, streams, count=RECOVER_COUNT
                ),
            )
        except RETRYABLE as exc:
            log.debug("recover_deliveries_failed", queues=len(qks), error=str(exc))
            return 0
        held = {h.entry_id for items in self._held().values() for h in items}
        found: dict[str, list[Delivered]] = {}
        for stream, entries in reply or []:
            queue, p = prio[stream]
            for eid, fields in entries:
                if eid not in held and fields and "t" in fields:
                    found.setdefault(queue, []).append((p, eid, fields["t"]))
        adopted = 0
        for queue, delivered in found.items():
            count = self.plan.adopt(queue, delivered)
            if count:
                adopted += count
                log.warning("lost_deliveries_recovered", queue=queue, count=count)
        return adopted

    async def _claim(self, qk: QueueKeys, count: int) -> None:
        q = qk.queue
        adopt = self.plan.take_adopted(q)
        try:
            state, wait_ms, claimed = await self._call_claim(qk, count, adopt)
        except BaseException:
            self.plan.return_adopted(q, adopt)
            raise
        self.plan.started([*(eid for _, eid, _ in adopt), *(c.entry_id for c in claimed)])
        m = self.ctx.metrics
        m.claims.labels(logical_queue(q)).inc()
        m.claimed.labels(logical_queue(q)).inc(len(claimed))
        paused = state is ClaimState.PAUSED
        if state is ClaimState.FULL or state is ClaimState.LIMITED:
            limit = "concurrency" if state is ClaimState.FULL else "rate"
            m.limit_hits.labels(logical_queue(q), limit).inc()
        self.plan.claimed(
            q,
            asked=count,
            got=len(claimed),
            paused=paused,
            now=time.monotonic(),
            full=state is ClaimState.FULL,
            limited_s=wait_ms / 1000 if state is ClaimState.LIMITED else None,
        )
        if paused:
            return
        admit = self._running.admit
        for c in claimed:
            admit(Execution(q, c, Held(c.rand, c.priority, c.entry_id, c.lease)))

    def _call_claim(
        self, qk: QueueKeys, count: int, adopt: Sequence[Delivered]
    ) -> Coroutine[Any, Any, tuple[ClaimState, int, list[Claimed]]]:
        """The claim script with this worker's arguments (``count`` 0: only hand back)."""
        s = self.ctx.settings
        return self.ctx.scripts.claim_limited(
            qk,
            consumer=self.ctx.consumer,
            count=count,
            events_maxlen=s.queues.events_maxlen,
            retention_ms=s.tasks.retention_s * 1000,
            defaults=self._defaults,
            adopt=adopt,
        )

    # -- partitions ----------------------------------------------------------------------------

    async def follow_partitions(self) -> int:
        """Claim from every partition of the served queues
        (:class:`dtq_worker.partition_follower.PartitionFollower`). Returns how many were
        added."""
        return await self._follower.follow()

    async def keep_following_partitions(self, stop: asyncio.Event) -> None:
        """:meth:`follow_partitions` every :data:`~dtq_core.partitions.LAYOUT_TTL_S`: a queue
        that grows is claimed from whole within about a second, without a restart."""
        while not await sleep_or_stop(stop, LAYOUT_TTL_S):
            try:
                await self.follow_partitions()
            except RETRYABLE as exc:
                log.debug("partitions_read_failed", error=str(exc))

    # -- draining ----------------------------------------------------------------------------

    async def stop_reading(self) -> None:
        """Cancel the parked wake-up reads and wait for them to end."""
        self._stopping = True
        readers = list(self._readers.values())
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)

    async def hand_back_adopted(self) -> None:
        """Give back the delivered entries no claim started (a claim of none that carries
        them puts them back in their queue for peers)."""
        for qk in self.ctx.queues:
            adopt = self.plan.take_adopted(qk.queue)
            if adopt:
                try:
                    await self._call_claim(qk, 0, adopt)
                except RETRYABLE as exc:
                    log.warning("hand_back_failed", queue=qk.queue, error=str(exc))
