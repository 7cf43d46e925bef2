"""Acknowledged means replicated, when asked (``DTQ_REDIS_WAIT_REPLICAS``).

Redis replicates asynchronously: a master acknowledges a write before any replica has it, and
a failover can promote a replica that never got it. ``WAIT n timeout`` blocks the *connection
that wrote* until ``n`` replicas confirmed everything that connection wrote, so the only sound
place for it is right behind the write, on the same connection:

- one Redis (standalone or the master a Sentinel set names): :class:`ReplicatedPipeline`
  sends ``WAIT`` after the pipeline's commands (after ``EXEC`` for a transaction) on the
  connection that carried them;
- a Redis Cluster: redis-py's cluster client sends a keyless command to a random node, so
  :func:`execute_confirmed` pins one ``WAIT`` per master to that master's node in the same
  cluster pipeline, whose commands for one node travel on one of its connections. A command
  the pipeline had to follow elsewhere (``MOVED``/``ASK`` during a resharding) ran on another
  connection, so its write counts as not confirmed.

A write that is not confirmed in time is still on the master: the caller gets
:class:`~dtq_core.errors.NotReplicatedError` and retries, which every transition makes safe
(submits by their idempotency key, attempt transitions by their lease). docs/scaling.md
("Replication and acknowledgements") says what is and is not promised.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, RedisCluster

from dtq_core.errors import NotReplicatedError
from dtq_core.infra.cluster import is_cluster
from dtq_core.infra.settings import Settings


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """How many replicas must confirm a transition, and for how long it waits for them."""

    replicas: int = 0
    timeout_ms: int = 500

    @classmethod
    def from_settings(cls, settings: Settings) -> ReplicaWait:
        """``DTQ_REDIS_WAIT_REPLICAS`` and ``DTQ_REDIS_WAIT_TIMEOUT_MS``."""
        return cls(settings.redis.wait_replicas, settings.redis.wait_timeout_ms)

    @property
    def command(self) -> tuple[str, int, int]:
        """The ``WAIT`` command this policy sends."""
        return ("WAIT", self.replicas, self.timeout_ms)

    def confirm(self, confirmed: int) -> None:
        """Raise unless ``confirmed`` (a ``WAIT`` reply) reaches :attr:`replicas`.

        Raises:
            NotReplicatedError: fewer replicas confirmed the write in time.
        """
        if confirmed < self.replicas:
            raise NotReplicatedError(
                f"written on the master, confirmed by {confirmed} of {self.replicas} replicas "
                f"within {self.timeout_ms} ms (DTQ_REDIS_WAIT_REPLICAS); retry (the same "
                "idempotency key makes a retried submit safe)",
                confirmed=confirmed,
                replicas=self.replicas,
                timeout_ms=self.timeout_ms,
            )


NO_WAIT = ReplicaWait()
"""Acknowledged once the master has it (``DTQ_REDIS_WAIT_REPLICAS=0``)."""

_POLICIES: weakref.WeakKeyDictionary[Any, ReplicaWait] = weakref.WeakKeyDictionary()
"""The policy of each client :func:`dtq_core.infra.connection.connect` made from settings."""


def register(redis: aioredis.Redis, policy: ReplicaWait) -> None:
    """Make ``policy`` the one :func:`replica_wait` answers for ``redis``."""
    if policy.replicas:
        _POLICIES[redis] = policy


def replica_wait(redis: aioredis.Redis) -> ReplicaWait:
    """The policy of ``redis`` (:data:`NO_WAIT` for a client made from a bare URL)."""
    return _POLICIES.get(redis, NO_WAIT)


class ReplicatedPipeline(Pipeline):
    """A pipeline of one Redis whose commands are acknowledged only once ``WAIT`` on their
    own connection confirmed them (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis, policy: ReplicaWait, *, transaction: bool) -> None:
        super().__init__(redis.connection_pool, redis.response_callbacks, transaction, None)
        self.policy = policy

    async def _execute_transaction(
        self, connection: Any, commands: Any, raise_on_error: Any
    ) -> Any:
        replies = await super()._execute_transaction(connection, commands, raise_on_error)
        await self._confirm(connection)
        return replies

    async def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: bool) -> Any:
        replies = await super()._execute_pipeline(connection, commands, raise_on_error)
        await self._confirm(connection)
        return replies

    async def _confirm(self, connection: Any) -> None:
        await connection.send_command(*self.policy.command)
        self.policy.confirm(int(await connection.read_response()))


def pipeline(redis: aioredis.Redis, *, transaction: bool) -> Pipeline:
    """A pipeline of ``redis`` for state transitions: on one Redis with
    ``DTQ_REDIS_WAIT_REPLICAS`` set, a :class:`ReplicatedPipeline`; elsewhere redis-py's (a
    cluster pipeline's writes are confirmed by :func:`execute_confirmed`)."""
    policy = replica_wait(redis)
    if not policy.replicas or is_cluster(redis):
        return redis.pipeline(transaction=transaction)
    return ReplicatedPipeline(redis, policy, transaction=transaction)


async def execute_confirmed(
    redis: aioredis.Redis, pipe: Pipeline, slot_keys: Sequence[str]
) -> list[Any]:
    """Execute ``pipe`` (made by :func:`pipeline`) and return its replies once the policy's
    replicas confirmed them.

    Args:
        slot_keys: a key of every slot the pipeline writes (read on a cluster only, where
            each master that ran a write gets a ``WAIT`` of its own).

    Raises:
        NotReplicatedError: a master's replicas did not confirm in time.
    """
    policy = replica_wait(redis)
    if not policy.replicas or not is_cluster(redis) or getattr(pipe, "_transaction", False):
        # A cluster transaction runs on a connection redis-py's transaction strategy keeps to
        # itself, so no WAIT can follow it there: on a cluster the admin transactions (which
        # also name global keys of other slots) are not confirmed (docs/scaling.md).
        return await pipe.execute()
    cluster = cast(RedisCluster, redis)
    _ = await cluster.initialize()
    owners = _masters(cluster, slot_keys)
    nodes = {node.name: node for node in owners}
    for node in nodes.values():
        pipe.execute_command(*policy.command, target_nodes=node)
    replies = await pipe.execute()
    confirmations = replies[len(replies) - len(nodes) :]
    if [n.name for n in _masters(cluster, slot_keys)] != [n.name for n in owners]:
        # A slot moved while the pipeline ran: its write was followed to another master on
        # another connection, which this WAIT says nothing about.
        policy.confirm(0)
    for confirmed in confirmations:
        policy.confirm(int(confirmed))
    return replies[: len(replies) - len(nodes)]


def _masters(cluster: RedisCluster, slot_keys: Sequence[str]) -> list[ClusterNode]:
    """The master of each key's slot, as the client's map of the cluster has it now."""
    owners: list[ClusterNode] = []
    for key in slot_keys:
        node = cluster.get_node_from_key(key)
        if node is None:  # only asked for replicas; a covered slot always has a master
            raise AssertionError(f"no master for {key}")
        owners.append(node)
    return owners


async def call_confirmed(redis: aioredis.Redis, slot_key: str, *command: Any) -> Any:
    """Send ``command`` (a write whose keys share ``slot_key``'s slot) and return its reply
    once the policy's replicas confirmed it (see :func:`execute_confirmed`)."""
    async with pipeline(redis, transaction=False) as pipe:
        pipe.execute_command(*command)
        (reply,) = await execute_confirmed(redis, pipe, [slot_key])
    return reply
