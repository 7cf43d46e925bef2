"""Hash tags and cluster slots: every queue key carries its queue's hash tag, ``hash_slot``
agrees with known vectors and a cluster-enabled redis-server, and the cross-slot audit of every
script.

Every key one script call receives hashes to one slot, and the task key prefix handed over in
ARGV (from which the scripts build task and idempotency keys) carries the same hash tag
(docs/architecture.md, "Redis data model"; failure mode E4, docs/failure-modes.md). The audit
runs every wrapper of :class:`Scripts` against the real Redis and records what it passes, so a
global key added to a queue script fails here.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis as syncredis
import redis.asyncio as aioredis

from dtq_core.infra.cluster import hash_slot
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings
from dtq_core.messages import TaskRequest
from dtq_core.protocol.keys import Keys, QueueKeys
from dtq_core.protocol.scripts import SCRIPT_NAMES, Finish, Held, Scripts
from dtq_core.protocol.submit import Prepared, new_rands, prepare
from dtq_devtools.testing import RedisServer, free_port, wait_until_sync

HEX32 = "0123456789abcdef" * 2
SLOTS = 16384


def _queue_keys(qk: QueueKeys) -> list[str]:
    return [
        *qk.streams,
        qk.task(HEX32),
        qk.delayed,
        qk.dlq,
        qk.idem("f" * 64),
        qk.events,
        qk.meta,
    ]


@pytest.mark.parametrize("queue", ["emails", "a", "A-b_c.9", "x" * 64, "p5", "dlq"])
def test_every_queue_key_carries_the_queue_hash_tag(queue: str) -> None:
    qk = Keys().queue(queue)
    slot = hash_slot(queue)
    for key in _queue_keys(qk):
        assert key.startswith(f"dtq:{{{queue}}}:")
        assert hash_slot(key) == slot, key
    assert hash_slot(qk.task_prefix + HEX32) == slot
    assert hash_slot(qk.idem_prefix + "0" * 64) == slot


def test_queue_keys_of_distinct_queues_are_distinct() -> None:
    a = set(_queue_keys(Keys().queue("a")))
    b = set(_queue_keys(Keys().queue("b")))
    assert not a & b


# -- hash_slot --------------------------------------------------------------------------------

# Values from the Redis Cluster specification and `CLUSTER KEYSLOT` of redis-server 7.
KNOWN_SLOTS = {
    "foo": 12182,
    "bar": 5061,
    "hello": 866,
    "somekey": 11058,
    "123456789": 12739,  # the CRC16/XMODEM check value 0x31C3 mod 16384
    "{user1000}.following": 3443,
    "{user1000}.followers": 3443,
    "foo{}{bar}": 8363,  # empty tag: the whole key is hashed
    "foo{{bar}}zap": 4015,  # the tag is "{bar"
    "foo{bar}{zap}": 5061,  # only the first tag counts: "bar"
    "": 0,
}


@pytest.mark.parametrize(("key", "slot"), sorted(KNOWN_SLOTS.items()))
def test_hash_slot_known_vectors(key: str, slot: int) -> None:
    assert hash_slot(key) == slot
    assert hash_slot(key.encode()) == slot


def test_hash_slot_hash_tag_rules() -> None:
    assert hash_slot("{user1000}.following") == hash_slot("{user1000}.followers")
    assert hash_slot("{user1000}.x") == hash_slot("user1000")
    assert hash_slot("a{b}c") == hash_slot("b")
    assert hash_slot("{}x") == hash_slot(b"{}x")
    assert hash_slot("x{") == hash_slot(b"x{")  # no closing brace: the whole key
    assert hash_slot("é") == hash_slot("é".encode())
    assert all(0 <= hash_slot(f"k{i}") < 16384 for i in range(1000))


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[syncredis.Redis]:
    """A cluster-enabled redis-server of this module's own, serving every slot: ``CLUSTER
    KEYSLOT`` is the oracle of slots, and a function run on it may touch only keys of the slot
    its declared keys are in.

    The session server is not in cluster mode (``CLUSTER KEYSLOT`` is refused there).
    """
    # The cluster bus listens on its own port; naming a free one avoids port + 10000, which
    # Redis refuses above 55535 and which may be taken.
    server = RedisServer(
        Path(tmp_path_factory.mktemp("cluster")),
        appendonly=False,
        extra=("--cluster-enabled", "yes", "--cluster-port", str(free_port())),
    )
    server.start()
    client = syncredis.Redis(port=server.port, decode_responses=True)
    try:
        # A cluster of one node serving every slot: the functions run on it in cluster mode.
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", str(SLOTS - 1))
        wait_until_sync(
            lambda: "cluster_state:ok" in client.execute_command("CLUSTER", "INFO"),
            message="the one-node cluster is ok",
        )
        yield client
    finally:
        client.close()
        server.stop()


def _server_slot(node: syncredis.Redis, key: str) -> int:
    return int(node.execute_command("CLUSTER", "KEYSLOT", key))


def test_hash_slot_matches_cluster_keyslot(cluster_node: syncredis.Redis) -> None:
    keys: list[str] = list(KNOWN_SLOTS)
    keys += [f"key:{i}" for i in range(300)]
    keys += ["{", "}", "{}", "}{", "{{}}", "a{}}b", "{a}{b}", "x{y", "é", "{é}:p1", "\u0430"]
    keys += [k for q in ("emails", "a", "x" * 64) for k in _queue_keys(Keys().queue(q))]
    keys += [c * 3 for c in string.printable]
    for key in keys:
        assert hash_slot(key) == _server_slot(cluster_node, key), key


# -- the cross-slot audit of every script wrapper ---------------------------------------------

GLOBAL_SCRIPTS = frozenset(
    {
        "leader_lease",
        "heartbeat",
        "stale_workers",
        "register_queues",
        "unregister_queue",
        "wf_settle",
    }
)
"""Scripts on a global key: one key per call, never combined with another
(docs/architecture.md, "Redis data model")."""
WORKFLOW_SCRIPTS = frozenset(
    {"wf_create", "wf_advance", "wf_queued", "wf_cancel", "wf_batch_add", "wf_batch_seal"}
)
"""Scripts on one workflow's hash (its own slot, ``dtq:{wf:<id>}:h``), one key per call."""
NOT_QUEUE_SCRIPTS = GLOBAL_SCRIPTS | WORKFLOW_SCRIPTS


