"""Redis connections for every dtq process, on any of the three forms of ``DTQ_REDIS_URL``.

The connections and their pool are :mod:`dtq_core.infra.pool`; the master a Sentinel set names
is :mod:`dtq_core.infra.sentinel`; a cluster is :mod:`dtq_core.infra.cluster`.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode
from redis.backoff import NoBackoff
from redis.credentials import CredentialProvider
from redis.exceptions import (
    AuthenticationError,
    ClusterError,
    MaxConnectionsError,
    RedisClusterException,
    RedisError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from dtq_core.errors import RedisBusyError, RedisUnavailableError
from dtq_core.infra.cluster import DtqCluster, hash_slot, is_cluster, time_of
from dtq_core.infra.pool import (
    POOL_WAIT_S,
    BoundedPool,
    HiredisPackConnection,
    HiredisSSLConnection,
    with_hiredis,
)
from dtq_core.infra.redis_url import RedisTarget, Topology, parse_redis_url
from dtq_core.infra.replication import ReplicaWait, register
from dtq_core.infra.sentinel import sentinel_client
from dtq_core.infra.settings import Settings, read_secret_file

__all__ = [  # the pool's names, importable from here where callers always found them
    "BLOCKING_READ_MS",
    "POOL_WAIT_S",
    "SOCKET_TIMEOUT_S",
    "BoundedPool",
    "connect",
]

StreamEntry = tuple[str, dict[str, str]]
"""An entry as redis-py returns it with ``decode_responses=True``."""
StreamReply = list[tuple[str, list[StreamEntry]]]
"""The reply of XREAD/XREADGROUP with ``decode_responses=True``."""

# Every command a dtq process sends is bounded by this; blocking reads use shorter BLOCKs.
SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0
BLOCKING_READ_MS = 2000
MAX_CONNECTIONS = 100
"""Connections of a pool when the caller gives no settings (``DTQ_REDIS_MAX_CONNECTIONS``)."""


class FileCredentialProvider(CredentialProvider):
    """An ACL user and a password read from a file (a Docker secret) for every new
    connection: a rotated password is picked up without a restart, and the password never
    sits in the URL, the environment or the settings."""

    def __init__(self, username: str | None, password_file: str) -> None:
        self.username = username
        self.password_file = password_file

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        password = read_secret_file(self.password_file, "DTQ_REDIS_PASSWORD_FILE")
        return (self.username, password) if self.username else (password,)

    async def get_credentials_async(self) -> tuple[str] | tuple[str, str]:
        return self.get_credentials()


def _without_user(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its user info, and the user and password it named."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.netloc.rpartition("@")[2]
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return urlunsplit(parts._replace(netloc=host)), user, password


def credentials(settings: Settings) -> tuple[str, dict[str, Any]]:
    """The URL to connect to and the credential options the settings call for.

    ``DTQ_REDIS_USERNAME`` wins over a user in the URL; with ``DTQ_REDIS_PASSWORD_FILE`` the
    password is read from the file on every new connection.
    """
    url = settings.redis.url
    if not (settings.redis.username or settings.redis.password_file):
        return url, {}
    bare, url_user, url_password = _without_user(url)
    user = settings.redis.username or url_user
    if settings.redis.password_file:
        return bare, {
            "credential_provider": FileCredentialProvider(user, settings.redis.password_file)
        }
    return bare, {"username": user, "password": url_password}


def _options(settings_or_url: Settings | str, **kwargs: Any) -> tuple[RedisTarget, dict[str, Any]]:
    """What ``DTQ_REDIS_URL`` names, and the options of every connection to it."""
    auth: dict[str, Any] = {}
    max_connections = MAX_CONNECTIONS
    if isinstance(settings_or_url, str):
        url = settings_or_url
    else:
        url, auth = credentials(settings_or_url)
        max_connections = settings_or_url.redis.max_connections
    target = parse_redis_url(url)
    if target.topology is not Topology.STANDALONE and not auth:
        auth = {"username": target.username, "password": target.password}
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": Retry(NoBackoff(), 0),
        "max_connections": max_connections,
        "timeout": POOL_WAIT_S,
        **auth,
    }
    options.update(kwargs)
    return target, options


def connect(
    settings_or_url: Settings | str, *, client_name: str | None = None, **kwargs: Any
) -> aioredis.Redis:
    """An asyncio Redis client with dtq's defaults, for any form of ``DTQ_REDIS_URL``
    (:mod:`dtq_core.infra.redis_url`): one Redis, a Redis Cluster, or the master a Sentinel
    set names.

    Commands are not retried by the client: a state transition whose reply was lost must be
    retried by the caller, which knows whether that is safe (finish is fenced by its lease;
    submit is made safe by an idempotency key). On a cluster, ``MOVED`` and ``ASK`` are
    followed (the command did not run), and a connection error makes the next command read
    the cluster's map again.

    With settings that ask for replicas (``DTQ_REDIS_WAIT_REPLICAS``) the client's state
    transitions are confirmed by them (:mod:`dtq_core.infra.replication`).
    """
    target, options = _options(settings_or_url, **kwargs)
    client = _client(target, {**options, "client_name": client_name})
    if not isinstance(settings_or_url, str):
        register(client, ReplicaWait.from_settings(settings_or_url))
    return client


def _client(target: RedisTarget, options: dict[str, Any]) -> aioredis.Redis:
    if target.topology is Topology.CLUSTER:
        client: aioredis.Redis = _cluster_client(target, options)
    elif target.topology is Topology.SENTINEL:
        client = sentinel_client(target, options)
    else:
        pool = BoundedPool.from_url(target.url, **options)
        # The URL names the connection class (TLS for rediss://, a socket file for unix://) and
        # redis-py lets the URL's options win over the caller's: a class passed in would be
        # dropped, so the hiredis form of the URL's class is put in after.
        pool.connection_class = with_hiredis(pool.connection_class)
        # from_pool: the client owns the pool, so aclose() closes its connections too.
        client = aioredis.Redis.from_pool(pool)
    _RECIPES[client] = (target, options)
    return client


def _cluster_client(target: RedisTarget, options: dict[str, Any]) -> aioredis.Redis:
    pool_wait_s = float(options.get("timeout", POOL_WAIT_S))
    options = {k: v for k, v in options.items() if k != "timeout"} | dict(target.tls_options)
    cluster = DtqCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
        ssl=target.tls,
        # A MOVED moves its slot in the client's map. redis-py's default also rereads the
        # whole map every fifth MOVED by closing every connection, in-flight commands with
        # them: during a resharding, a finish whose reply is lost that way has an unknown
        # outcome. Connection errors still make the next command read the map again.
        reinitialize_steps=0,
        **options,
    )
    cluster.pool_wait_s = pool_wait_s
    # Every node connects with hiredis packing, over TLS with the same options when the URL
    # asks for it. Nodes found later take the shared kwargs; the startup nodes were made by
    # RedisCluster's constructor with the plain classes (before anything could be passed in:
    # ssl=True sets SSLConnection) and have not connected yet.
    connection_class = HiredisSSLConnection if target.tls else HiredisPackConnection
    cluster.connection_kwargs["connection_class"] = connection_class
    for node in cluster.nodes_manager.startup_nodes.values():
        node.connection_class = connection_class
    # One client type for every topology: the commands dtq sends are those both offer.
    return cast(aioredis.Redis, cluster)


_RECIPES: weakref.WeakKeyDictionary[Any, tuple[RedisTarget, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)
"""How each client :func:`connect` made was made, for :func:`companion`."""


def companion(redis: aioredis.Redis, *, client_name: str) -> aioredis.Redis:
    """A client of its own pool (one connection; one per master on a cluster) to the Redis
    ``redis`` talks to, with the same options: for a reader that blocks, so that it never
    holds a connection of the main pool (whose connections serve short commands only)."""
    recipe = _RECIPES.get(redis)
    if recipe is not None:
        target, options = recipe
        # The caller's socket timeout stays: blocking reads use shorter BLOCKs.
        return _client(target, {**options, "client_name": client_name, "max_connections": 1})
    pool = redis.connection_pool
    options = {**pool.connection_kwargs, "client_name": client_name}
    return aioredis.Redis.from_pool(
        BoundedPool(
            connection_class=pool.connection_class,
            max_connections=1,
            timeout=POOL_WAIT_S,
            **options,
        )
    )


def client_name(redis: aioredis.Redis) -> str | None:
    """The ``CLIENT SETNAME`` name ``redis``'s connections carry."""
    recipe = _RECIPES.get(redis)
    if recipe is not None:
        return cast(str | None, recipe[1].get("client_name"))
    return cast(str | None, redis.connection_pool.connection_kwargs.get("client_name"))


