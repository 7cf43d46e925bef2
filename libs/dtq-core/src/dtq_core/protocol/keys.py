"""The one place where Redis key names are built.

Every key that belongs to a queue carries the queue's hash tag (``dtq:{emails}:p5``), so every
script that touches one queue touches one Redis Cluster slot. Global keys (queue registry,
worker registry, leader lock, schedules, audit) are only ever used in single-key commands.

Key map (namespace ``dtq``, queue ``q``):

=========================  =============  =================================================
key                        type           bounded by
=========================  =============  =================================================
``dtq:{q}:p0`` .. ``p9``   stream         XACK + XTRIM MINID below the oldest pending entry
``dtq:{q}:t:<rand>``       hash           TTL: result or task retention; a DLQ trim
``dtq:{q}:delayed``        sorted set     removal on promotion or cancellation
``dtq:{q}:dlq``            stream         DTQ_DLQ_MAXLEN (a trimmed entry's record goes)
``dtq:{q}:idem:<sha256>``  string         TTL: DTQ_IDEM_TTL_S
``dtq:{q}:dedup:<sha256>`` string         TTL: the throttle window, else the task's record
``dtq:{q}:events``         stream         MAXLEN ~ DTQ_EVENTS_MAXLEN
``dtq:{q}:meta``           hash           one per queue (paused flag, leader epoch, version,
                                         configuration and the limits claims read)
``dtq:{q}:rate``           string         TTL: until the rate limit has no debt
``dtq:{q}:wfo``            sorted set     workflow steps ended and not yet advanced
                                         (removed once the leader advanced them)
``dtq:{q}:hist:<window>``  hash           TTL: a day and 11 minutes from its first write;
                                         deleted with the queue (ten minutes of per-minute
                                         counts and depths; :mod:`dtq_core.protocol.history`)
``dtq:{wf:<id>}:h``        hash           TTL: task retention, from the workflow's last change
``dtq:workflows``          sorted set     workflows by creation; entries older than the
                                         task retention are removed at each submit
``dtq:workflows:pending``  sorted set     workflows whose start or end the leader has yet to
                                         carry out (removed once done)
``dtq:queues``             set            at most DTQ_MAX_QUEUES members (the queue registry)
``dtq:workers``            sorted set     stale workers removed by the scheduler
``dtq:worker:<id>``        hash           TTL: three heartbeat intervals (with its routes)
``dtq:leader``             string         TTL: the leader lease
``dtq:leader:epoch``       string         one counter
``dtq:schedules``          hash           one field per schedule
``dtq:schedules:state``    hash           one field per schedule
``dtq:schedules:last``     hash           one field per schedule
``dtq:events``             stream         MAXLEN ~ DTQ_EVENTS_MAXLEN (global events)
``dtq:audit``              stream         MAXLEN ~ 100000
=========================  =============  =================================================

Partition k (1..N-1) of a partitioned queue ``q`` is the stored queue ``q~k``, with every
queue key above under its own hash tag (``dtq:{q~3}:p5``): its own slot
(:mod:`dtq_core.partitions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from dtq_core.names import PRIORITIES

TEST_CLOCK = "dtq:test:clock"
"""The test kit's clock (:mod:`dtq_core.testing`): microseconds added to Redis time. It exists
only in the databases of users' test suites, whatever the namespace."""

GROUP = "workers"
"""The one consumer group of every priority stream (trimming below the oldest pending id is
only safe with exactly one group)."""


