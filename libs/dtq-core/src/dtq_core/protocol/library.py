"""The Redis Functions library built from ``lua/``, and the one way to call it.

Each ``lua/<name>.lua`` is one transition; ``lua/_lib.lua`` holds the helpers they share. The
library built from them is named after a hash of its text (``dtq_<hash>``), and so is every
function in it (``dtq_<hash>_claim``): two versions of dtq can run side by side during a rolling
upgrade, each calling its own code. Functions are part of Redis's dataset (persisted and
replicated), unlike the script cache; they still vanish when Redis restarts without
persistence, or on ``FUNCTION FLUSH``. A call that finds its function missing loads the library
(``FUNCTION LOAD``) and runs again, when the caller is allowed to load; under least-privilege
ACLs only ``dtq migrate`` loads it, and callers report :class:`LibraryMissingError` until then.

:class:`FunctionCaller` is the only caller of ``FCALL``; nothing in dtq sends ``EVAL`` or
``EVALSHA``. With ``DTQ_REDIS_WAIT_REPLICAS`` set, every call is confirmed by that many
replicas before it returns (:mod:`dtq_core.infra.replication`). The wrapper of a transition
that replies an error code raises the typed error the code names
(:func:`dtq_core.protocol.outcomes.errors_by_code`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import NoPermissionError, ResponseError

from dtq_core.errors import LibraryMissingError
from dtq_core.infra import replication
from dtq_core.infra.clock import test_clock_key
from dtq_core.infra.cluster import each_master, execute_on, masters
from dtq_core.infra.replication import call_confirmed, replica_wait

log = structlog.get_logger()

SCRIPT_NAMES = (
    "submit",
    "claim",
    "finish",
    "extend_lease",
    "release",
    "reclaim",
    "cancel",
    "requeue",
    "discard",
    "promote",
    "purge",
    "progress",
    "leader_lease",
    "heartbeat",
    "stale_workers",
    "reconcile",
    "prune_consumers",
    "register_queues",
    "unregister_queue",
    "drop_queue",
    "grow_partitions",
    "group_set",
    "wf_create",
    "wf_advance",
    "wf_queued",
    "wf_cancel",
    "wf_batch_add",
    "wf_batch_seal",
    "wf_settle",
    "history_depth",
)

_SHEBANG = re.compile(r"^#!lua(?: flags=([a-z-]+(?:,[a-z-]+)*))?$")


@dataclass(frozen=True, slots=True)
class Library:
    """The function library sent to Redis by ``FUNCTION LOAD``."""

    name: str
    source: str
    functions: dict[str, str]  # transition -> function name

    @property
    def version_function(self) -> str:
        """A read-only function answering the library's name: ``/ready`` calls it."""
        return f"{self.name}_version"


def lua_sources() -> dict[str, str]:
    """The text of every file in ``lua/`` by its stem (``_lib`` and each transition)."""
    folder = resources.files("dtq_core.protocol") / "lua"
    return {name: (folder / f"{name}.lua").read_text() for name in ("_lib", *SCRIPT_NAMES)}


def library() -> Library:
    """Build the library from ``lua/``: the helpers once, then each transition as a function
    with the flags its ``#!lua`` line declares (``allow-oom`` on every transition that frees or
    only moves memory; none on submit, so that under OOM a submit is refused whole)."""
    return _library(test_clock_key())


@cache
def _library(clock: str | None) -> Library:
    sources = lua_sources()
    helpers = sources["_lib"]
    if clock is not None:
        # A test kit's clock (dtq_core.infra.clock): its key's name is in the text, so this
        # library's name differs from production's.
        helpers = helpers.replace("local TEST_CLOCK = nil", f"local TEST_CLOCK = '{clock}'", 1)
    bodies: list[tuple[str, list[str], str]] = []
    for name in SCRIPT_NAMES:
        shebang, _, body = sources[name].partition("\n")
        match = _SHEBANG.match(shebang)
        if match is None:
            raise ValueError(f"lua/{name}.lua must start with a #!lua line, not {shebang!r}")
        bodies.append((name, match.group(1).split(",") if match.group(1) else [], body))
    digest = hashlib.sha1(  # noqa: S324 - a version tag, not security
        "\0".join([helpers, *(f"{n}{f}{b}" for n, f, b in bodies)]).encode()
    ).hexdigest()[:12]
    lib = f"dtq_{digest}"
    reset = "GROUPS = {}\n" if re.search(r"^local GROUPS\b", helpers, re.M) else ""
    parts = [f"#!lua name={lib}", helpers]
    functions: dict[str, str] = {}
    for name, flags, body in bodies:
        functions[name] = f"{lib}_{name}"
        flag_list = ", ".join(f"'{f}'" for f in flags)
        # Each call binds redis.call and starts with nothing read of the groups (_lib.lua's
        # GROUPS; a _lib.lua without it, as an older version's, gets no reset: a function
        # library may not create a global).
        parts.append(
            f"local function {name}_fn(KEYS, ARGV)\nrcall = redis.call\n{reset}{body}\nend"
        )
        parts.append(
            f"redis.register_function{{function_name='{lib}_{name}', "
            f"callback={name}_fn, flags={{{flag_list}}}}}"
        )
    parts.append(
        f"redis.register_function{{function_name='{lib}_version', "
        f"callback=function() return '{lib}' end, flags={{'no-writes', 'allow-stale'}}}}"
    )
    return Library(name=lib, source="\n".join(parts) + "\n", functions=functions)