async def disconnect(redis: aioredis.Redis) -> None:
    """Close every connection of ``redis``; the next command connects again (on a cluster,
    after reading the cluster's map again)."""
    if is_cluster(redis):
        await redis.aclose()
    else:
        await redis.connection_pool.disconnect()


def slot_groups(redis: aioredis.Redis, keys: Mapping[str, str]) -> list[dict[str, str]]:
    """``keys`` (key -> value) split into groups whose keys share a slot: one group on one
    Redis, one per slot on a cluster."""
    if not is_cluster(redis):
        return [dict(keys)]
    groups: dict[int, dict[str, str]] = {}
    for key, value in keys.items():
        groups.setdefault(hash_slot(key), {})[key] = value
    return list(groups.values())


CLUSTER_POLL_S = 0.02
"""How often a read of streams in several cluster slots looks again while nothing is new: at
most this much latency added to an event on a cluster (a read of one slot blocks in Redis)."""


async def xread(
    redis: aioredis.Redis, streams: Mapping[str, str], *, count: int, block_ms: int
) -> StreamReply:
    """``XREAD COUNT count BLOCK block_ms STREAMS ...`` on any topology.

    On one Redis, or when every stream is in one slot, this is that one command. On a cluster
    (which refuses an ``XREAD`` whose keys are in two slots) each slot's streams are read
    without blocking, those of one master in one round trip; while nothing is new it reads
    again every :data:`CLUSTER_POLL_S` until ``block_ms`` passed.
    """
    groups = slot_groups(redis, streams)
    if len(groups) <= 1:
        return cast(
            StreamReply, await redis.xread(dict[Any, Any](streams), count=count, block=block_ms)
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + block_ms / 1000
    while True:
        async with redis.pipeline(transaction=False) as pipe:
            for group in groups:
                await pipe.xread(group, count=count)  # type: ignore[arg-type]
            replies = await pipe.execute()
        merged: StreamReply = [item for reply in replies if reply for item in reply]
        if merged or loop.time() >= deadline:
            return merged
        await asyncio.sleep(min(CLUSTER_POLL_S, max(0.0, deadline - loop.time())))


P = ParamSpec("P")
R = TypeVar("R")

REDIS_DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    ClusterError,
    RedisClusterException,
)
"""What a Redis that does not answer raises (refused, reset, timed out), and a cluster that
cannot serve the slot now (``CLUSTERDOWN`` during a failover; redirections that did not end,
redis-py's "TTL exhausted", while a slot migrates and a function's keys are split between two
nodes): the errors a request turns into :class:`RedisUnavailableError` (a 503 with
Retry-After). Not a retry policy: see :data:`RETRYABLE` for what a loop waits out."""

