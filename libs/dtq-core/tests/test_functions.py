"""The transitions as one Redis Functions library: flags, transparent reloads after a flush
(failure mode B7, docs/failure-modes.md), least-privilege callers that may not load it, and ``dtq
migrate``."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from dtq_core import TaskStatus
from dtq_core.client import Client
from dtq_core.errors import LibraryMissingError
from dtq_core.infra.cluster import each_master, execute_on, masters
from dtq_core.infra.settings import Settings
from dtq_core.ops.admin import Admin
from dtq_core.protocol.scripts import SCRIPT_NAMES, Scripts, library
from dtq_devtools.testing.servers import acl_deluser, acl_setuser, all_keys, with_user

from .test_cli import dtq

SRC = Path(__file__).resolve().parents[1] / "src"

# A user like the services' ACL users: everything but loading or deleting functions.
NO_LOAD = [
    "on",
    ">pw",
    "~*",
    "&*",
    "+@all",
    "-function|load",
    "-function|delete",
    "-function|flush",
]


async def _functions(redis: aioredis.Redis) -> dict[str, set[str]]:
    """``{function name: flags}`` of every loaded dtq library, the same on every master."""
    seen: list[dict[str, set[str]]] = []
    for reply in await each_master(redis, "FUNCTION LIST", "LIBRARYNAME", "dtq_*"):
        out: dict[str, set[str]] = {}
        for lib in reply:
            fields = dict(zip(lib[::2], lib[1::2], strict=True))
            for fn in fields["functions"]:
                f = dict(zip(fn[::2], fn[1::2], strict=True))
                out[f["name"]] = set(f["flags"])
        seen.append(out)
    assert all(s == seen[0] for s in seen), "the masters hold different libraries"
    return seen[0]


async def _library_names(redis: aioredis.Redis) -> list[set[str]]:
    """The names of the libraries each master holds."""
    return [
        {dict(zip(lib[::2], lib[1::2], strict=True))["library_name"] for lib in reply}
        for reply in await each_master(redis, "FUNCTION LIST")
    ]


@pytest.fixture
async def restricted(
    redis: aioredis.Redis, redis_url: str, settings: Settings
) -> AsyncIterator[Client]:
    """A client whose Redis user may call functions but not load them."""
    await acl_setuser(redis, "dtq-noload", *NO_LOAD)
    url = with_user(redis_url, "dtq-noload", "pw")
    async with Client.from_settings(settings.with_overrides(redis_url=url)) as client:
        yield client
    await acl_deluser(redis, "dtq-noload")


async def test_library_registers_every_transition_with_its_flags(redis: aioredis.Redis) -> None:
    lib = library()
    assert re.fullmatch(r"dtq_[0-9a-f]{12}", lib.name)
    await Scripts(redis).ensure()
    functions = await _functions(redis)
    assert set(lib.functions) == set(SCRIPT_NAMES)
    for name, function in lib.functions.items():
        # Submit, a new queue and new partitions must be refused whole under OOM; every
        # other transition frees or moves memory.
        grows = {"submit", "register_queues", "grow_partitions", "wf_create", "wf_batch_add"}
        assert functions[function] == (set() if name in grows else {"allow-oom"}), name
    assert functions[lib.version_function] == {"no-writes", "allow-stale"}


async def test_calls_reload_the_library_after_a_function_flush(client: Client) -> None:
    await client.enqueue("t", queue="fn-a")
    reloads = client.scripts.reloads
    await client.redis.function_flush()
    # One script call, then a pipeline across two queues: both load the library and go on.
    await client.enqueue("t", queue="fn-a")
    assert client.scripts.reloads == reloads + 1
    await client.redis.function_flush()
    results = await client.enqueue_many(
        [{"task": "t", "queue": "fn-a"}, {"task": "t", "queue": "fn-b"}]
    )
    assert not [r for r in results if isinstance(r, Exception)]
    assert client.scripts.reloads == reloads + 2
    # Nothing ran twice: exactly the four accepted submits are queued.
    admin = Admin(client)
    assert ((await admin.queue("fn-a")).depth, (await admin.queue("fn-b")).depth) == (3, 1)


async def test_a_master_that_lost_the_library_gets_it_again_from_the_next_call(
    client: Client,
) -> None:
    """On a cluster the library is on every master: one that lacks it (a master added by
    resharding, or one restarted without persistence) is loaded by the first call it
    refuses, and ``ensure`` (what ``/ready`` calls) checks every master."""
    last = (await masters(client.redis))[-1]
    queue = next(q for q in (f"fn-{i}" for i in range(1000)) if _served_by(client, q, last))
    await execute_on(client.redis, last, "FUNCTION", "DELETE", library().name)
    with pytest.raises(ResponseError, match="Function not found"):
        await client.scripts.version()
    reloads = client.scripts.reloads
    handle = await client.enqueue("t", queue=queue)
    assert client.scripts.reloads == reloads + 1
    assert await handle.status() is TaskStatus.QUEUED
    await execute_on(client.redis, last, "FUNCTION", "DELETE", library().name)
    assert await client.scripts.ensure() == library().name
    assert all(library().name in names for names in await _library_names(client.redis))


def _served_by(client: Client, queue: str, master: Any) -> bool:
    if master is None:  # one Redis serves every queue
        return True
    return bool(client.redis.get_node_from_key(client.keys.queue(queue).meta) == master)  # type: ignore[attr-defined]


async def test_a_user_that_may_not_load_gets_a_clear_error_until_migrate(
    restricted: Client, client: Client, redis_url: str
) -> None:
    await client.redis.function_flush()
    with pytest.raises(LibraryMissingError, match="dtq migrate"):
        await restricted.enqueue("t", queue="fn-noload")
    with pytest.raises(LibraryMissingError):
        await restricted.enqueue_many(
            [{"task": "t", "queue": "fn-x"}, {"task": "t", "queue": "fn-y"}]
        )
    # Nothing was half-written.
    assert await all_keys(client.redis, "*fn-noload*") == []
    # The same CLI refuses with one line for such a user, then loads it as an allowed one.
    denied = await dtq(with_user(redis_url, "dtq-noload", "pw"), "migrate")
    assert denied.code == 1
    assert "may not load" in denied.err
    run = await dtq(redis_url, "migrate")
    assert run.code == 0, run.err
    assert library().name in run.out
    handle = await restricted.enqueue("t", queue="fn-noload")
    assert (await handle.status()) is not None


async def test_migrate_prune_deletes_only_older_dtq_libraries(
    redis: aioredis.Redis, redis_url: str
) -> None:
    older = "dtq_000000000000"
    await redis.function_load(
        f"#!lua name={older}\nredis.register_function('{older}_version', function() return 1 end)",
        replace=True,
    )
    await redis.function_load(
        "#!lua name=other_app\nredis.register_function('other_app_fn', function() return 1 end)",
        replace=True,
    )
    run = await dtq(redis_url, "migrate", "--prune")
    assert run.code == 0, run.err
    assert older in run.out
    for names in await _library_names(redis):  # on every master of a cluster
        assert library().name in names
        assert older not in names
        assert "other_app" in names  # not ours: left alone
    await redis.function_delete("other_app")


def test_nothing_sends_eval_or_evalsha() -> None:
    offenders = [
        f"{path}:{n}"
        for root in [SRC, *Path(__file__).resolve().parents[3].glob("services/*/src")]
        for path in root.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.(eval|evalsha|register_script|script_load)\(|[\"']EVAL(SHA)?[\"']", line)
    ]
    assert offenders == []
