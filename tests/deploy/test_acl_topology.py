"""The ``dtq-topology`` ACL user is enough for Redis' own machinery on compose's cluster and
sentinel profiles, on real redis-server processes loading the generated ACL file: a replica
syncs as that user, sentinels fail a master over as that user, ``redis-cli --cluster create``
makes a cluster as that user, and a dtq user connects to the cluster with redis-py's cluster
client (CLUSTER SLOTS, COMMAND)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis
from redis.cluster import RedisCluster

from dtq_devtools import topology
from dtq_devtools.testing import free_port, terminate, wait_until_sync
from tests.deploy.conftest import ADMIN, ADMIN_PASSWORD, AclRedis, acl_file_with_admin, need_tool

pytestmark = pytest.mark.slow

USER = "dtq-topology"


@pytest.fixture
def aclfile(tmp_path: Path, secrets_dir: Path) -> Path:
    return acl_file_with_admin(secrets_dir, tmp_path / "users.acl", ADMIN_PASSWORD)


def password(secrets_dir: Path, make_secrets: ModuleType, user: str) -> str:
    return (secrets_dir / make_secrets.password_file(user)).read_text().strip()


def admin(port: int) -> redis.Redis:
    return redis.Redis(
        port=port, username=ADMIN, password=ADMIN_PASSWORD, decode_responses=True, socket_timeout=2
    )


@pytest.fixture
def servers() -> Iterator[list[AclRedis | subprocess.Popen[bytes]]]:
    started: list[AclRedis | subprocess.Popen[bytes]] = []
    yield started
    for item in reversed(started):
        if isinstance(item, AclRedis):
            item.stop()
        else:
            terminate(item)


def test_sentinels_fail_over_a_master_as_the_topology_user(
    tmp_path: Path,
    aclfile: Path,
    secrets_dir: Path,
    make_secrets: ModuleType,
    servers: list[AclRedis | subprocess.Popen[bytes]],
) -> None:
    need_tool("redis-server")
    secret = password(secrets_dir, make_secrets, USER)
    auth = ("--masteruser", USER, "--masterauth", secret)
    master = AclRedis(tmp_path / "master", aclfile, *auth)
    servers.append(master)
    replica = AclRedis(
        tmp_path / "replica", aclfile, *auth, "--replicaof", "127.0.0.1", str(master.port)
    )
    servers.append(replica)
    with admin(replica.port) as r:
        wait_until_sync(
            lambda: r.info("replication")["master_link_status"] == "up",
            timeout=30,
            message="the replica syncs as dtq-topology",
        )
    ports = [free_port() for _ in range(3)]
    for port in ports:
        folder = tmp_path / f"sentinel-{port}"
        folder.mkdir()
        conf = folder / "sentinel.conf"
        conf.write_text(
            topology.sentinel_conf(port, folder, master.port, down_after_ms=1000)
            + f"sentinel auth-user {topology.SENTINEL_MASTER} {USER}\n"
            + f"sentinel auth-pass {topology.SENTINEL_MASTER} {secret}\n"
        )
        servers.append(
            subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    def known() -> bool:
        for port in ports:
            with topology.node(port) as s:
                replicas = s.execute_command("SENTINEL", "REPLICAS", topology.SENTINEL_MASTER)
                others = s.execute_command("SENTINEL", "SENTINELS", topology.SENTINEL_MASTER)
            if len(replicas) < 1 or len(others) < 2:
                return False
        return True

    topology.wait_for("the sentinels know the set", known, 30)
    os.kill(master.proc.pid, signal.SIGKILL)  # the master this test started
    master.proc.wait(10)
    wait_until_sync(
        lambda: topology.sentinel_master_port(ports[0]) == replica.port,
        timeout=30,
        interval=0.1,
        message="the sentinels promote the replica",
    )
    with admin(replica.port) as r:
        assert r.info("replication")["role"] == "master"


def test_the_cluster_is_created_and_replicated_as_the_topology_user(
    tmp_path: Path,
    aclfile: Path,
    secrets_dir: Path,
    make_secrets: ModuleType,
    servers: list[AclRedis | subprocess.Popen[bytes]],
) -> None:
    need_tool("redis-cli")
    secret = password(secrets_dir, make_secrets, USER)
    nodes = []
    for i in range(6):
        node = AclRedis(
            tmp_path / f"node{i}",
            aclfile,
            *topology.cluster_node_args(2000, free_port()),
            "--masteruser",
            USER,
            "--masterauth",
            secret,
        )
        servers.append(node)
        nodes.append(node)
    ports = [n.port for n in nodes]
    done = subprocess.run(
        [*topology.cluster_create_command(ports, 1), "--user", USER],
        env={**os.environ, "REDISCLI_AUTH": secret},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-500:]

    def replicated() -> bool:
        links = []
        for port in ports:
            with admin(port) as c:
                if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
                info = c.info("replication")
            if info["role"] == "slave":
                links.append(info["master_link_status"])
        return links == ["up"] * 3

    wait_until_sync(replicated, timeout=60, interval=0.1, message="3 replicas in sync")
    api = password(secrets_dir, make_secrets, "dtq-api")
    with RedisCluster(
        host="127.0.0.1", port=ports[0], username="dtq-api", password=api, decode_responses=True
    ) as client:
        client.set("dtq:{q}:t:1", "v")
        assert client.get("dtq:{q}:t:1") == "v"