RETRYABLE: tuple[type[Exception], ...] = (
    RedisError,
    RedisClusterException,
    RedisUnavailableError,
    OSError,
)
"""What a service's loop waits out with backoff and tries again: the one set every dtq
loop uses (:func:`dtq_core.infra.loops.run_supervised`).

- ``RedisError``: everything redis-py raises. Redis did not answer (connection refused or
  reset, a socket timeout), a full pool (``MaxConnectionsError``), or Redis answered with
  an error a later try can pass: ``LOADING`` after a restart, ``BUSY`` behind a slow
  script, ``OOM`` under ``maxmemory`` (draining frees memory), ``READONLY`` during a
  failover, or no function library after a flush.
- ``RedisUnavailableError``: dtq's own form of the above, raised by the SDK's calls
  (:func:`answering`) and by the scripts when Redis holds no function library this
  process may load (until ``dtq migrate`` runs).
- ``OSError``: a socket error that reaches the caller without redis-py's wrapping, and
  ``TimeoutError``
  (an ``OSError``) from the caller's own ``asyncio.timeout`` around a Redis call, such as
  the leader's lease calls, whose deadline is shorter than the socket timeout.
"""


def time_us(reply: Sequence[Any]) -> int:
    """A ``TIME`` reply (seconds, microseconds) as microseconds. Every age, due time and stamp
    dtq computes comes from Redis's clock, never a host's (docs/failure-modes.md, F16)."""
    seconds, micros = reply
    return int(seconds) * 1_000_000 + int(micros)


def time_ms(reply: Sequence[Any]) -> int:
    """A ``TIME`` reply as milliseconds (see :func:`time_us`)."""
    return time_us(reply) // 1000


async def server_ms(redis: aioredis.Redis, key: str | None = None) -> int:
    """Redis's clock now, in milliseconds: on a cluster, the clock of the master that holds
    ``key`` (:func:`dtq_core.infra.cluster.time_of`)."""
    return time_ms(await time_of(redis, key))


def unavailable(exc: BaseException) -> RedisUnavailableError:
    """The dtq error for ``exc``, one of :data:`REDIS_DOWN`: a full pool is
    :class:`RedisBusyError` (its own 503 code), anything else Redis not answering."""
    if isinstance(exc, MaxConnectionsError):
        return RedisBusyError(f"Redis is busy: {exc}; retry")
    return RedisUnavailableError(f"Redis did not answer: {exc}")


def answering(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Turn a Redis that does not answer into :class:`RedisUnavailableError` (a 503)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except AuthenticationError:
            raise  # Redis answered: the credentials are wrong, which is not an outage.
        except TimeoutError:
            raise  # the caller's own deadline (Client.wait), not Redis's
        except REDIS_DOWN as exc:
            raise unavailable(exc) from exc

    return wrapper
