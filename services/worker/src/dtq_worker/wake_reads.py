"""Which empty queues the worker's blocking wake-up reads watch, pure (no Redis, no loop).

A queue a claim found empty waits for work in a blocking ``XREADGROUP ... BLOCK``. One read
covers the streams of many queues (``COUNT 1`` applies per stream, so it delivers at most one
entry per priority of each queue), at most :data:`QUEUES_PER_READ` of them, and on a Redis
Cluster only queues of one hash slot, since a multi-key command stays in one slot (usually each
queue alone there). Each read holds a connection of the blocking pool for its block, so at
most :attr:`WakeReads.max_parked` are parked at once.

- A read that delivers adopts what it got (the next claim of each queue starts it) and goes on
  at once with its other queues; a queue that just had work gets a read of its own when its
  claim finds it empty again, so a busy queue never makes a large read be sent again.
- A read whose block ended with nothing takes on the queues no read watches, then those of
  smaller reads that found nothing too, up to :data:`QUEUES_PER_READ`: the reads stay few and
  full whatever woke which queue. A read left with no queue ends. Two reads may cover a queue
  for a block while it moves; an entry is delivered to one of them only.
- When more reads would be needed than may be parked (a cluster's queues each in its own
  slot, or more queues than :data:`QUEUES_PER_READ` times the bound), the reads are rationed:
  a read that found nothing gives its queues up to those waiting longest, and the queues that
  just had work are watched first (docs/testing.md, G5).

:class:`dtq_worker.claim_plan.ClaimPlan` tells it which queues are empty;
:class:`dtq_worker.claimer.Claimer` parks and ends the reads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

QUEUES_PER_READ = 32
"""Queues one wake-up read covers at most (320 streams). Each time a read is sent, Redis
registers it on every key (0.25-1.5 ms for 320 streams on a loaded two-core machine) and the
worker packs every key (about 1 ms): cheap at the rate reads are sent (when one of their
queues gets work, or once a block), while a worker parks the reads of 1,000 queues in about
32 connections."""


@dataclass(slots=True, eq=False)
class WakeRead:
    """One wake-up read: the queues it watches (in one slot on a cluster)."""

    rid: int
    slot: int | None
    queues: dict[str, None] = field(default_factory=dict)
    """The queues it owns, in the order it reads them."""
    idle: bool = False
    """Its last block ended with nothing delivered: its queues may move to another read."""


class WakeReads:
    """The empty queues in the order they get a read, and the reads that watch them."""

    def __init__(
        self,
        *,
        max_parked: int | None = None,
        per_read: int = 1,
        slot_of: Callable[[str], int] | None = None,
    ) -> None:
        """Args:
        max_parked: reads parked at once at most; ``None``: no bound.
        per_read: queues one read covers at most.
        slot_of: the hash slot of a queue's keys on a cluster (only queues of one slot share a
            read); ``None``: any queues may.
        """
        self.max_parked = max_parked
        self.per_read = max(1, per_read)
        self._slot_of = slot_of
        self._slots: dict[str, int | None] = {}
        self.empty: OrderedDict[str, None] = OrderedDict()
        """Queues found empty, in the order they get a wake-up read: the queues that just had
        work first, then those whose read gave its place up, the longest waiting first."""
        self._empty_in: dict[int | None, int] = {}
        self._needed = 0
        """Reads it takes to watch every empty queue: per slot, its empty queues / per_read."""
        self._reads: dict[int, WakeRead] = {}
        self._owner: dict[str, int] = {}
        """Queue -> the read that watches it. Only empty queues have one."""
        self._next_rid = 0

    # -- the empty queues ----------------------------------------------------------------------

    def mark_empty(self, queue: str, *, first: bool) -> None:
        """``queue`` has nothing to claim: it waits for a read, at the front or the back."""
        if queue not in self.empty:
            self.empty[queue] = None
            self._count(queue, 1)
        self.empty.move_to_end(queue, last=not first)

    def unmark(self, queue: str) -> None:
        """``queue`` may have work (woken, or entries were delivered): no read watches it."""
        if queue in self.empty:
            del self.empty[queue]
            self._count(queue, -1)
            self._owner.pop(queue, None)

    def is_watched(self, queue: str) -> bool:
        return queue in self._owner

    @property
    def parked(self) -> int:
        """Reads parked (or about to be)."""
        return len(self._reads)

    @property
    def rationed(self) -> bool:
        """Whether more reads are needed to watch every empty queue than may be parked."""
        return self.max_parked is not None and self._needed > self.max_parked

    # -- the reads -----------------------------------------------------------------------------

    def park(self) -> list[WakeRead]:
        """New reads for the empty queues no read watches, in their order, at most
        :attr:`max_parked` reads in all."""
        waiting = len(self.empty) - len(self._owner)
        if waiting <= 0:
            return []
        free = (
            self.max_parked - len(self._reads) if self.max_parked is not None else len(self.empty)
        )
        open_reads: dict[int | None, WakeRead] = {}
        out: list[WakeRead] = []
        for q in self.empty:
            if not waiting:
                break  # the queue that just had work is first in line: usually at once
            if q in self._owner:
                continue
            waiting -= 1
            slot = self._slot(q)
            read = open_reads.get(slot)
            if read is None or len(read.queues) >= self.per_read:
                if len(out) >= free:
                    continue  # a queue of a slot with an open read may still join it
                read = open_reads[slot] = self._new_read(slot)
                out.append(read)
            self._take(read, q)
        return out

    def queues_of(self, rid: int) -> list[str]:
        """The queues read ``rid`` watches now (none: it ends)."""
        read = self._reads.get(rid)
        return list(self._prune(read)) if read is not None else []

    def delivered(self, rid: int) -> None:
        """Read ``rid`` delivered entries (adopted by their queues): it is not idle."""
        read = self._reads.get(rid)
        if read is not None:
            read.idle = False

    def timed_out(self, rid: int) -> bool:
        """Read ``rid``'s block ended with nothing; whether it ends now.

        Rationed, it gives its queues up to those waiting (at the back of the line, still
        empty) and ends. Otherwise it takes on queues (see :meth:`_fill`) and goes on.
        """
        read = self._reads.get(rid)
        if read is None:
            return True
        read.idle = True
        mine = self._prune(read)
        if not mine:
            return True
        if self.rationed and len(self._owner) < len(self.empty):
            for q in mine:
                del self._owner[q]
                self.empty.move_to_end(q)
            read.queues.clear()
            return True
        self._fill(read)
        return not read.queues

    def ended(self, rid: int) -> None:
        """Read ``rid`` is over: the queues it still watched wait for another."""
        read = self._reads.pop(rid, None)
        if read is None:
            return
        for q in read.queues:
            if self._owner.get(q) == rid:
                del self._owner[q]

    # -- internals ------------------------------------------------------------------------------

    def _fill(self, read: WakeRead) -> None:
        """Up to :attr:`per_read` queues of its slot: first the empty queues no read watches,
        then those of other reads that found nothing and watch no more queues than this one
        (the smallest first; each ends once left with none), so that reads merge instead of
        staying as many as queues once had work, and the fuller read is the one that stays."""
        room = self.per_read - len(read.queues)
        if room <= 0:
            return
        waiting = len(self.empty) - len(self._owner)
        for q in self.empty:
            if not (room and waiting):
                break
            if q not in self._owner:
                waiting -= 1
                if self._slot(q) == read.slot:
                    self._take(read, q)
                    room -= 1
        if not room:
            return
        mine = len(read.queues)
        donors = [
            (len(theirs), other)
            for other in self._reads.values()
            if other is not read and other.idle and other.slot == read.slot
            for theirs in [self._prune(other)]
            if 0 < len(theirs) <= mine
        ]
        for _, other in sorted(donors, key=lambda d: d[0]):
            if room == 0:
                return
            for q in list(other.queues)[:room]:
                del other.queues[q]
                self._take(read, q)
                room -= 1

    def _new_read(self, slot: int | None) -> WakeRead:
        self._next_rid += 1
        read = self._reads[self._next_rid] = WakeRead(self._next_rid, slot)
        return read

    def _take(self, read: WakeRead, queue: str) -> None:
        self._owner[queue] = read.rid
        read.queues[queue] = None

    def _prune(self, read: WakeRead) -> dict[str, None]:
        """Drop the queues the read no longer owns (woken, or taken by another read)."""
        owner = self._owner
        rid = read.rid
        gone = [q for q in read.queues if owner.get(q) != rid]
        for q in gone:
            del read.queues[q]
        return read.queues

    def _slot(self, queue: str) -> int | None:
        if self._slot_of is None:
            return None
        slot = self._slots.get(queue)
        if slot is None:
            slot = self._slots[queue] = self._slot_of(queue)
        return slot

    def _count(self, queue: str, delta: int) -> None:
        """Keep :attr:`_needed` as the empty queues of ``queue``'s slot change by ``delta``."""
        slot = self._slot(queue)
        per = self.per_read
        before = self._empty_in.get(slot, 0)
        after = before + delta
        self._needed += -(-after // per) - -(-before // per)
        if after:
            self._empty_in[slot] = after
        else:
            self._empty_in.pop(slot, None)