class RecordingScripts(Scripts):
    """The real scripts, run against the real Redis; every call's KEYS and ARGV are kept."""

    def __init__(self, redis: aioredis.Redis) -> None:
        super().__init__(redis)
        self.calls: list[tuple[str, list[str], list[Any]]] = []

    def _call(self, name: str, keys: Sequence[str], args: Sequence[Any], client: Any = None) -> Any:
        self.calls.append((name, list(keys), list(args)))
        return super()._call(name, keys, args, client)


def _items(settings: Settings, *reqs: TaskRequest) -> list[Prepared]:
    rands = new_rands(len(reqs))
    return [prepare(r, settings, rand) for r, rand in zip(reqs, rands, strict=True)]


async def _exercise_queue(s: RecordingScripts, settings: Settings, queue: str) -> set[str]:
    """Call every queue-script wrapper once or more; returns the wrapper names called."""
    qk = Keys(settings.namespace).queue(queue)
    ret = settings.tasks.retention_s * 1000
    ev = settings.queues.events_maxlen
    called: set[str] = set()

    def req(**kw: Any) -> TaskRequest:
        return TaskRequest(task="audit.task", queue=queue, **kw)

    limits = {"max_depth": 100, "retention_ms": ret, "idem_ttl_ms": 60_000, "events_maxlen": ev}
    await s.submit(
        qk,
        _items(
            settings,
            req(priority=9),
            req(priority=1, idempotency_key="k1"),
            req(priority=5, group="g1"),
            req(priority=5, group="g1"),
            req(delay_s=0.001, group="g1"),
            req(delay_s=1000),
        ),
        **limits,
    )
    # A workflow's step: its end is noted in the queue's outbox (lua/_lib.lua, "Workflows").
    step = prepare(req(priority=9), settings, new_rands(1)[0], wf=f"{HEX32}:0")
    await s.submit(qk, [step], **limits)
    cancelled, _ = await s.cancel(
        qk, step.rand, events_maxlen=ev, retention_ms=ret, channel=Keys().cancel_channel
    )
    assert cancelled == "cancelled"
    async with s.redis.pipeline(transaction=False) as pipe:
        await s.submit(qk, _items(settings, req()), **limits, client=pipe)
        await pipe.execute()
    called.add("submit")

    _, got = await s.claim(qk, consumer="w1", count=4, events_maxlen=ev, retention_ms=ret)
    called.add("claim")
    await s.claim_limited(qk, consumer="w1", count=0, events_maxlen=ev, retention_ms=ret)
    called.add("claim_limited")
    assert len(got) == 4
    held = [Held(c.rand, c.priority, c.entry_id, c.lease) for c in got]
    await s.extend_lease(qk, "w1", held)
    called.add("extend_lease")
    assert await s.progress(qk, got[0].rand, got[0].lease, '{"value":0.5}', events_maxlen=ev)
    called.add("progress")
    status, _ = await s.cancel(
        qk, got[3].rand, events_maxlen=ev, retention_ms=ret, channel=Keys().cancel_channel
    )
    called.add("cancel")
    assert status == "requested"
    finished = await s.finish(
        qk,
        [
            Finish(held[0], "ok", '"done"', ""),
            Finish(held[1], "dead", '{"attempt":1,"type":"E","message":"m"}', ""),
            Finish(held[2], "retry", '{"attempt":1,"type":"E","message":"m"}', "0"),
        ],
        events_maxlen=ev,
        result_retention_ms=60_000,
        retention_ms=ret,
        dlq_enabled=True,
        dlq_maxlen=100,
    )
    called.add("finish")
    assert finished == ["succeeded", "dead", "retrying"]
    assert await s.release(qk, [held[3]], events_maxlen=ev, reason="drain") == [held[3].rand]
    called.add("release")
    await s.reclaim(
        qk,
        consumer="reaper",
        min_idle_ms=0,
        budget=100,
        events_maxlen=ev,
        retention_ms=ret,
        dlq_enabled=True,
        dlq_maxlen=100,
        cursors=["0-0"] * 10,
    )
    called.add("reclaim")
    assert await s.requeue(qk, [held[1].rand], events_maxlen=ev, retention_ms=ret) == ["requeued"]
    called.add("requeue")
    await s.reconcile(
        qk, [held[1].rand], events_maxlen=ev, retention_ms=ret, dlq_enabled=True, dlq_maxlen=100
    )
    called.add("reconcile")
    await s.promote(qk, epoch=1, limit=10, events_maxlen=ev, retention_ms=ret)
    called.add("promote")
    assert (await s.group_set(qk, "g1", paused=True, weight=2))[:2] == [1, 2]
    await s.group_set(qk, "g1", paused=False, weight=None)
    called.add("group_set")
    # Nothing is dropped while the queue holds tasks (its keys stay for the audit of keys).
    dropped, _ = await s.drop_queue(qk)
    called.add("drop_queue")
    assert not dropped
    await s.purge(qk, limit=100, events_maxlen=ev, retention_ms=ret)
    called.add("purge")
    await s.discard(qk, [held[1].rand], events_maxlen=ev)
    called.add("discard")
    await s.prune_consumers(qk, min_idle_ms=0)
    called.add("prune_consumers")
    assert await s.history_depth(qk, waiting=3, in_flight=1, delayed=2) == 1
    async with s.redis.pipeline(transaction=False) as pipe:
        await s.history_depth(qk, waiting=3, in_flight=1, delayed=2, client=pipe)
        assert await pipe.execute() == [1]
    called.add("history_depth")
    assert await s.grow_partitions(qk, 2) == (1, 2)
    assert await s.grow_partitions(qk, 1) == (2, 2)  # it never shrinks
    called.add("grow_partitions")
    return called