@dataclass(frozen=True, slots=False)
class QueueKeys:
    """Every key of one queue. All of them hash to the queue's slot."""

    ns: str
    queue: str

    @cached_property
    def prefix(self) -> str:
        """``dtq:{q}:``; scripts build task keys as ``prefix .. 't:' .. rand``."""
        return f"{self.ns}:{{{self.queue}}}:"

    @cached_property
    def streams(self) -> tuple[str, ...]:
        """The priority streams, index = priority (``streams[9]`` is claimed first)."""
        return tuple(f"{self.prefix}p{p}" for p in range(PRIORITIES))

    @cached_property
    def streams_high_first(self) -> tuple[str, ...]:
        return tuple(reversed(self.streams))

    def task(self, rand: str) -> str:
        return f"{self.prefix}t:{rand}"

    @cached_property
    def task_prefix(self) -> str:
        return f"{self.prefix}t:"

    @cached_property
    def delayed(self) -> str:
        return f"{self.prefix}delayed"

    @cached_property
    def dlq(self) -> str:
        return f"{self.prefix}dlq"

    def idem(self, key_hash: str) -> str:
        return f"{self.prefix}idem:{key_hash}"

    def dedup(self, key_hash: str) -> str:
        """The task a dedup key holds (``dtq:{q}:dedup:<sha256>``; lua/submit.lua)."""
        return f"{self.prefix}dedup:{key_hash}"

    @cached_property
    def idem_prefix(self) -> str:
        return f"{self.prefix}idem:"

    @cached_property
    def events(self) -> str:
        return f"{self.prefix}events"

    @cached_property
    def meta(self) -> str:
        return f"{self.prefix}meta"

    @cached_property
    def rate(self) -> str:
        """The rate limit's state: the next start's theoretical arrival time (µs, GCRA)."""
        return f"{self.prefix}rate"

    def group(self, group: str) -> str:
        """The prefix of one group's keys: ``:w`` its waiting tasks (a sorted set), ``:s`` those
        in the streams, ``:r`` those running (sets of rands), ``:rate`` its GCRA state
        (lua/_lib.lua, "Groups")."""
        return f"{self.prefix}g:{group}"

    @cached_property
    def groups(self) -> str:
        """The set of groups that hold tasks."""
        return f"{self.prefix}gq:all"

    @cached_property
    def groups_waiting(self) -> str:
        """The count of tasks waiting in groups (the depth counts them)."""
        return f"{self.prefix}gq:wait"

    @cached_property
    def groups_settings(self) -> str:
        """Group -> its settings: ``<weight>``, with ``p`` after it while paused (absent: weight
        1, not paused)."""
        return f"{self.prefix}gq:set"

    @cached_property
    def workflow_outbox(self) -> str:
        """Workflow steps of this queue that ended and whose workflow the leader has not
        advanced yet: ``<rand>|<workflow id>:<step>`` by ms (lua/_lib.lua, "Workflows")."""
        return f"{self.prefix}wfo"

    def history(self, window: int) -> str:
        """Ten minutes of the queue's per-minute history: window ``w`` holds the minutes that
        start at ``w * 600`` s to ``w * 600 + 540`` s since the epoch (lua/_lib.lua, "Per-minute
        history"; fields in :mod:`dtq_core.protocol.history`)."""
        return f"{self.prefix}hist:{window}"

    @cached_property
    def groups_due(self) -> str:
        """Groups their rate holds -> when they may start again (ms, Redis time)."""
        return f"{self.prefix}gq:due"


@dataclass(frozen=True)
class Keys:
    """Global keys of a namespace, and a factory for queue keys."""

    ns: str = "dtq"

    def queue(self, name: str) -> QueueKeys:
        return QueueKeys(self.ns, name)

    @property
    def queues(self) -> str:
        return f"{self.ns}:queues"

    @property
    def workers(self) -> str:
        return f"{self.ns}:workers"

    def worker(self, worker_id: str) -> str:
        return f"{self.ns}:worker:{worker_id}"

    @property
    def leader(self) -> str:
        return f"{self.ns}:leader"

    @property
    def leader_epoch(self) -> str:
        return f"{self.ns}:leader:epoch"

    @property
    def schedules(self) -> str:
        return f"{self.ns}:schedules"

    @property
    def schedules_state(self) -> str:
        return f"{self.ns}:schedules:state"

    @property
    def schedules_last(self) -> str:
        """Each schedule's last tick outcome (JSON :class:`dtq_core.ops.schedules.LastTick`)."""
        return f"{self.ns}:schedules:last"

    @property
    def events(self) -> str:
        return f"{self.ns}:events"

    @property
    def audit(self) -> str:
        return f"{self.ns}:audit"

    def workflow(self, workflow_id: str) -> str:
        """One workflow's hash (``dtq:{wf:<id>}:h``: its own slot; fields in
        :mod:`dtq_core.protocol.workflows`)."""
        return f"{self.ns}:{{wf:{workflow_id}}}:h"

    @property
    def workflows(self) -> str:
        """Every workflow's id by its creation time (ms)."""
        return f"{self.ns}:workflows"

    @property
    def workflows_pending(self) -> str:
        """Workflows whose start or end the leader has yet to carry out (publish its events,
        cancel its steps), by when that was asked (ms)."""
        return f"{self.ns}:workflows:pending"

    @property
    def workflow_channel(self) -> str:
        """Pub/sub channel telling the leader what to drive: a queue name (its workflow outbox
        has entries) or ``wf:<id>`` (a workflow to kick)."""
        return f"{self.ns}:wf"

    @property
    def cancel_channel(self) -> str:
        """Pub/sub channel on which cancellation of running tasks is announced."""
        return f"{self.ns}:cancel"
