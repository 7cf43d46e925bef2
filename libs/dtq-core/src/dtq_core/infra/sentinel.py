"""The master a Sentinel set names: its client, its pool and its connections.

A connection asks the sentinels for the master's address when it connects. After a failover
the old master, now a replica, answers every write with ``READONLY``: the connection that got
it closes, the pool forgets the old address and closes every other connection to it (idle ones
at once, busy ones when they come back), so the next command asks the sentinels again and goes
to the new master. The command that got ``READONLY`` did not run; its caller sees a connection
error (a 503, or a loop's retry), once, not once per pooled connection.
"""

from __future__ import annotations

import re
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError
from redis.retry import Retry

from dtq_core.infra.pool import BoundedPool, HiredisPacking
from dtq_core.infra.redis_url import RedisTarget

SENTINEL_TIMEOUT_S = 2.0
"""Socket and connect timeout of a question to a sentinel: one that does not answer in time
is skipped for the next one."""


class FollowsMaster(SentinelManagedConnection):
    """A connection to the master that gives the master up for the whole pool when it turns
    out to be a replica now (see the module docstring)."""

    connection_pool: BoundedSentinelPool

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            # Past SentinelManagedConnection's own handler, which closes only this connection.
            return await super(SentinelManagedConnection, self).read_response(*args, **kwargs)
        except ReadOnlyError:
            await self.disconnect()
            await self.connection_pool.master_moved()
            raise RedisConnectionError(
                f"{self.host}:{self.port} is a replica now (a failover); the next command "
                "goes to the master the sentinels name"
            ) from None


class HiredisSentinelConnection(HiredisPacking, FollowsMaster):
    """A connection to the master a Sentinel set names, with :class:`HiredisPacking`."""


class HiredisSentinelSSLConnection(HiredisPacking, FollowsMaster, SentinelManagedSSLConnection):
    """A TLS connection to the master a Sentinel set names, with :class:`HiredisPacking`."""


class BoundedSentinelPool(BoundedPool, SentinelConnectionPool):
    """A :class:`BoundedPool` of connections to the master a Sentinel set names."""

    async def master_moved(self) -> None:
        """Forget the master's address and close the connections to it: idle ones now,
        those in use when they are released."""
        self.master_address = None
        for connection in list(self._in_use_connections):
            connection.mark_for_reconnect()  # type: ignore[no-untyped-call]  # unannotated in redis-py
        await self.disconnect(inuse_connections=False)


class Sentinels(Sentinel):
    """redis-py's Sentinel whose "no master" error names each sentinel by its address and
    what it answered, instead of each sentinel client's whole repr."""

    async def discover_master(self, service_name: str) -> Any:
        try:
            return await super().discover_master(service_name)
        except MasterNotFoundError as exc:
            # redis-py lists "<client repr> - <error repr>" per sentinel that did not answer.
            answers = re.findall(r"\)>\)>\)> - (.*?)(?=, <redis|$)", str(exc))
            where = [
                "{host}:{port}".format(**sentinel.connection_pool.connection_kwargs)
                for sentinel in self.sentinels
            ]
            said = "; ".join(f"{w} {a}" for w, a in zip(where, answers, strict=False)) or (
                "every one answered without a usable master"
            )
            raise MasterNotFoundError(
                f"no sentinel named the master {service_name!r}: {said} (a password the "
                "sentinels want goes in DTQ_REDIS_URL as ?sentinel_password=)"
            ) from exc


class SentinelRedis(aioredis.Redis):
    """A client of the master a Sentinel set names; closing it closes its sentinel
    connections too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await sentinel.aclose()


def sentinel_client(target: RedisTarget, options: dict[str, Any]) -> aioredis.Redis:
    """A client of ``target``'s master with the data nodes' connection ``options``; the
    sentinels are asked with credentials of their own (``?sentinel_password=``)."""
    sentinel_options = {
        "socket_timeout": SENTINEL_TIMEOUT_S,
        "socket_connect_timeout": SENTINEL_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": True,
    }
    if target.sentinel_password:
        sentinel_options["username"] = target.sentinel_username
        sentinel_options["password"] = target.sentinel_password
    manager = Sentinels(list(target.nodes), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    connection_class = HiredisSentinelSSLConnection if target.tls else HiredisSentinelConnection
    return cast(
        aioredis.Redis,
        manager.master_for(
            target.master,
            redis_class=SentinelRedis,
            connection_pool_class=BoundedSentinelPool,
            connection_class=connection_class,
            db=target.db,
            **options,
            **dict(target.tls_options),
        ),
    )
