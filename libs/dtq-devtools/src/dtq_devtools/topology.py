"""How a Redis Cluster and a Sentinel set are made of ``redis-server`` processes.

One description for the two places that build them: the test kit's topologies
(:mod:`dtq_devtools.testing.topologies`, free ports, one per test session) and ``just up --redis
cluster|sentinel`` (``deploy/local/run.py``, fixed ports, data kept in ``.data``). Each starts and
watches its processes its own way; the flags of a cluster node, the ``redis-cli --cluster
create`` command, a sentinel's configuration and the checks that say the topology is usable are
written once, here.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import redis

SENTINEL_MASTER = "dtqmaster"
"""The master name the sentinels watch (the ``<master>`` of ``redis+sentinel://.../<master>``)."""
SENTINEL_QUORUM = 2
"""Sentinels that must agree a master is down before a failover (of 3)."""
HOST = "127.0.0.1"

Check = Callable[[], "bool | str"]
"""A readiness check: ``True`` when ready, else what is still missing (for the timeout's text)."""
Tls = Mapping[str, Any] | None
"""redis-py's options for a client of a data node that listens on TLS (``ssl=True``,
``ssl_ca_certs=...``), or ``None`` for plain TCP."""


def cluster_node_args(node_timeout_ms: int, bus_port: int | None = None) -> list[str]:
    """The ``redis-server`` flags of a cluster node (its ``nodes.conf`` in its data dir)."""
    args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        str(node_timeout_ms),
        # A replica answers for its master's slots as soon as it is promoted.
        "--cluster-replica-validity-factor",
        "0",
    ]
    if bus_port is not None:
        # A bus port of its own (the default, port + 10000, may be taken or out of range).
        args += ["--cluster-port", str(bus_port)]
    return args


def cluster_create_command(
    ports: Sequence[int], replicas: int, tls_ca: Path | None = None
) -> list[str]:
    """``redis-cli --cluster create``: the first ``len(ports) / (1 + replicas)`` nodes become
    masters, each given an equal share of the 16384 slots, the others their replicas
    (``tls_ca``: nodes that listen on TLS, with a certificate this CA signed)."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not installed: `apt-get install -y redis-tools`")
    return [
        cli,
        "--cluster",
        "create",
        *(f"{HOST}:{p}" for p in ports),
        "--cluster-replicas",
        str(replicas),
        "--cluster-yes",
        *(("--tls", "--cacert", str(tls_ca)) if tls_ca is not None else ()),
    ]


def cluster_url(ports: Sequence[int]) -> str:
    return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in ports)


def sentinel_url(ports: Sequence[int], master: str = SENTINEL_MASTER, db: int = 0) -> str:
    return "redis+sentinel://" + ",".join(f"{HOST}:{p}" for p in ports) + f"/{master}/{db}"


def sentinel_conf(
    port: int,
    folder: Path,
    master_port: int,
    *,
    down_after_ms: int,
    logfile: bool = True,
    master: str = SENTINEL_MASTER,
    tls_port: int | None = None,
    tls_conf: str = "",
) -> str:
    """A sentinel's configuration file (sentinels rewrite it as they learn the topology, so it
    must live in a writable folder of its own). ``logfile=False`` logs to standard output.

    With ``tls_port`` (and ``tls_conf``, the certificate lines) the sentinel speaks TLS to the
    data nodes (``tls-replication yes``) while clients still ask it on ``port`` in plain TCP.
    It then announces ``tls_port`` to the other sentinels, which reach it there in TLS too.
    """
    log = f"logfile {folder / 'sentinel.log'}\n" if logfile else 'logfile ""\n'
    tls = f"tls-port {tls_port}\ntls-replication yes\n{tls_conf}" if tls_port else ""
    return (
        f"port {port}\nbind {HOST}\ndir {folder}\n{log}{tls}"
        f"sentinel monitor {master} {HOST} {master_port} {SENTINEL_QUORUM}\n"
        f"sentinel down-after-milliseconds {master} {down_after_ms}\n"
        f"sentinel failover-timeout {master} 10000\n"
        f"sentinel parallel-syncs {master} 1\n"
    )


def node(port: int, password: str | None = None, tls: Tls = None) -> redis.Redis:
    return redis.Redis(
        host=HOST,
        port=port,
        password=password,
        decode_responses=True,
        socket_timeout=2,
        **(tls or {}),
    )


def wait_for(what: str, check: Check, timeout: float) -> None:
    """Poll ``check`` until it returns ``True``; a Redis that does not answer yet counts as
    not ready.

    Raises:
        TimeoutError: ``what`` and the last thing ``check`` said was missing.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (redis.RedisError, OSError) as exc:
            last = exc
        if last is True:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout} s (last: {last!r})")


