"""The leader's history duty: note every stored queue's depth (waiting, in flight, delayed) in
its per-minute history once a minute (:mod:`dtq_core.protocol.history`), the counts of which
the transitions keep themselves.

The notes land a second after each minute starts on Redis's clock; a leader that takes over
within a minute notes it again, which replaces the note (one per minute whatever happens).
"""

from __future__ import annotations

from dtq_core.infra.connection import server_ms
from dtq_core.ops.admin import Admin
from dtq_core.protocol.history import MINUTE_S

PAST_THE_MINUTE_MS = 1000
"""Where in a minute the note is taken: late enough that a clock read a little early still
lands in the new minute."""


class DepthRecorder:
    """One duty step: note every stored queue's depth, then sleep until the next minute."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.noted = 0
        """Queues noted by the last step."""

    async def step(self) -> float:
        self.noted = await self.admin.note_depths()
        now_ms = await server_ms(self.admin.redis)
        minute_ms = MINUTE_S * 1000
        return (minute_ms - now_ms % minute_ms + PAST_THE_MINUTE_MS) / 1000