async def _exercise_globals(s: RecordingScripts, settings: Settings) -> set[str]:
    k = Keys(settings.namespace)
    assert await s.leader_lease(k.leader, "acquire", "1:a", 1000)
    assert await s.leader_lease(k.leader, "renew", "1:a", 1000)
    assert await s.leader_lease(k.leader, "release", "1:a", 1000)
    assert await s.heartbeat(k.workers, "w1") > 0
    assert await s.stale_workers(k.workers, 3_600_000) == []
    assert await s.register_queues(k.queues, ["audit-q"], 0) == [True]
    assert await s.unregister_queue(k.queues, "audit-q")
    assert await s.wf_settle(k.workflows_pending, [(HEX32, 1.0)]) == 0
    return set(GLOBAL_SCRIPTS)


async def _exercise_workflows(s: RecordingScripts, settings: Settings) -> set[str]:
    k = Keys(settings.namespace)
    key = k.workflow(HEX32)
    fields = ["n", "2", "left", "2", "pol", "fail", "out", "1", "s:0", "pending", "q:0", "{}"]
    fields += ["s:1", "pending", "q:1", "{}", "d:1", "1", "x:0", "1", "i:1", "0"]
    assert await s.wf_create(key, fields, retention_ms=60_000) == "created"
    await s.wf_queued(key, [(0, f"q:{HEX32}")], published="", retention_ms=60_000)
    await s.wf_advance(key, [0, "succeeded", "1"], retention_ms=60_000)
    assert await s.wf_cancel(key, retention_ms=60_000) == ("cancelled", "cancelled", [])
    # Not a batch: refused, but the call names its hash alone all the same.
    assert await s.wf_batch_add(key, [b"{}"], max_steps=10, retention_ms=60_000) == (
        "not_found",
        "",
    )
    assert await s.wf_batch_seal(key, retention_ms=60_000) == ("not_found", "")
    return set(WORKFLOW_SCRIPTS)