def cluster_known(port: int, tls: Tls = None) -> int:
    """How many nodes (itself included) the node on ``port`` knows: 1 before the cluster was
    created, all of them once it was (a node that restarts reads them from its nodes.conf)."""
    with node(port, tls=tls) as c:
        info = c.execute_command("CLUSTER", "INFO")
    return int(info.split("cluster_known_nodes:")[1].split()[0])


def _replicas_per_master(nodes: str) -> list[int]:
    """From ``CLUSTER NODES``: how many replicas each master that serves slots has."""
    rows = [line.split() for line in nodes.splitlines() if line.strip()]
    masters = [r[0] for r in rows if "master" in r[2].split(",") and len(r) > 8]
    return [sum(1 for r in rows if r[3] == m and "slave" in r[2].split(",")) for m in masters]


def cluster_ready(ports: Sequence[int], replicas: int = 0, tls: Tls = None) -> Check:
    """Every node on ``ports`` says the cluster is ok and they agree on who serves each slot,
    and each sees ``replicas`` replicas behind every master (gossip tells a node of a new
    replica a moment after it was made one)."""

    def ready() -> bool | str:
        views = []
        for port in ports:
            with node(port, tls=tls) as c:
                info = c.execute_command("CLUSTER", "INFO")
                if "cluster_state:ok" not in info:
                    return f"{port}: {info.splitlines()[0]}"
                slots = c.execute_command("CLUSTER", "SLOTS")
                if (
                    replicas
                    and min(_replicas_per_master(c.execute_command("CLUSTER", "NODES")), default=0)
                    < replicas
                ):
                    return f"{port}: a master without its {replicas} replicas"
            views.append(sorted((s[0], s[2][1]) for s in slots))
        return all(v == views[0] for v in views) or "nodes disagree on the slot map"

    return ready


def sentinel_master_port(
    sentinel_port: int, master: str = SENTINEL_MASTER, password: str | None = None
) -> int:
    """The port of the master the sentinel on ``sentinel_port`` names (``password``: the
    sentinels' own, when they want one)."""
    with node(sentinel_port, password) as s:
        _host, port = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", master)
    return int(port)


def sentinel_ready(
    sentinel_ports: Sequence[int],
    replicas: int,
    master: str = SENTINEL_MASTER,
    password: str | None = None,
    tls: Tls = None,
) -> Check:
    """Every sentinel knows the master, its ``replicas`` replicas and the other sentinels, and
    the replicas are in sync with the master (``tls``: the data nodes' client options; the
    sentinels are asked in plain TCP)."""

    def ready() -> bool | str:
        for port in sentinel_ports:
            with node(port, password) as s:
                known = s.execute_command("SENTINEL", "REPLICAS", master)
                others = s.execute_command("SENTINEL", "SENTINELS", master)
            if len(known) < replicas or len(others) < len(sentinel_ports) - 1:
                return f"sentinel {port}: {len(known)} replicas, {len(others)} sentinels"
        with node(sentinel_master_port(sentinel_ports[0], master, password), tls=tls) as m:
            info = m.info("replication")
        synced = sum(
            1
            for key, value in info.items()
            if key.startswith("slave")
            and isinstance(value, dict)
            and value.get("state") == "online"
        )
        return synced >= replicas or f"{synced} of {replicas} replicas online"

    return ready
