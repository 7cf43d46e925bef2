"""H1: Redis ACL least privilege (catalogue H1, docs/testing.md).

The real generator renders ``deploy/redis/users.acl.template``; a real redis-server loads the
result. Every command each user is granted must be allowed on a key of the namespace, every
command of the deny list must be refused for every app user, and the default user is off.
``ACL DRYRUN`` checks a command without running it; a few are also sent for real, as the
user, to see NOPERM and NOAUTH on the wire and the denials in ``ACL LOG``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis
from redis.exceptions import AuthenticationError, NoPermissionError

from dtq_core.protocol.keys import Keys
from dtq_core.protocol.library import lua_sources
from tests.deploy.conftest import ADMIN, ADMIN_PASSWORD, ROOT, AclRedis

TEMPLATE = ROOT / "deploy" / "redis" / "users.acl.template"

APP_USERS = ("dtq-api", "dtq-worker", "dtq-scheduler", "dtq-gateway", "dtq-migrate", "dtq-health")
TOPOLOGY_USER = "dtq-topology"
"""Not a dtq process: Redis' replicas, sentinels and cluster-create job on compose's cluster
and sentinel profiles (test_the_topology_user_runs_redis_machinery_and_touches_no_key)."""
ALL_USERS = (*APP_USERS, "dtq-ops", TOPOLOGY_USER)

K = "dtq:{q}:t:1"  # a task hash: inside the namespace
S = "dtq:{q}:p5"  # a work stream
EV = "dtq:{q}:events"  # a lifecycle-event stream

# A valid invocation of every command the template grants (ACL DRYRUN checks arity too).
SAMPLES: dict[str, list[str]] = {
    "ping": ["PING"],
    "hello": ["HELLO", "2"],
    "cluster|info": ["CLUSTER", "INFO"],
    "client|setname": ["CLIENT", "SETNAME", "x"],
    "client|list": ["CLIENT", "LIST"],
    "cluster|slots": ["CLUSTER", "SLOTS"],
    "command": ["COMMAND"],
    "fcall": ["FCALL", "dtq_x_claim", "1", S],
    "fcall_ro": ["FCALL_RO", "dtq_x_version", "0"],
    "time": ["TIME"],
    "wait": ["WAIT", "1", "500"],
    "config|get": ["CONFIG", "GET", "maxmemory-policy"],
    "multi": ["MULTI"],
    "exec": ["EXEC"],
    "discard": ["DISCARD"],
    "watch": ["WATCH", K],
    "unwatch": ["UNWATCH"],
    "scan": ["SCAN", "0", "MATCH", "dtq:*"],
    "get": ["GET", K],
    "set": ["SET", K, "v"],
    "del": ["DEL", K],
    "exists": ["EXISTS", K],
    "incr": ["INCR", "dtq:{q}:gq:wait"],
    "incrby": ["INCRBY", "dtq:leader:epoch", "1"],
    "decr": ["DECR", "dtq:{q}:gq:wait"],
    "pexpire": ["PEXPIRE", K, "1000"],
    "pttl": ["PTTL", K],
    "hget": ["HGET", K, "f"],
    "hmget": ["HMGET", K, "f", "g"],
    "hgetall": ["HGETALL", K],
    "hkeys": ["HKEYS", K],
    "hlen": ["HLEN", K],
    "hstrlen": ["HSTRLEN", K, "f"],
    "hset": ["HSET", K, "f", "v"],
    "hsetnx": ["HSETNX", K, "f", "v"],
    "hdel": ["HDEL", K, "f"],
    "hincrby": ["HINCRBY", K, "f", "1"],
    "sadd": ["SADD", "dtq:queues", "q"],
    "smembers": ["SMEMBERS", "dtq:queues"],
    "srem": ["SREM", "dtq:queues", "q"],
    "sismember": ["SISMEMBER", "dtq:queues", "q"],
    "scard": ["SCARD", "dtq:queues"],
    "zadd": ["ZADD", "dtq:{q}:delayed", "1", "m"],
    "zrem": ["ZREM", "dtq:{q}:delayed", "m"],
    "zcard": ["ZCARD", "dtq:{q}:delayed"],
    "zrange": ["ZRANGE", "dtq:{q}:delayed", "0", "-1"],
    "zrangebyscore": ["ZRANGEBYSCORE", "dtq:{q}:delayed", "-inf", "+inf"],
    "zrevrangebyscore": ["ZREVRANGEBYSCORE", "dtq:{q}:delayed", "+inf", "-inf"],
    "zremrangebyscore": ["ZREMRANGEBYSCORE", "dtq:{q}:delayed", "-inf", "1"],
    "zscore": ["ZSCORE", "dtq:{q}:delayed", "m"],
    "zmscore": ["ZMSCORE", "dtq:workflows:pending", "m"],
    "zpopmin": ["ZPOPMIN", "dtq:{q}:g:x:w"],
    "xadd": ["XADD", S, "*", "f", "v"],
    "xdel": ["XDEL", S, "1-1"],
    "xlen": ["XLEN", S],
    "xrange": ["XRANGE", S, "-", "+"],
    "xrevrange": ["XREVRANGE", S, "+", "-"],
    "xread": ["XREAD", "COUNT", "1", "STREAMS", S, "0"],
    "xreadgroup": ["XREADGROUP", "GROUP", "workers", "c", "COUNT", "1", "STREAMS", S, ">"],
    "xack": ["XACK", S, "workers", "1-1"],
    "xclaim": ["XCLAIM", S, "workers", "c", "0", "1-1"],
    "xautoclaim": ["XAUTOCLAIM", S, "workers", "c", "0", "0"],
    "xtrim": ["XTRIM", S, "MINID", "~", "1-1"],
    "xpending": ["XPENDING", S, "workers"],
    "xinfo|stream": ["XINFO", "STREAM", S],
    "xinfo|groups": ["XINFO", "GROUPS", S],
    "xinfo|consumers": ["XINFO", "CONSUMERS", S, "workers"],
    "xgroup|create": ["XGROUP", "CREATE", S, "workers", "0", "MKSTREAM"],
    "xgroup|createconsumer": ["XGROUP", "CREATECONSUMER", S, "workers", "c"],
    "xgroup|delconsumer": ["XGROUP", "DELCONSUMER", S, "workers", "c"],
    "publish": ["PUBLISH", "dtq:cancel", "x"],
    "subscribe": ["SUBSCRIBE", "dtq:cancel"],
    "unsubscribe": ["UNSUBSCRIBE", "dtq:cancel"],
    "function|load": ["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('f', 'x')"],
    "function|list": ["FUNCTION", "LIST"],
    "function|delete": ["FUNCTION", "DELETE", "x"],
    "info": ["INFO", "memory"],
    "slowlog|get": ["SLOWLOG", "GET"],
    "slowlog|len": ["SLOWLOG", "LEN"],
    "latency|latest": ["LATENCY", "LATEST"],
    "latency|history": ["LATENCY", "HISTORY", "command"],
    "latency|doctor": ["LATENCY", "DOCTOR"],
    "memory|usage": ["MEMORY", "USAGE", K],
    "memory|stats": ["MEMORY", "STATS"],
    "acl|log": ["ACL", "LOG"],
    "acl|whoami": ["ACL", "WHOAMI"],
    "dbsize": ["DBSIZE"],
}

# Refused to every app user (catalogue H1), whatever else it is granted.
DENIED: dict[str, list[str]] = {
    "flushall": ["FLUSHALL"],
    "flushdb": ["FLUSHDB"],
    "keys": ["KEYS", "*"],
    "config|set": ["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    "config|rewrite": ["CONFIG", "REWRITE"],
    "config|resetstat": ["CONFIG", "RESETSTAT"],
    "debug": ["DEBUG", "SLEEP", "0"],
    "module|list": ["MODULE", "LIST"],
    "eval": ["EVAL", "return 1", "0"],
    "evalsha": ["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff831", "0"],
    "eval_ro": ["EVAL_RO", "return 1", "0"],
    "script|load": ["SCRIPT", "LOAD", "return 1"],
    "script|flush": ["SCRIPT", "FLUSH"],
    "function|flush": ["FUNCTION", "FLUSH"],
    "function|restore": ["FUNCTION", "RESTORE", "x"],
    "shutdown": ["SHUTDOWN", "NOSAVE"],
    "acl|setuser": ["ACL", "SETUSER", "x"],
    "acl|list": ["ACL", "LIST"],
    "acl|getuser": ["ACL", "GETUSER", "default"],
    "migrate": ["MIGRATE", "127.0.0.1", "1", K, "0", "1000"],
    "monitor": ["MONITOR"],
    "replicaof": ["REPLICAOF", "NO", "ONE"],
    "save": ["SAVE"],
    "bgsave": ["BGSAVE"],
    "bgrewriteaof": ["BGREWRITEAOF"],
    "swapdb": ["SWAPDB", "0", "1"],
    "client|kill": ["CLIENT", "KILL", "ID", "1"],
    "client|pause": ["CLIENT", "PAUSE", "10"],
    "failover": ["FAILOVER"],
    "foreign key read": ["GET", "other:key"],
    "foreign key write": ["SET", "other:key", "v"],
    "foreign channel": ["PUBLISH", "other-channel", "x"],
    "foreign subscribe": ["SUBSCRIBE", "other-channel"],
}

# Grants that a user's job needs and that the deny list names: each on purpose, documented in
# docs/security.md.
EXCEPTIONS = {
    ("dtq-migrate", "function|delete"): "prunes the previous version's library",
}


def user_line(user: str) -> str:
    for line in TEMPLATE.read_text().splitlines():
        if line.startswith(f"user {user} "):
            return line
    raise AssertionError(f"{user} is not in {TEMPLATE}")


def granted(user: str) -> list[str]:
    """The ``+command`` grants of ``user``'s root selector in the template (the ``(...)``
    selectors that follow it are checked by the key matrix)."""
    root = user_line(user).partition("(")[0]
    return [t[1:] for t in root.split() if t.startswith("+")]


def selectors(user: str) -> list[str]:
    """The ``(...)`` selectors of ``user``'s line."""
    return re.findall(r"\(([^)]*)\)", user_line(user))


