"""The events Python writes, one builder each (pure): the fields of an event-stream entry,
spelled by :class:`~dtq_core.messages.EventField` as :func:`~dtq_core.messages.expand_events`
reads them.

Task events are written inside the transitions by the Lua ``emit`` helper (``lua/_lib.lua``),
with the same field names; these are the events of operator actions and of the scheduler
leader, added with ``XADD`` next to the change they announce.
"""

from __future__ import annotations

from redis.typing import EncodableT, FieldT

from dtq_core.messages import EventField

EventEntry = dict[FieldT, EncodableT]
"""An event-stream entry's fields, as ``XADD`` takes them."""


def queue_state_event(*, paused: bool, actor: str) -> EventEntry:
    """``queue.paused`` or ``queue.resumed``, by ``actor`` (queue event stream)."""
    return {
        EventField.TYPE: "queue.paused" if paused else "queue.resumed",
        EventField.ACTOR: actor,
    }


def worker_stale_event(worker: str) -> EventEntry:
    """``worker.stale``: the scheduler leader removed ``worker`` from the registry (global
    event stream)."""
    return {EventField.TYPE: "worker.stale", EventField.STALE_WORKER: worker}