def function_missing(exc: BaseException) -> bool:
    """Whether a Redis error says the function (so the library) is not loaded."""
    # Redis's own reply ("ERR Function not found"), not one of dtq's codes. Inside a pipeline,
    # redis-py prefixes the message with the failing command.
    return isinstance(exc, ResponseError) and "Function not found" in str(exc)


async def load_library(redis: aioredis.Redis) -> str:
    """Load (or reload) this version's library (on every master of a cluster: redis-py sends
    ``FUNCTION LOAD`` to each); returns its name.

    Raises:
        LibraryMissingError: the caller's ACL user may not load functions.
    """
    lib = library()
    try:
        await redis.function_load(lib.source, replace=True)
    except NoPermissionError as exc:
        raise LibraryMissingError(
            f"Redis has no function library {lib.name} and this user may not load it: "
            "run `dtq migrate` as a user allowed FUNCTION LOAD",
            library=lib.name,
        ) from exc
    log.info("functions_loaded", library=lib.name)
    return lib.name


async def prune_libraries(redis: aioredis.Redis) -> list[str]:
    """Delete every other version's dtq library (after a rolling upgrade has finished), on
    every master of a cluster."""
    current = library().name
    pruned: list[str] = []
    for master in await masters(redis):
        for entry in await execute_on(redis, master, "FUNCTION LIST", "LIBRARYNAME", "dtq_*"):
            fields = dict(zip(entry[::2], entry[1::2], strict=True))
            name = fields.get("library_name", fields.get(b"library_name"))
            name = name.decode() if isinstance(name, bytes) else name
            if not isinstance(name, str) or name == current:
                continue
            if re.fullmatch(r"dtq_[0-9a-f]{12}", name):
                await execute_on(redis, master, "FUNCTION DELETE", name)
                if name not in pruned:
                    pruned.append(name)
    return pruned


class FunctionCaller:
    """Calls this version's functions on one Redis client, loading the library when a call
    finds it missing."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self.library = library()
        self.reloads = 0

    async def _call(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        client: Any = None,
    ) -> Any:
        """``FCALL`` the transition ``name``; ``client`` may be a pipeline (its caller handles
        a missing library, the replies and the replicas' confirmation:
        :func:`~dtq_core.infra.replication.execute_confirmed`)."""
        command = ("FCALL", self.library.functions[name], len(keys), *keys, *args)
        if client is not None:
            return client.execute_command(*command)
        try:
            return await self._send(command, keys)
        except ResponseError as exc:
            if not function_missing(exc):
                raise
        await self.reload()
        return await self._send(command, keys)

    async def pipelined(
        self, calls: Sequence[Callable[[Any], Awaitable[Any]]], slot_keys: Sequence[str]
    ) -> list[Any]:
        """The replies of function calls, each made on the pipeline it is given, in one
        pipeline (one round trip for any number of slots; ``slot_keys``: a key of each call's
        slot, for the replicas' confirmation). A missing library fails every call of the
        pipeline before any of them runs, so loading it and sending the pipeline again does
        nothing twice."""
        for attempt in range(2):
            async with replication.pipeline(self.redis, transaction=False) as pipe:
                for call in calls:
                    await call(pipe)
                try:
                    return list(await replication.execute_confirmed(self.redis, pipe, slot_keys))
                except ResponseError as exc:
                    if attempt or not function_missing(exc):
                        raise
            await self.reload()
        raise AssertionError("unreachable")

    async def _send(self, command: tuple[Any, ...], keys: Sequence[str]) -> Any:
        """One ``FCALL``, confirmed by replicas when the client's settings ask for them.

        Raises:
            NotReplicatedError: it ran, and too few replicas confirmed it in time.
        """
        if keys and replica_wait(self.redis).replicas:
            return await call_confirmed(self.redis, keys[0], *command)
        return await self.redis.execute_command(*command)  # type: ignore[no-untyped-call]  # unannotated in redis-py

    async def reload(self) -> None:
        """Load the library after a call found it missing (a flushed or empty Redis)."""
        self.reloads += 1
        log.warning("functions_missing", library=self.library.name, reloads=self.reloads)
        await load_library(self.redis)

    async def ensure(self) -> str:
        """Make sure this version's library is loaded (load it when missing and allowed).

        Raises:
            LibraryMissingError: it is missing and this user may not load it.
        """
        try:
            return await self.version()
        except ResponseError as exc:
            if not function_missing(exc):
                raise
        await self.reload()
        return await self.version()

    async def version(self) -> str:
        """The loaded library's name; raises ``ResponseError`` when it is missing (on a
        cluster, when any master misses it: a master added by resharding, or one whose data
        was lost)."""
        # The function has no keys: redis-py would send it to one node of a cluster.
        reply, *_ = await each_master(self.redis, "FCALL_RO", self.library.version_function, 0)
        return reply.decode() if isinstance(reply, bytes) else str(reply)