def dryrun(admin: redis.Redis, user: str, argv: list[str]) -> str:
    reply = admin.execute_command("ACL", "DRYRUN", user, *argv)
    return reply.decode() if isinstance(reply, bytes) else str(reply)


@pytest.fixture
def admin(acl_redis: AclRedis) -> Iterator[redis.Redis]:
    client = redis.Redis(
        port=acl_redis.port, username=ADMIN, password=ADMIN_PASSWORD, decode_responses=True
    )
    yield client
    client.close()


def as_user(
    acl_redis: AclRedis, secrets_dir: Path, make_secrets: ModuleType, user: str
) -> redis.Redis:
    password = (secrets_dir / make_secrets.password_file(user)).read_text().strip()
    return redis.Redis(port=acl_redis.port, username=user, password=password, decode_responses=True)


def test_template_users_are_the_services(make_secrets: ModuleType) -> None:
    assert set(make_secrets.acl_users(TEMPLATE.read_text())) == set(ALL_USERS)
    for user in ALL_USERS:
        samples = TOPOLOGY_SAMPLES if user == TOPOLOGY_USER else SAMPLES
        assert set(granted(user)) <= set(samples), f"{user}: a grant without a sample"


TOPOLOGY_SAMPLES: dict[str, list[str]] = {
    "ping": ["PING"],
    "hello": ["HELLO", "2"],
    "client|setname": ["CLIENT", "SETNAME", "sentinel-1"],
    "psync": ["PSYNC", "?", "-1"],
    "sync": ["SYNC"],
    "replconf": ["REPLCONF", "listening-port", "6379"],
    "info": ["INFO", "replication"],
    "role": ["ROLE"],
    "multi": ["MULTI"],
    "exec": ["EXEC"],
    "slaveof": ["SLAVEOF", "NO", "ONE"],
    "replicaof": ["REPLICAOF", "NO", "ONE"],
    "config|rewrite": ["CONFIG", "REWRITE"],
    "client|kill": ["CLIENT", "KILL", "TYPE", "normal"],
    "script|kill": ["SCRIPT", "KILL"],
    "publish": ["PUBLISH", "__sentinel__:hello", "x"],
    "subscribe": ["SUBSCRIBE", "__sentinel__:hello"],
    "cluster": ["CLUSTER", "MEET", "127.0.0.1", "7000"],
}
"""What a replica (PSYNC, REPLCONF), a sentinel (Redis' Sentinel documentation lists these)
and ``redis-cli --cluster create`` (CLUSTER ..., INFO) send as dtq-topology."""


