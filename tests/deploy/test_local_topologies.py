"""The Redis of ``just up --redis cluster|sentinel`` (deploy/local/redis_topologies.py) on its
real ports: made on the first run, found again on the next with its data, and a Sentinel set
that failed over starts again with the promoted master still the master."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from types import ModuleType

import pytest
import redis
from redis.cluster import RedisCluster

from dtq_devtools import topology
from dtq_devtools.testing import wait_until_sync
from dtq_devtools.testing.tools import unavailable
from tests.deploy.conftest import ROOT, load_module, need_tool

pytestmark = pytest.mark.slow

REDIS_CONF = ROOT / "deploy" / "redis" / "redis.conf"


@pytest.fixture
def local() -> ModuleType:
    for tool in ("redis-server", "redis-cli"):
        need_tool(tool)
    return load_module("deploy/local/redis_topologies.py", "dtq_deploy_local_redis_topologies")


def _refuse_busy(ports: list[int]) -> None:
    busy = []
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    if busy:
        unavailable(f"ports {busy} are in use (is a `just up --redis ...` running?)")


def _roles(ports: tuple[int, ...]) -> list[str]:
    with topology.node(ports[0]) as c:
        nodes = c.execute_command("CLUSTER", "NODES")
    return sorted("master" if "master" in line else "replica" for line in nodes.splitlines())


def test_the_cluster_is_made_on_the_first_run_and_kept(local: ModuleType, tmp_path: Path) -> None:
    ports = local.CLUSTER_PORTS
    _refuse_busy(list(ports))
    made = local.start_cluster(tmp_path, REDIS_CONF)
    try:
        assert made.url == "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        assert _roles(ports) == ["master"] * 3 + ["replica"] * 3
        with RedisCluster(host="127.0.0.1", port=ports[0], decode_responses=True) as c:
            for i in range(20):  # keys of every master
                c.set(f"kept-{i}", i)
    finally:
        local.stop(made.procs)
    assert all(p.poll() is not None for _, p in made.procs)

    # A second run: `redis-cli --cluster create` would refuse nodes that know each other, so
    # this passes only when the runner finds the cluster made and waits for it instead.
    again = local.start_cluster(tmp_path, REDIS_CONF)
    try:
        assert _roles(ports) == ["master"] * 3 + ["replica"] * 3
        with RedisCluster(host="127.0.0.1", port=ports[0], decode_responses=True) as c:
            assert [c.get(f"kept-{i}") for i in range(20)] == [str(i) for i in range(20)]
    finally:
        local.stop(again.procs)


def test_a_sentinel_set_that_failed_over_starts_again_on_the_promoted_master(
    local: ModuleType, tmp_path: Path
) -> None:
    _refuse_busy([local.SENTINEL_MASTER_PORT, local.SENTINEL_REPLICA_PORT, *local.SENTINEL_PORTS])
    made = local.start_sentinel(tmp_path, REDIS_CONF)
    names = [name for name, _ in made.procs]
    assert names == ["sentinel-1", "sentinel-2", "sentinel-3", "redis-a", "redis-b"]
    first, promoted = local.SENTINEL_MASTER_PORT, local.SENTINEL_REPLICA_PORT
    try:
        assert topology.sentinel_master_port(local.SENTINEL_PORTS[0]) == first
        with topology.node(first) as m:
            m.set("kept", "yes")
            assert m.execute_command("WAIT", 1, 5000) == 1
        master_proc = dict(made.procs)["redis-a"]
        os.kill(master_proc.pid, signal.SIGKILL)  # the master this test started
        master_proc.wait(10)
        wait_until_sync(
            lambda: topology.sentinel_master_port(local.SENTINEL_PORTS[0]) == promoted,
            timeout=30,
            interval=0.1,
            message="the sentinels promote the replica",
        )
    finally:
        local.stop(made.procs)

    again = local.start_sentinel(tmp_path, REDIS_CONF)
    try:
        # The sentinels' and the nodes' rewritten files say who leads: the promoted node, with
        # the old master its replica (start_sentinel waited for it to be in sync).
        assert topology.sentinel_master_port(local.SENTINEL_PORTS[0]) == promoted
        with topology.node(first) as old:
            assert old.info("replication")["role"] == "slave"
        with topology.node(promoted) as m:
            assert m.get("kept") == "yes"
        assert f"127.0.0.1:{promoted}" in again.summary
    finally:
        local.stop(again.procs)
    with pytest.raises(redis.ConnectionError):
        topology.node(promoted).ping()


def test_a_cluster_or_sentinel_url_that_does_not_answer_is_named() -> None:
    run = load_module("deploy/local/run.py", "dtq_deploy_local_run")
    url = "redis+cluster://127.0.0.1:1,127.0.0.1:2"
    with pytest.raises(
        SystemExit, match=r"DTQ_REDIS_URL=redis\+cluster://127.0.0.1:1,.*--redis cluster"
    ):
        run.start_redis(url)