AUDIT_QUEUES = ("emails", "a.b-c_9", "q")


@pytest.fixture
async def audit(redis: aioredis.Redis, settings: Settings) -> tuple[RecordingScripts, set[str]]:
    s = RecordingScripts(redis)
    called: set[str] = set()
    for queue in AUDIT_QUEUES:
        called |= await _exercise_queue(s, settings, queue)
    called |= await _exercise_globals(s, settings)
    called |= await _exercise_workflows(s, settings)
    return s, called


NOT_TRANSITIONS = {"ensure", "reload", "version", "pipelined"}
"""Library housekeeping: no keys, so nothing to audit."""


def _public_wrappers() -> set[str]:
    return {
        name
        for name, fn in inspect.getmembers(Scripts, inspect.iscoroutinefunction)
        if not name.startswith("_") and name not in NOT_TRANSITIONS
    }


async def test_slot_audit_covers_every_script_and_wrapper(
    audit: tuple[RecordingScripts, set[str]],
) -> None:
    s, called = audit
    # A new script or wrapper fails here until the audit exercises it.
    assert {name for name, _, _ in s.calls} == set(SCRIPT_NAMES)
    assert called == _public_wrappers()


def _slot_violations(calls: Sequence[tuple[str, list[str], list[Any]]], ns: str) -> list[str]:
    """Every way a recorded queue-script call breaks the one-slot rule (empty: none)."""
    problems: list[str] = []
    channel = Keys(ns).cancel_channel
    for name, keys, args in calls:
        if name in NOT_QUEUE_SCRIPTS:
            continue
        slots = {hash_slot(k) for k in keys}
        if len(slots) != 1:
            problems.append(f"{name}: cross-slot call {keys}")
            continue
        queue = keys[0].split("{", 1)[1].split("}", 1)[0]
        tag = f"{ns}:{{{queue}}}:"
        problems += [f"{name}: key outside the queue {k}" for k in keys if not k.startswith(tag)]
        # Scripts build task and idempotency keys from prefixes in ARGV: same tag, same slot.
        for arg in args:
            if not isinstance(arg, str) or not arg.startswith(f"{ns}:") or arg == channel:
                continue
            if not arg.startswith(tag) or hash_slot(arg + HEX32) != hash_slot(queue):
                problems.append(f"{name}: builds keys from {arg}")
        no_prefix = {"cancel", "progress", "prune_consumers", "drop_queue", "grow_partitions"}
        if name not in no_prefix and args[0] != f"{tag}t:":
            problems.append(f"{name}: ARGV[1] is {args[0]!r}, not the task key prefix")
    return problems


async def test_slot_audit_every_queue_script_call_is_single_slot(
    audit: tuple[RecordingScripts, set[str]], settings: Settings
) -> None:
    s, _ = audit
    queue_calls = [c for c in s.calls if c[0] not in NOT_QUEUE_SCRIPTS]
    assert len(queue_calls) >= len(AUDIT_QUEUES) * (len(SCRIPT_NAMES) - len(NOT_QUEUE_SCRIPTS))
    assert _slot_violations(s.calls, settings.namespace) == []


async def test_slot_audit_catches_a_global_key_in_a_queue_script(
    audit: tuple[RecordingScripts, set[str]], settings: Settings
) -> None:
    """The checker itself: a global key (or a foreign prefix) in any queue call is reported."""
    s, _ = audit
    k = Keys(settings.namespace)
    for name, keys, args in s.calls:
        if name in NOT_QUEUE_SCRIPTS:
            continue
        for extra in (k.queues, k.workers, k.leader_epoch, k.queue("other").meta):
            assert _slot_violations([(name, [*keys, extra], args)], settings.namespace)
        foreign = [k.queue("other").task_prefix, *args[1:]] if args else args
        if name not in {"cancel", "progress", "drop_queue", "grow_partitions"}:  # no key prefix
            assert _slot_violations([(name, keys, foreign)], settings.namespace)