def test_the_topology_user_runs_redis_machinery_and_touches_no_key(admin: redis.Redis) -> None:
    wrong = {c: dryrun(admin, TOPOLOGY_USER, TOPOLOGY_SAMPLES[c]) for c in granted(TOPOLOGY_USER)}
    assert {c: r for c, r in wrong.items() if r != "OK"} == {}
    for argv in (["GET", K], ["XREAD", "STREAMS", S, "0"], ["FCALL", "dtq_x_claim", "1", S]):
        assert dryrun(admin, TOPOLOGY_USER, argv) != "OK", argv
    for argv in (["PUBLISH", "dtq:cancel", "x"], ["FLUSHALL"], ["EVAL", "return 1", "0"]):
        assert dryrun(admin, TOPOLOGY_USER, argv) != "OK", argv


def test_rendered_file_holds_hashes_not_passwords(
    secrets_dir: Path, make_secrets: ModuleType
) -> None:
    text = (secrets_dir / "users.acl").read_text()
    for user in ALL_USERS:
        password = (secrets_dir / make_secrets.password_file(user)).read_text().strip()
        assert password not in text
        assert re.search(rf"^user {user} on #[0-9a-f]{{64}} ", text, re.M), user
    assert "@@" not in text
    assert "\n#" not in text  # Redis refuses comment lines in an ACL file


