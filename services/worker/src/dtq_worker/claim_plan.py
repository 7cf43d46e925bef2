"""The claim decision, pure (no Redis, no loop): how many to claim, from which queue next, and
which queues wait for work in a wake-up read.

The room left under ``concurrency + prefetch``, round-robin over the queues served, skipping
queues found empty or paused; the entries Redis delivered to this worker outside a claim
(wake-up reads, lost replies), which the next claim of their queue starts; and the empty
queues, which :class:`dtq_worker.wake_reads.WakeReads` shares out among the wake-up reads.
:class:`dtq_worker.claimer.Claimer` carries the decisions out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from dtq_worker.wake_reads import WakeReads

PAUSED_RECHECK_S = 1.0

FULL_RECHECK_S = 0.25
"""A queue at its concurrency limit is claimed from again after this long, or as soon as one
of this worker's own attempts ends (which frees a slot)."""

BLOCKING_SPARE = 4
"""Connections of the blocking pool no wake-up read may take: the cancellation listener's, and
room for reading back the worker's own pending entries after a lost reply."""


def max_parked_reads(max_connections: int) -> int:
    """Wake-up reads parked at once, at most: each holds a blocking-pool connection for its
    whole block, so a worker parking more reads than the pool has connections would stop
    claiming (docs/testing.md, G5)."""
    return max(1, max_connections - BLOCKING_SPARE)


RECENT_STARTS = 10_000
"""Entry ids of the latest claims' entries a worker remembers (:meth:`ClaimPlan.started`): a
copy of one can only come from a read answered within milliseconds of that claim."""

Delivered = tuple[int, str, str]
"""An entry delivered to this worker outside a claim: ``(priority, entry id, task rand)``."""


