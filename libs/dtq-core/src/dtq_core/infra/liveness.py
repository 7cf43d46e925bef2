"""Liveness of a long-running service, as ``GET /health`` on its metrics port reports it.

The metrics listener runs in a thread of its own, so it answers while the event loop is stuck:
that ``/metrics`` answers proves only that the process exists. ``/health`` answers from what
only a working loop produces:

- ``loop``: a stamp the loop writes every :data:`TICK_S` (:meth:`Liveness.ticking`); a handler
  that blocks the loop (a ``time.sleep`` in an ``async def``) stops it.
- one Redis check (``heartbeat`` on the worker, ``redis`` on the scheduler): the time the last
  successful round trip was sent, read from the part that makes it (:meth:`Liveness.watch`).

Both are ``time.monotonic()`` values written by the loop and read by the listener's thread
(a float attribute is read whole under the GIL: no lock). Before the first successful round
trip the Redis check passes for :data:`START_GRACE_S`, so a slow start, or a Redis that comes
up after the service, does not fail the probe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

TICK_S = 0.5
"""How often the loop stamps that it runs (a wake-up every half second costs nothing)."""
MIN_LOOP_MAX_AGE_S = 2.0
"""The loop check never fails below this (four ticks): a full garbage collection or a
module imported late may hold the loop for a moment without anything being wrong."""
START_GRACE_S = 30.0
"""How long after start a service that has not yet completed a Redis round trip still counts
as healthy (compose's ``start_period`` is 20 s; this covers orchestrators without one)."""

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Check:
    """One liveness check as ``/health`` reports it."""

    name: str
    ok: bool
    age_s: float | None
    """Seconds since the evidence was last seen; ``None`` before the first success."""
    max_age_s: float
    starting: bool = False
    """No success yet, within the start-up grace."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "age_s": None if self.age_s is None else round(self.age_s, 3),
            "max_age_s": round(self.max_age_s, 3),
        }
        if self.starting:
            out["starting"] = True
        return out


@dataclass(frozen=True, slots=True)
class Report:
    """The answer of ``/health``: 200 when every check passes, else 503; the JSON body names
    each check with its age and bound, and lists the failed ones."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def status(self) -> int:
        return 200 if self.ok else 503

    def body(self) -> bytes:
        out: dict[str, Any] = {"status": "ok" if self.ok else "unhealthy"}
        if not self.ok:
            out["failed"] = [c.name for c in self.checks if not c.ok]
        out["checks"] = {c.name: c.as_dict() for c in self.checks}
        return msgspec.json.encode(out)


class HealthReport(Protocol):
    """What ``/health`` answers: :class:`Report`, or a supervisor's report over its worker
    processes (``dtq-worker --processes``)."""

    @property
    def ok(self) -> bool: ...

    def body(self) -> bytes: ...


class HealthSource(Protocol):
    """What a metrics port asks for ``/health`` (from its listener's thread)."""

    def report(self) -> HealthReport: ...


class Liveness:
    """The evidence ``/health`` reads, and the loop's ticker that writes half of it.

    Args:
        check: the Redis check's name (``heartbeat``, ``redis``).
        max_age_s: its bound: older than this, the check fails.
        clock: ``time.monotonic`` (tests pass their own).
        start_grace_s: how long no success yet is not a failure.
    """

    def __init__(
        self,
        check: str,
        *,
        max_age_s: float,
        clock: Clock = time.monotonic,
        start_grace_s: float = START_GRACE_S,
    ) -> None:
        self.check = check
        self.max_age_s = max_age_s
        self.loop_max_age_s = max(MIN_LOOP_MAX_AGE_S, max_age_s)
        """A loop held longer than the Redis bound has starved the round trips as long."""
        self.start_grace_s = max(start_grace_s, max_age_s)
        self._clock = clock
        self.started = clock()
        self.last_tick = self.started
        self._last_ok: Callable[[], float | None] = lambda: None

    def watch(self, last_ok: Callable[[], float | None]) -> None:
        """Read the Redis check's evidence from ``last_ok``: the monotonic time the last
        successful round trip was sent, ``None`` before the first."""
        self._last_ok = last_ok

    def tick(self) -> None:
        self.last_tick = self._clock()

    @asynccontextmanager
    async def ticking(self) -> AsyncIterator[None]:
        """Stamp :attr:`last_tick` every :data:`TICK_S` from the running loop, for the
        duration of the block."""

        async def run() -> None:
            while True:
                self.tick()
                await asyncio.sleep(TICK_S)

        task = asyncio.create_task(run(), name="dtq-liveness")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait([task])

    def report(self) -> Report:
        """The checks as of now (called from the listener's thread)."""
        now = self._clock()
        loop_age = now - self.last_tick
        loop = Check("loop", loop_age <= self.loop_max_age_s, loop_age, self.loop_max_age_s)
        last = self._last_ok()
        if last is None:
            starting = now - self.started <= self.start_grace_s
            redis = Check(self.check, starting, None, self.max_age_s, starting=starting)
        else:
            age = now - last
            redis = Check(self.check, age <= self.max_age_s, age, self.max_age_s)
        return Report((loop, redis))