def test_namespace_is_rendered(make_secrets: ModuleType) -> None:
    template = TEMPLATE.read_text()
    passwords = dict.fromkeys(make_secrets.acl_users(template), "pw")
    text = make_secrets.render_acl(template, passwords, "acme")
    assert "~acme:{*}:*" in text
    assert "%W~acme:audit +xadd" in text
    assert "dtq:" not in text
    with pytest.raises(ValueError, match="namespace"):
        make_secrets.render_acl(template, passwords, "bad name")


@pytest.mark.parametrize("user", [u for u in ALL_USERS if u not in ("dtq-gateway", TOPOLOGY_USER)])
def test_every_grant_is_allowed_in_the_namespace(admin: redis.Redis, user: str) -> None:
    # The gateway's grants hold on the event streams only: test_gateway_reads_events_only.
    wrong = {cmd: dryrun(admin, user, SAMPLES[cmd]) for cmd in granted(user)}
    wrong = {cmd: reply for cmd, reply in wrong.items() if reply != "OK"}
    assert wrong == {}


def test_gateway_reads_events_only(admin: redis.Redis) -> None:
    for argv in (
        ["XREAD", "COUNT", "1", "STREAMS", EV, "0"],
        ["XRANGE", EV, "-", "+"],
        ["XREVRANGE", "dtq:events", "+", "-"],
        ["XINFO", "STREAM", EV],
        ["SMEMBERS", "dtq:queues"],
        ["PING"],
    ):
        assert dryrun(admin, "dtq-gateway", argv) == "OK", argv
    for argv in (
        ["XRANGE", S, "-", "+"],  # a work stream: task arguments
        ["HGETALL", K],  # a task record
        ["XADD", EV, "*", "f", "v"],  # read-only even on its own keys
        ["SADD", "dtq:queues", "x"],
        ["FCALL", "dtq_x_claim", "1", S],
        ["SUBSCRIBE", "dtq:cancel"],
    ):
        assert dryrun(admin, "dtq-gateway", argv) != "OK", argv