async def test_slot_audit_global_scripts_take_one_key(
    audit: tuple[RecordingScripts, set[str]],
) -> None:
    s, _ = audit
    global_calls = [(n, k) for n, k, _ in s.calls if n in GLOBAL_SCRIPTS]
    assert len(global_calls) == 8
    for name, keys in global_calls:
        assert len(keys) == 1, f"{name} combines global keys: {keys}"
        assert "{" not in keys[0]


async def test_slot_audit_workflow_scripts_take_their_workflow_hash_alone(
    audit: tuple[RecordingScripts, set[str]], settings: Settings
) -> None:
    s, _ = audit
    calls = [(n, k) for n, k, _ in s.calls if n in WORKFLOW_SCRIPTS]
    assert {n for n, _ in calls} == WORKFLOW_SCRIPTS
    for name, keys in calls:
        assert keys == [Keys(settings.namespace).workflow(HEX32)], name


async def test_slot_audit_agrees_with_the_server(
    audit: tuple[RecordingScripts, set[str]], cluster_node: syncredis.Redis
) -> None:
    s, _ = audit
    seen: set[str] = set()
    for _, keys, _ in s.calls:
        for key in keys:
            if key not in seen:
                seen.add(key)
                assert hash_slot(key) == _server_slot(cluster_node, key), key
    assert seen


async def test_slot_audit_keys_written_stay_in_their_queue_slot(
    audit: tuple[RecordingScripts, set[str]], redis: aioredis.Redis, settings: Settings
) -> None:
    """What the scripts wrote (including keys built from ARGV prefixes): queue keys in the
    queue's slot, and no key outside ``dtq:{<q>}:*`` except the known global ones."""
    k = Keys(settings.namespace)
    globals_ = {
        k.queues,
        k.workers,
        k.leader,
        k.leader_epoch,
        k.schedules,
        k.schedules_state,
        k.events,
        k.audit,
    }
    written = [key async for key in redis.scan_iter(count=1000)]
    assert written
    for key in written:
        if key in globals_ or key == k.workflow(HEX32):
            continue
        assert key.startswith(f"{settings.namespace}:{{"), key
        queue = key.split("{", 1)[1].split("}", 1)[0]
        assert queue in AUDIT_QUEUES, key
        assert hash_slot(key) == hash_slot(queue), key


# -- every key a function touches, checked by Redis in cluster mode -----------------------------

SAME_SLOT_RULE = "do not hash to the same slot"
"""Redis's refusal (7.0+, cluster mode) of a function touching a key outside the slot of the
keys it declared: keys it builds from ARGV prefixes or reads from a hash included."""


async def test_slot_audit_every_key_a_function_touches_is_in_its_slot(
    cluster_node: syncredis.Redis, settings: Settings
) -> None:
    """Every transition, run on a cluster-mode node that serves every slot: Redis refuses any
    key a function touches outside the slot of its declared keys, so the whole audit passing
    there proves that no function writes or reads a key of another slot, however it builds
    the key (the static audits above see only what the caller passes)."""
    port = cluster_node.connection_pool.connection_kwargs["port"]
    on_cluster = settings.with_overrides(redis_url=f"redis+cluster://127.0.0.1:{port}")
    redis = connect(on_cluster)
    try:
        await redis.flushall()
        s = RecordingScripts(redis)
        called: set[str] = set()
        for queue in AUDIT_QUEUES:
            called |= await _exercise_queue(s, on_cluster, queue)
        called |= await _exercise_globals(s, on_cluster)
        called |= await _exercise_workflows(s, on_cluster)
        assert {name for name, _, _ in s.calls} == set(SCRIPT_NAMES)
        assert called == _public_wrappers()
    finally:
        await redis.aclose()


def test_slot_audit_the_cluster_node_refuses_a_key_of_another_slot(
    cluster_node: syncredis.Redis,
) -> None:
    """The oracle itself: a function that writes a key it builds from ARGV, in another
    queue's slot, is refused on the cluster-mode node (and allowed in its own slot)."""
    cluster_node.function_load(
        "#!lua name=slot_probe\n"
        "redis.register_function('slot_probe', function(KEYS, ARGV)\n"
        "  redis.call('SET', ARGV[1] .. 'x', 1) return 1 end)",
        replace=True,
    )
    own, other = Keys().queue("a"), Keys().queue("b")
    try:
        assert cluster_node.fcall("slot_probe", 1, own.meta, own.task_prefix) == 1
        with pytest.raises(syncredis.ResponseError, match=SAME_SLOT_RULE):
            cluster_node.fcall("slot_probe", 1, own.meta, other.task_prefix)
    finally:
        cluster_node.function_delete("slot_probe")