class ClaimPlan:
    """What to claim next, decided from counts and what the last claims found."""

    def __init__(
        self,
        queues: Sequence[str],
        *,
        concurrency: int,
        batch: int,
        capacity: int,
        max_parked: int | None = None,
        per_read: int = 1,
        slot_of: Callable[[str], int] | None = None,
    ):
        """Args:
        queues: the queues served, in round-robin order.
        concurrency: handlers that may run at once.
        batch: the most one claim asks for.
        capacity: attempts held at most (``concurrency`` + prefetch).
        max_parked: wake-up reads parked at once at most (each holds a connection of the
            blocking pool); ``None``: no bound.
        per_read: queues one wake-up read covers at most.
        slot_of: on a cluster, the hash slot of a queue's keys: only queues of one slot
            share a read (``None``: any queues may).
        """
        self.queues = list(queues)
        self.concurrency = concurrency
        self.batch = batch
        self.capacity = capacity
        self._adopted: dict[str, list[Delivered]] = {q: [] for q in self.queues}
        self._in_claim: set[str] = set()
        """Entry ids carried by the claim in flight."""
        self._started: OrderedDict[str, None] = OrderedDict()
        """Entry ids of the latest claims that answered (at most :data:`RECENT_STARTS`)."""
        self.reads = WakeReads(max_parked=max_parked, per_read=per_read, slot_of=slot_of)
        """The empty queues and the wake-up reads that watch them."""
        self._paused_until: dict[str, float] = {}
        """Queues not claimed from until then: paused, at a limit."""
        self._full: set[str] = set()
        self._groups: list[list[str]] = [[q] for q in self.queues]
        """The served queues in round-robin order, each with its partitions (partition 0,
        the queue itself, first): a queue's turn goes to its next partition in turn, so a
        partitioned queue gets the same share as any other and no partition is starved."""
        self._group_of: dict[str, int] = {q: i for i, q in enumerate(self.queues)}
        self._pos: dict[str, int] = dict.fromkeys(self.queues, 0)
        """A queue's place in its group (partition k at k)."""
        self._inner: list[int] = [0] * len(self._groups)
        self._rr = 0
        self._active: set[str] = set(self.queues)
        """The queues not found empty (every queue with delivered entries among them):
        :meth:`next_queue` looks at these only, so a worker serving a thousand idle queues
        does not walk them all at every turn."""

    def add_partition(self, queue: str, partition: str) -> bool:
        """Claim from ``partition`` of the served ``queue`` too; False if it was known."""
        if partition in self._adopted:
            return False
        group = self._group_of[queue]
        self._pos[partition] = len(self._groups[group])
        self._groups[group].append(partition)
        self._group_of[partition] = group
        self.queues.append(partition)
        self._adopted[partition] = []
        self._active.add(partition)
        return True

    def room(self, running: int, prefetched: int) -> int:
        """How many to claim now (0: not yet).

        Full batches as long as there is room for one: a round trip costs more than the
        tasks it carries when those are short. Below a batch, claim only when at least half
        the slots would otherwise sit idle (with a prefetch smaller than a batch).
        """
        room = self.capacity - running - prefetched
        if room >= self.batch:
            return self.batch
        idle = self.concurrency - running
        if not prefetched and idle * 2 >= self.concurrency:
            return min(room, idle)
        return 0

    def next_queue(self, now: float) -> str | None:
        """The next queue in turn that may have work: one with delivered entries, or one
        neither found empty nor paused (``now``: :func:`time.monotonic`). A partitioned
        queue's turn goes to the next of its partitions that may have work."""
        groups = self._groups
        n = len(groups)
        best: tuple[int, int, str] | None = None
        for q in self._active:
            if not self._adopted[q] and self._paused_until.get(q, 0) > now:
                continue
            g = self._group_of[q]
            turn = ((g - self._rr) % n, (self._pos[q] - self._inner[g]) % len(groups[g]), q)
            if best is None or turn < best:
                best = turn
        if best is None:
            return None
        q = best[2]
        g = self._group_of[q]
        self._inner[g] = (self._pos[q] + 1) % len(groups[g])
        self._rr = (g + 1) % n
        return q

    def claimed(
        self,
        queue: str,
        *,
        asked: int,
        got: int,
        paused: bool,
        now: float,
        full: bool = False,
        limited_s: float | None = None,
    ) -> None:
        """Learn from a claim's answer: a paused queue is skipped for
        :data:`PAUSED_RECHECK_S`; one at its concurrency limit (``full``) for
        :data:`FULL_RECHECK_S` or until :meth:`slot_freed`; a rate-limited one until its next
        start is due (``limited_s``); one that gave less than asked is empty until woken."""
        if paused:
            self._paused_until[queue] = now + PAUSED_RECHECK_S
        elif limited_s is not None:
            self._paused_until[queue] = now + limited_s
        elif full:
            self._paused_until[queue] = now + FULL_RECHECK_S
            self._full.add(queue)
        elif got < asked and not self._adopted[queue]:
            # It was claimed from because it had work: when reads are rationed it is watched
            # first (a busy queue finds itself empty between two tasks). Entries a read
            # delivered meanwhile make it claimable instead.
            self.reads.mark_empty(queue, first=True)
            self._active.discard(queue)

    def woken(self, queue: str) -> None:
        """Something may have arrived in ``queue``: claim from it again."""
        self.reads.unmark(queue)
        self._active.add(queue)

    def pause_wait(self, now: float) -> float | None:
        """Seconds until the first paused queue is due for a recheck (``None``: none is)."""
        if not self._paused_until:
            return None
        return max(0.0, min(self._paused_until.values()) - now)

    def expire_pauses(self, now: float) -> None:
        for q, until in list(self._paused_until.items()):
            if until <= now:
                del self._paused_until[q]
                self._full.discard(q)

    def slot_freed(self) -> None:
        """One of this worker's attempts ended: the queues at their concurrency limit may
        have room now."""
        for q in self._full:
            self._paused_until.pop(q, None)
        self._full.clear()

    def is_paused(self, queue: str) -> bool:
        """Whether the last claim of ``queue`` found it paused (and the recheck is not due)."""
        return queue in self._paused_until

    # -- entries delivered outside a claim ---------------------------------------------------

    def adopt(self, queue: str, entries: Sequence[Delivered]) -> int:
        """Entries Redis delivered to this worker: the next claim of ``queue`` starts them.

        An entry this worker knows already is dropped: adopted and not claimed yet, carried
        by the claim in flight, or handed to a claim that answered (:meth:`started`). Reading
        back the worker's own pending entries (after a lost reply) can meet an entry a wake-up
        read delivered at the same moment; handed to a claim twice, the second would report
        the attempt the first started again, and the worker would run it twice. Returns how
        many were new."""
        known = self._known
        fresh = [e for e in entries if not known(queue, e[1])]
        if fresh:
            self._adopted[queue].extend(fresh)
            self.reads.unmark(queue)
            self._active.add(queue)
        return len(fresh)

    def _known(self, queue: str, entry_id: str) -> bool:
        return (
            entry_id in self._in_claim
            or entry_id in self._started
            or any(eid == entry_id for _, eid, _ in self._adopted[queue])
        )

    def known_ids(self, queue: str) -> set[str]:
        """The entries of ``queue`` this worker knows of outside what it holds: adopted, in
        the claim in flight, or lately handed to a claim that answered."""
        return {eid for _, eid, _ in self._adopted[queue]} | self._in_claim | set(self._started)

    def take_adopted(self, queue: str) -> list[Delivered]:
        """The adopted entries of ``queue``, for the claim about to be sent."""
        adopted, self._adopted[queue] = self._adopted[queue], []
        self._in_claim.update(eid for _, eid, _ in adopted)
        return adopted

    def return_adopted(self, queue: str, entries: list[Delivered]) -> None:
        """A claim carrying ``entries`` failed: they are still ours in the PEL; try them
        first next time."""
        self._in_claim.difference_update(eid for _, eid, _ in entries)
        self._adopted[queue] = entries + self._adopted[queue]

    def started(self, entry_ids: Sequence[str]) -> None:
        """A claim answered: the entries it carried and those it started are settled (held
        by the worker, or given back by the claim) and never to be adopted again."""
        self._in_claim.difference_update(entry_ids)
        recent = self._started
        for eid in entry_ids:
            recent[eid] = None
        while len(recent) > RECENT_STARTS:
            recent.popitem(last=False)