# Who may read (r) and write (w) each global key, and the meta hash of a queue; "a": append
# only (XADD, and no DEL, XTRIM or XDEL). A user not named has no access. The same table is in
# deploy/redis/users.acl.template and docs/security.md.
QUEUE_RW = {"dtq-api": "rw", "dtq-worker": "rw", "dtq-scheduler": "rw", "dtq-ops": "rw"}
ACCESS: dict[str, dict[str, str]] = {
    "dtq:queues": {
        "dtq-api": "rw",
        "dtq-worker": "rw",
        "dtq-scheduler": "rw",
        "dtq-gateway": "r",
        "dtq-ops": "rw",
    },
    "dtq:workers": {"dtq-api": "r", "dtq-worker": "rw", "dtq-scheduler": "rw", "dtq-ops": "r"},
    "dtq:worker:w1": {"dtq-api": "r", "dtq-worker": "rw", "dtq-scheduler": "r", "dtq-ops": "r"},
    "dtq:leader": {"dtq-scheduler": "rw", "dtq-ops": "r"},
    "dtq:leader:epoch": {"dtq-scheduler": "rw", "dtq-ops": "r"},
    "dtq:schedules": {"dtq-api": "rw", "dtq-scheduler": "rw", "dtq-ops": "r"},
    "dtq:schedules:state": {"dtq-api": "rw", "dtq-scheduler": "rw", "dtq-ops": "r"},
    "dtq:schedules:last": {"dtq-api": "rw", "dtq-scheduler": "rw", "dtq-ops": "r"},
    "dtq:events": {"dtq-scheduler": "rw", "dtq-gateway": "r", "dtq-ops": "r"},
    "dtq:workflows": {"dtq-api": "rw", "dtq-scheduler": "rw", "dtq-ops": "rw"},
    "dtq:workflows:pending": {"dtq-api": "rw", "dtq-scheduler": "rw", "dtq-ops": "rw"},
    "dtq:{wf:1}:h": {"dtq-api": "rw", "dtq-scheduler": "rw", "dtq-ops": "rw"},
    "dtq:{q}:wfo": QUEUE_RW,
    "dtq:{q}:hist:1": QUEUE_RW,
    "dtq:audit": {"dtq-api": "ra", "dtq-ops": "ra"},
    "dtq:{q}:meta": {"dtq-api": "rw", "dtq-worker": "r", "dtq-scheduler": "rw", "dtq-ops": "rw"},
    "dtq:{q}:p5": QUEUE_RW,
    "dtq:{q}:t:1": QUEUE_RW,
    "dtq:{q}:delayed": QUEUE_RW,
    "dtq:{q}:dlq": QUEUE_RW,
    "dtq:{q}:events": {**QUEUE_RW, "dtq-gateway": "r"},
    "dtq:{q}:idem:1": {**QUEUE_RW, "dtq-worker": ""},  # only submits use idempotency keys
    "dtq:{q}:rate": QUEUE_RW,
    "dtq:{q}:g:x:w": QUEUE_RW,
    "dtq:{q}:gq:wait": QUEUE_RW,
}

# A read and a write of each key, with the command its service sends.
PROBES: dict[str, tuple[list[str], list[str]]] = {
    "dtq:queues": (["SMEMBERS", "dtq:queues"], ["SADD", "dtq:queues", "q"]),
    "dtq:workers": (["ZRANGE", "dtq:workers", "0", "-1"], ["ZADD", "dtq:workers", "1", "w1"]),
    "dtq:worker:w1": (["HGETALL", "dtq:worker:w1"], ["HSET", "dtq:worker:w1", "f", "v"]),
    "dtq:leader": (["GET", "dtq:leader"], ["SET", "dtq:leader", "me", "PX", "1000"]),
    "dtq:leader:epoch": (["GET", "dtq:leader:epoch"], ["SET", "dtq:leader:epoch", "99"]),
    "dtq:schedules": (["HGETALL", "dtq:schedules"], ["HSET", "dtq:schedules", "s", "{}"]),
    "dtq:schedules:state": (
        ["HGETALL", "dtq:schedules:state"],
        ["HSET", "dtq:schedules:state", "s", "0"],
    ),
    "dtq:schedules:last": (
        ["HGETALL", "dtq:schedules:last"],
        ["HSET", "dtq:schedules:last", "s", "{}"],
    ),
    "dtq:events": (["XRANGE", "dtq:events", "-", "+"], ["XADD", "dtq:events", "*", "f", "v"]),
    "dtq:workflows": (
        ["ZREVRANGEBYSCORE", "dtq:workflows", "+inf", "-inf"],
        ["ZREMRANGEBYSCORE", "dtq:workflows", "-inf", "1"],
    ),
    "dtq:workflows:pending": (
        ["ZRANGEBYSCORE", "dtq:workflows:pending", "-inf", "+inf"],
        ["ZADD", "dtq:workflows:pending", "1", "x"],
    ),
    "dtq:{wf:1}:h": (["HGETALL", "dtq:{wf:1}:h"], ["HSET", "dtq:{wf:1}:h", "st", "running"]),
    "dtq:{q}:wfo": (["ZRANGE", "dtq:{q}:wfo", "0", "-1"], ["ZADD", "dtq:{q}:wfo", "1", "x"]),
    "dtq:{q}:hist:1": (["HGETALL", "dtq:{q}:hist:1"], ["HINCRBY", "dtq:{q}:hist:1", "s0", "1"]),
    "dtq:audit": (["XRANGE", "dtq:audit", "-", "+"], ["XADD", "dtq:audit", "*", "f", "v"]),
    "dtq:{q}:meta": (["HGETALL", "dtq:{q}:meta"], ["HSET", "dtq:{q}:meta", "epoch", "99"]),
    "dtq:{q}:p5": (["XRANGE", S, "-", "+"], ["XADD", S, "*", "t", "x"]),
    "dtq:{q}:t:1": (["HGETALL", K], ["HSET", K, "st", "queued"]),
    "dtq:{q}:delayed": (
        ["ZRANGE", "dtq:{q}:delayed", "0", "-1"],
        ["ZADD", "dtq:{q}:delayed", "1", "x"],
    ),
    "dtq:{q}:dlq": (["XRANGE", "dtq:{q}:dlq", "-", "+"], ["XADD", "dtq:{q}:dlq", "*", "t", "x"]),
    "dtq:{q}:events": (["XRANGE", EV, "-", "+"], ["XADD", EV, "*", "type", "x"]),
    "dtq:{q}:idem:1": (["GET", "dtq:{q}:idem:1"], ["SET", "dtq:{q}:idem:1", "x"]),
    "dtq:{q}:rate": (["GET", "dtq:{q}:rate"], ["SET", "dtq:{q}:rate", "1"]),
    "dtq:{q}:g:x:w": (["ZRANGE", "dtq:{q}:g:x:w", "0", "-1"], ["ZPOPMIN", "dtq:{q}:g:x:w"]),
    "dtq:{q}:gq:wait": (["GET", "dtq:{q}:gq:wait"], ["INCR", "dtq:{q}:gq:wait"]),
}

