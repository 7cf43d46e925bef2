"""H1: Redis ACL least privilege (RELIABILITY 3.7).

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

from tests.deploy.conftest import ADMIN, ADMIN_PASSWORD, ROOT, AclRedis

TEMPLATE = ROOT / "deploy" / "redis" / "users.acl.template"

APP_USERS = ("dtq-api", "dtq-worker", "dtq-scheduler", "dtq-gateway", "dtq-migrate", "dtq-health")
ALL_USERS = (*APP_USERS, "dtq-ops")

K = "dtq:{q}:t:1"  # a task hash: inside the namespace
S = "dtq:{q}:p5"  # a work stream
EV = "dtq:{q}:events"  # a lifecycle-event stream

# A valid invocation of every command the template grants (ACL DRYRUN checks arity too).
SAMPLES: dict[str, list[str]] = {
    "ping": ["PING"],
    "hello": ["HELLO", "2"],
    "client|setname": ["CLIENT", "SETNAME", "x"],
    "client|list": ["CLIENT", "LIST"],
    "fcall": ["FCALL", "dtq_x_claim", "1", S],
    "fcall_ro": ["FCALL_RO", "dtq_x_version", "0"],
    "time": ["TIME"],
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
    "incr": ["INCR", "dtq:leader:epoch"],
    "incrby": ["INCRBY", "dtq:leader:epoch", "1"],
    "pexpire": ["PEXPIRE", K, "1000"],
    "pttl": ["PTTL", K],
    "hget": ["HGET", K, "f"],
    "hmget": ["HMGET", K, "f", "g"],
    "hgetall": ["HGETALL", K],
    "hkeys": ["HKEYS", K],
    "hlen": ["HLEN", K],
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
    "zscore": ["ZSCORE", "dtq:{q}:delayed", "m"],
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

# Refused to every app user (RELIABILITY H1), whatever else it is granted.
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


def granted(user: str) -> list[str]:
    """The ``+command`` grants of ``user`` in the template."""
    for line in TEMPLATE.read_text().splitlines():
        if line.startswith(f"user {user} "):
            return [t[1:] for t in line.split() if t.startswith("+")]
    raise AssertionError(f"{user} is not in {TEMPLATE}")


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
        assert set(granted(user)) <= set(SAMPLES), f"{user}: a grant without a sample"


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
    assert "~acme:*" in text
    assert "~dtq:" not in text
    with pytest.raises(ValueError, match="namespace"):
        make_secrets.render_acl(template, passwords, "bad name")


@pytest.mark.parametrize("user", [u for u in ALL_USERS if u != "dtq-gateway"])
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
    worker.close()

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

    log = admin.acl_log()
    denied = {(e["username"], e["object"]) for e in log}
    assert ("dtq-worker", "flushall") in denied
    assert ("dtq-worker", "other:key") in denied
    assert ("dtq-gateway", "hget") in denied or ("dtq-gateway", K) in denied
    assert ("dtq-health", "get") in denied
