"""The progress of a task ``dtq enqueue --wait`` waits for, on stderr: a one-line bar
redrawn in place on a terminal, one plain line per report otherwise.

Reports come from the task's ``task.progress`` events in its queue's event stream (what
``ctx.progress(value, message)`` writes), after the one already in its record."""

from __future__ import annotations

import shutil
import sys
from typing import TextIO, cast

import msgspec

from dtq_core.client import Client
from dtq_core.infra.connection import StreamReply, xread
from dtq_core.messages import EventField, Progress

BAR_WIDTH = 30
READ_BLOCK_MS = 1000
"""How long one read of the event stream blocks; the follow is cancelled once the task ends."""

_decode = msgspec.json.Decoder(Progress)


class ProgressView:
    """Shows each new progress report once (an unchanged one is not shown again)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.drawn = False
        self._last: Progress | None = None

    def show(self, progress: Progress) -> None:
        if progress == self._last:
            return
        self._last = progress
        percent = f"{progress.value * 100:3.0f}%"
        note = f" {progress.message}" if progress.message else ""
        if not self.tty:
            self.stream.write(f"progress {percent}{note}\n")
            self.stream.flush()
            return
        filled = round(progress.value * BAR_WIDTH)
        line = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {percent}{note}"
        width = shutil.get_terminal_size().columns - 1
        self.stream.write("\r" + line[:width] + "\x1b[K")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """End the bar's line, so what follows starts on its own."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


async def follow(client: Client, task_id: str, view: ProgressView) -> None:
    """Show the task's progress reports until cancelled."""
    qk, rand = client.reader.locate(task_id)
    # The tail first, then the record: a report written in between is read from the stream.
    tail = cast(list[tuple[str, dict[str, str]]], await client.redis.xrevrange(qk.events, count=1))
    position = tail[0][0] if tail else "0-0"
    record = await client.get(task_id)
    if record is not None and record.progress is not None:
        view.show(record.progress)
    while True:
        reply: StreamReply = await xread(
            client.redis, {qk.events: position}, count=100, block_ms=READ_BLOCK_MS
        )
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                position = entry_id
                if fields.get(EventField.TYPE) != "task.progress":
                    continue
                if rand in fields.get(EventField.IDS, "").split(","):
                    view.show(_decode.decode(fields[EventField.PROGRESS]))