# Erasing the audit trail: refused to every app user, whatever it may append.
ERASE_AUDIT = (
    ["DEL", "dtq:audit"],
    ["XTRIM", "dtq:audit", "MAXLEN", "0"],
    ["XDEL", "dtq:audit", "1-1"],
    ["UNLINK", "dtq:audit"],
    ["EXPIRE", "dtq:audit", "1"],
    ["RENAME", "dtq:audit", "dtq:{q}:x"],
    ["XSETID", "dtq:audit", "9-9"],
)


def matrix() -> list[tuple[str, str, list[str], bool]]:
    """Every (user, key, command, allowed?) of :data:`ACCESS`: each grant and each denial."""
    cases: list[tuple[str, str, list[str], bool]] = []
    for key, who in ACCESS.items():
        read, write = PROBES[key]
        for user in ALL_USERS:
            access = who.get(user, "")
            cases.append((user, key, read, "r" in access))
            cases.append((user, key, write, "w" in access or "a" in access))
            cases.append((user, key, ["DEL", key], "w" in access))
    return cases


@pytest.mark.parametrize(
    ("user", "key", "argv", "allowed"),
    matrix(),
    ids=[f"{u}-{' '.join(a[:1])}-{k}" for u, k, a, _ in matrix()],
)
def test_key_matrix(
    admin: redis.Redis, user: str, key: str, argv: list[str], allowed: bool
) -> None:
    reply = dryrun(admin, user, argv)
    if allowed:
        assert reply == "OK", reply
    else:
        assert reply != "OK"
        if argv[0].lower() in granted(user):
            # Refused for the key, not only for a command the user never sends.
            assert key in reply, reply


@pytest.mark.parametrize("user", ALL_USERS)
def test_nobody_erases_the_audit_trail(admin: redis.Redis, user: str) -> None:
    allowed = [argv for argv in ERASE_AUDIT if dryrun(admin, user, argv) == "OK"]
    assert allowed == []


def test_only_the_audit_append_has_a_selector_of_its_own() -> None:
    # A wider selector would add grants that the key matrix does not see.
    found = {user: selectors(user) for user in ALL_USERS}
    assert found == {
        user: (["%W~@@NS@@:audit +xadd"] if user in ("dtq-api", "dtq-ops") else [])
        for user in ALL_USERS
    }


