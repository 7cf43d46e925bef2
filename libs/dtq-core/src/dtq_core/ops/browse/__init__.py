"""Recent tasks, newest first, for ``GET /api/v1/tasks`` (there is no task index to query).

The list is read from each queue's lifecycle event stream (``QueueKeys.events``), walked
backwards with ``XREVRANGE``. A submit writes one ``task.queued`` entry (or ``task.scheduled``
for a delayed task) holding the whole batch's ids; those entries are the list's rows, and the
task records are read with one pipelined ``HMGET`` per page. Several queues are merged newest
first by stream id (ties broken by queue name, then by position inside the entry).

What the list covers: only what the event streams retain, the last ~``DTQ_EVENTS_MAXLEN``
entries per queue, and only tasks whose record still exists (see the retention table in
``docs/task-lifecycle.md``). A page bounds its work: it examines at most ``SCAN_FACTOR × limit``
event entries and task ids; when it reaches that bound before ``limit`` matches, it returns
what it found (possibly nothing) and a ``next_cursor`` that continues the walk.

The promotion of a delayed or retrying task also writes a ``task.queued`` entry, with the same
fields as a submit's (a requeue's entry carries a ``reason`` and is skipped). A ``task.queued``
entry is taken as the submit only when it was written within ``SUBMIT_WINDOW_MS`` of the
record's creation and no older entry of that short span names the task; a page also never
lists a task twice.

The parts: :mod:`~dtq_core.ops.browse.listing` (:func:`list_tasks` and the pager),
:mod:`~dtq_core.ops.browse.walk` (the merged walk), :mod:`~dtq_core.ops.browse.filters` (the
filters and the submit check), :mod:`~dtq_core.ops.browse.cursor` and
:mod:`~dtq_core.ops.browse.summaries` (the summaries and a page's byte bound,
``summaries.PAGE_BYTES_MAX``).
"""

from dtq_core.ops.browse.cursor import Position, decode_cursor, encode_cursor
from dtq_core.ops.browse.filters import LIST_LIMIT_MAX, LOOKBACK_MAX, SUBMIT_WINDOW_MS
from dtq_core.ops.browse.listing import READ_CHUNK, SCAN_FACTOR, TaskPage, list_tasks
from dtq_core.ops.browse.summaries import PageBytes, read_summaries

__all__ = [
    "LIST_LIMIT_MAX",
    "LOOKBACK_MAX",
    "READ_CHUNK",
    "SCAN_FACTOR",
    "SUBMIT_WINDOW_MS",
    "PageBytes",
    "Position",
    "TaskPage",
    "decode_cursor",
    "encode_cursor",
    "list_tasks",
    "read_summaries",
]
