"""The fenced leader lease: which replica leads, under which epoch, and for how long.

Protocol (one global key, single-key commands only):

- A follower reads the lock (one pipelined GET + PTTL) every scheduler tick, or until the
  lock's remaining TTL runs out if that is sooner, so it takes over right after a dead
  leader's lease expires or a stopping leader releases it.
- When the lock is absent, the follower takes a new epoch (``INCR`` of the epoch counter) and
  tries ``SET NX PX`` with the token ``<epoch>:<replica id>``. Only one replica wins; a loser's
  epoch is simply never used.
- The leader renews every third of the TTL with compare-and-``PEXPIRE`` (allowed even when
  Redis is out of memory, where ``SET`` is refused). A renewal that finds another token steps
  down at once; renewals that keep failing step down when the TTL has run out locally.
- The local view of the lease ends TTL seconds after the renewal was *sent*, so it never
  outlives the key in Redis.
- The epoch travels with every promotion and each queue keeps the highest epoch it has seen,
  so a deposed leader's promotion is refused (:meth:`Leadership.deposed`).
- On a clean stop the leader deletes the lock (compare-and-delete) so a follower takes over
  without waiting for the TTL.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time

import redis.asyncio as aioredis
import structlog

from dtq_core.errors import StaleLeaderError
from dtq_core.infra.backoff import Backoff
from dtq_core.infra.connection import RETRYABLE
from dtq_core.infra.loops import raise_if_cancelled, run_supervised, wait_any
from dtq_core.protocol.keys import Keys
from dtq_core.protocol.outcomes import LeaseMode
from dtq_core.protocol.scripts import Scripts
from dtq_scheduler_leader.metrics import SchedulerMetrics

log = structlog.get_logger()

RETRY_BASE_S = 0.05
RETRY_MAX_S = 2.0
"""The lease and every duty retry Redis quickly at first, and never less often than every
2 s, so a Redis that comes back is used again within 2 s."""


def retry_backoff(max_s: float = RETRY_MAX_S) -> Backoff:
    """The backoff of the lease and the duties: each delay is uniform in [c/2, c], so replicas
    that failed together do not retry in lockstep."""
    return Backoff(base=RETRY_BASE_S, cap=max_s, jitter=0.5)


MIN_POLL_S = 0.005
"""Shortest follower sleep: the lock's PTTL is in whole ms, and a follower that wakes a
little early just reads it again."""


def default_replica_id() -> str:
    """``<host>-<pid>-<random>``: unique per process, readable in the lock's value."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Leadership:
    """This replica's side of the leader lease.

    ``run`` acquires and renews the lease; the duties ask :meth:`wait_leading` whether to
    act and read :attr:`epoch` to fence what they do.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        scripts: Scripts,
        keys: Keys,
        *,
        ttl_s: float,
        metrics: SchedulerMetrics,
        poll_s: float | None = None,
        replica_id: str | None = None,
    ) -> None:
        self.redis = redis
        self.scripts = scripts
        self.keys = keys
        self.ttl_s = ttl_s
        self.ttl_ms = max(1, round(ttl_s * 1000))
        self.metrics = metrics
        self.poll_s = min(poll_s or ttl_s / 3, ttl_s / 3)
        self.replica_id = replica_id or default_replica_id()
        self.epoch = 0
        self._token: str | None = None
        self._last_token: str | None = None
        self._valid_until = 0.0
        self._leading = asyncio.Event()
        self.last_ok: float | None = None
        """When the last lease call that worked was sent (``time.monotonic()``), leader or
        follower: the scheduler's ``/health`` reads it."""

    @property
    def token(self) -> str | None:
        """The lock value while this replica leads."""
        return self._token

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the lease now (by its own, conservative, clock)."""
        return self._token is not None and time.monotonic() < self._valid_until

    async def wait_leading(self, stop: asyncio.Event) -> bool:
        """Wait until this replica leads (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            raise_if_cancelled()
            if self._leading.is_set():
                if self.is_leader:
                    return True
                self.step_down("lease_expired")
                continue
            await wait_any(self._leading, stop)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        """Acquire and renew the lease until ``stop`` is set (``release`` is separate, so the
        caller can let its duties finish first)."""
        await run_supervised(
            self._lease_step,
            stop=stop,
            backoff=retry_backoff(min(RETRY_MAX_S, self.ttl_s / 6)),
            on_error=self._lease_failed,
        )

    async def _lease_step(self) -> float:
        sent = time.monotonic()
        async with asyncio.timeout(self._call_timeout()):
            delay = await (self.renew() if self._token else self.try_acquire())
        self.last_ok = sent
        return delay

    def _lease_failed(self, _exc: Exception, delay: float) -> None:
        """A lease call failed (its own deadline included: ``TimeoutError`` is retryable)."""
        self.metrics.redis_errors.labels("lease").inc()
        log.warning(
            "leader_lease_failed",
            leader=self._token is not None,
            retry_in_s=round(delay, 3),
            exc_info=True,
        )
        if self._token is not None and not self.is_leader:
            self.step_down("lease_expired")

    def _call_timeout(self) -> float:
        # A renewal that is still in flight when the lease ends locally is worthless.
        if self._token is not None:
            return max(0.01, min(self.ttl_s / 3, self._valid_until - time.monotonic()))
        return self.ttl_s / 3

    async def try_acquire(self) -> float:
        """One follower step: take the lease if it is free.

        Returns:
            Seconds until the next step.
        """
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.get(self.keys.leader)
            await pipe.pttl(self.keys.leader)
            holder, raw_pttl = await pipe.execute()
        pttl = int(raw_pttl)
        if holder is not None and holder == self._last_token:
            # Our own lock survived (a renewal's reply was lost): nobody else can have led
            # since, so the same epoch carries on.
            sent = time.monotonic()
            if await self.scripts.leader_lease(
                self.keys.leader, LeaseMode.RENEW, holder, self.ttl_ms
            ):
                self._become_leader(holder, sent)
                return self.ttl_s / 3
            return 0.0
        if holder is not None:
            if pttl < 0:  # -2: gone since the GET; -1: no TTL (set by hand), poll
                return 0.0 if pttl == -2 else self.poll_s
            return min(max(pttl / 1000, MIN_POLL_S), self.poll_s)
        epoch = int(await self.redis.incr(self.keys.leader_epoch))
        token = f"{epoch}:{self.replica_id}"
        self._last_token = token
        sent = time.monotonic()
        if await self.scripts.leader_lease(self.keys.leader, LeaseMode.ACQUIRE, token, self.ttl_ms):
            self._become_leader(token, sent)
            return self.ttl_s / 3
        return 0.0

    async def renew(self) -> float:
        """One leader step: extend the lease, or step down when it is no longer ours."""
        token = self._token
        if token is None:
            return 0.0
        sent = time.monotonic()
        if await self.scripts.leader_lease(self.keys.leader, LeaseMode.RENEW, token, self.ttl_ms):
            if self._token == token:
                self._valid_until = sent + self.ttl_s
            return self.ttl_s / 3
        self.step_down("lease_lost")
        return 0.0

    def confirm(self, holder: str | None) -> bool:
        """Check the lock value a duty read; step down if it is not this replica's token.

        Returns:
            Whether this replica still leads.
        """
        if self._token is not None and holder != self._token:
            self.step_down("lease_lost")
        return self.is_leader

    def _become_leader(self, token: str, sent: float) -> None:
        self._token = token
        self.epoch = int(token.partition(":")[0])
        self._valid_until = sent + self.ttl_s
        self._leading.set()
        self.metrics.is_leader.set(1)
        self.metrics.leader_changes.inc()
        log.info("leader_acquired", epoch=self.epoch, replica=self.replica_id)

    def step_down(self, reason: str) -> None:
        """Stop leading now (duties stop at their next step)."""
        if self._token is None:
            return
        self._token = None
        self._leading.clear()
        self.metrics.is_leader.set(0)
        level = log.info if reason == "stopped" else log.warning
        level("leader_stepped_down", reason=reason, epoch=self.epoch, replica=self.replica_id)

    def deposed(self, exc: StaleLeaderError) -> None:
        """A promotion was refused: a newer epoch has acted, so this replica no longer leads."""
        self.metrics.leader_deposed.inc()
        log.warning(
            "leader_deposed",
            epoch=self.epoch,
            queue=exc.detail.get("queue"),
            replica=self.replica_id,
            error=exc.message,
        )
        self._last_token = None
        self.step_down("deposed")

    async def release(self) -> None:
        """Give the lease up at once (clean stop), so a follower need not wait for the TTL."""
        token = self._token
        if token is None:
            return
        self.step_down("stopped")
        try:
            async with asyncio.timeout(self.ttl_s / 3):
                released = await self.scripts.leader_lease(
                    self.keys.leader, LeaseMode.RELEASE, token, self.ttl_ms
                )
        except RETRYABLE:
            log.warning("leader_release_failed", epoch=self.epoch, exc_info=True)
            return
        self._last_token = None
        log.info("leader_released", epoch=self.epoch, released=released)