def test_the_matrix_covers_every_key() -> None:
    # The queue-key patterns dtq:{*}:... can match no global key only while their names hold
    # no brace; and a key added to dtq_core.protocol.keys needs a row of its own here.
    keys = Keys()
    names = {
        getattr(keys, attr)
        for attr, value in vars(Keys).items()
        if isinstance(value, property) and attr not in {"cancel_channel", "workflow_channel"}
    } | {keys.worker("w1")}
    assert not any("{" in name for name in names)
    assert names == {key for key in ACCESS if "{" not in key}
    qk = keys.queue("q")
    queue_keys = {
        qk.meta, qk.streams[5], qk.task("1"), qk.delayed, qk.dlq, qk.events, qk.idem("1"),
        qk.rate, f"{qk.group('x')}:w", qk.groups_waiting, qk.workflow_outbox,
        qk.history(1), keys.workflow("1"),
    }  # fmt: skip
    assert queue_keys == {key for key in ACCESS if "{" in key}


@pytest.mark.parametrize("user", APP_USERS)
def test_deny_list_is_refused_to_every_app_user(admin: redis.Redis, user: str) -> None:
    allowed = {
        name: dryrun(admin, user, argv)
        for name, argv in DENIED.items()
        if (user, name) not in EXCEPTIONS
    }
    allowed = {name: reply for name, reply in allowed.items() if reply == "OK"}
    assert allowed == {}
    # Reads of the configuration: the API only (its /ready reports the eviction policy).
    config_get = dryrun(admin, user, ["CONFIG", "GET", "maxmemory-policy"])
    assert (config_get == "OK") == (user == "dtq-api")
    # Only the migrator loads functions.
    load = dryrun(admin, user, SAMPLES["function|load"])
    assert (load == "OK") == (user == "dtq-migrate")


def test_operators_get_diagnostics_but_nothing_destructive(admin: redis.Redis) -> None:
    for name in (
        "flushall",
        "flushdb",
        "keys",
        "config|set",
        "debug",
        "shutdown",
        "eval",
        "script|load",
        "function|flush",
        "acl|setuser",
        "module|list",
        "monitor",
    ):
        assert dryrun(admin, "dtq-ops", DENIED[name]) != "OK", name


def test_default_user_is_off(acl_redis: AclRedis, admin: redis.Redis) -> None:
    anonymous = redis.Redis(port=acl_redis.port)
    with pytest.raises(AuthenticationError):
        anonymous.ping()
    anonymous.close()
    flags = admin.acl_getuser("default")["flags"]
    assert "off" in flags
    assert "nopass" not in flags  # protected mode then applies to no connection either


def test_denials_on_the_wire_and_in_acl_log(
    acl_redis: AclRedis, admin: redis.Redis, secrets_dir: Path, make_secrets: ModuleType
) -> None:
    worker = as_user(acl_redis, secrets_dir, make_secrets, "dtq-worker")
    assert worker.ping()
    assert worker.hset(K, "f", "v") == 1
    for argv in (
        ["FLUSHALL"],
        ["CONFIG", "GET", "*"],
        ["EVAL", "return 1", "0"],
        ["FUNCTION", "FLUSH"],
        ["GET", "other:key"],
    ):
        with pytest.raises(NoPermissionError):
            worker.execute_command(*argv)

    # Handler code runs as dtq-worker: it can neither erase the audit trail nor take the lead,
    # nor raise a queue's promotion epoch (which would fence the real leader out of it).
    for argv in (
        ["DEL", "dtq:audit"],
        ["SET", "dtq:leader", "me"],
        ["HSET", "dtq:schedules", "s", "{}"],
        ["HSET", "dtq:{q}:meta", "epoch", "99"],
    ):
        with pytest.raises(NoPermissionError):
            worker.execute_command(*argv)
    worker.close()

    api = as_user(acl_redis, secrets_dir, make_secrets, "dtq-api")
    assert api.xadd("dtq:audit", {"action": "acl.test"}, maxlen=100000, approximate=True)
    assert len(api.xrange("dtq:audit")) == 1
    with pytest.raises(NoPermissionError):
        api.xtrim("dtq:audit", maxlen=0)
    api.close()

    gateway = as_user(acl_redis, secrets_dir, make_secrets, "dtq-gateway")
    assert gateway.xrange(EV) == []
    with pytest.raises(NoPermissionError):
        gateway.hget(K, "f")
    gateway.close()

    migrate = as_user(acl_redis, secrets_dir, make_secrets, "dtq-migrate")
    assert (
        migrate.function_load(
            "#!lua name=acltest\nredis.register_function('acltest_f', function() return 1 end)"
        )
        == "acltest"
    )
    with pytest.raises(NoPermissionError):
        migrate.get(K)
    migrate.close()

    health = as_user(acl_redis, secrets_dir, make_secrets, "dtq-health")
    assert health.ping()
    with pytest.raises(NoPermissionError):
        health.get(K)
    health.close()

    log = admin.acl_log(count=100)
    denied = {(e["username"], e["object"]) for e in log}
    assert ("dtq-worker", "flushall") in denied
    assert ("dtq-worker", "other:key") in denied
    assert ("dtq-gateway", "hget") in denied or ("dtq-gateway", K) in denied
    assert ("dtq-health", "get") in denied
    assert ("dtq-worker", "dtq:audit") in denied
    assert ("dtq-worker", "dtq:leader") in denied
    assert ("dtq-worker", "dtq:{q}:meta") in denied
    assert ("dtq-api", "dtq:audit") in denied


# The functions each user calls (the template's "Functions it calls" comments); the operators'
# CLI calls what the API does.
_API_FUNCTIONS = (
    "submit", "cancel", "requeue", "discard", "purge", "register_queues", "drop_queue",
    "unregister_queue", "grow_partitions", "group_set", "wf_create", "wf_queued", "wf_cancel",
    "wf_batch_add", "wf_batch_seal",
)  # fmt: skip
FUNCTIONS = {
    "dtq-api": _API_FUNCTIONS,
    "dtq-ops": _API_FUNCTIONS,
    "dtq-worker": (
        "claim",
        "finish",
        "extend_lease",
        "progress",
        "release",
        "reclaim",
        "heartbeat",
        "prune_consumers",
        "register_queues",
    ),
    "dtq-scheduler": (
        "leader_lease",
        "promote",
        "stale_workers",
        "reconcile",
        "submit",
        "prune_consumers",
        "cancel",
        "wf_create",
        "wf_advance",
        "wf_queued",
        "wf_settle",
        "history_depth",
    ),
}
_CALL = re.compile(r"""\b(?:rcall|redis\.pcall|redis\.call)\(\s*'([A-Z]+)'(?:,\s*'([A-Z]+)')?""")


def _lua_commands(code: str) -> set[str]:
    """The commands a piece of Lua sends (``xinfo|groups`` for a subcommand)."""
    out = set()
    for cmd, sub in _CALL.findall(code):
        name = cmd.lower()
        out.add(f"{name}|{sub.lower()}" if name in {"xinfo", "xgroup", "config"} and sub else name)
    if "rcall(taken and 'SADD' or 'SREM'" in code:
        out |= {"sadd", "srem"}
    return out


def _commands_of(function: str) -> set[str]:
    """What one function sends: its own code and the helpers it calls, transitively."""
    sources = lua_sources()
    parts = re.split(r"^local function (\w+)", sources["_lib"], flags=re.M)
    helpers = dict(zip(parts[1::2], parts[2::2], strict=True))
    todo, seen, code = [sources[function]], set(), []
    while todo:
        text = todo.pop()
        code.append(text)
        for name, body in helpers.items():
            if name not in seen and re.search(rf"\b{name}\(", text):
                seen.add(name)
                todo.append(body)
    return _lua_commands("\n".join(code))


@pytest.mark.parametrize("user", sorted(FUNCTIONS))
def test_each_user_is_granted_every_command_its_functions_send(user: str) -> None:
    """Functions run with the caller's ACL: a command one of them sends that the user lacks
    fails every call of it at run time (the worker lacked HLEN once, so no claim ran)."""
    grants = set(granted(user))
    missing = {
        f: sorted(_commands_of(f) - grants) for f in FUNCTIONS[user] if _commands_of(f) - grants
    }
    assert missing == {}
    comment = "\n".join(line for line in TEMPLATE.read_text().splitlines() if line.startswith("#"))
    assert all(f in comment for f in FUNCTIONS[user])
