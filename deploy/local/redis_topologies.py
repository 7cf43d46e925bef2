"""The Redis of ``just up --redis cluster`` and ``just up --redis sentinel``: a local Redis Cluster
(3 masters, 3 replicas) or a Sentinel set (a master, a replica, 3 sentinels), made of
``redis-server`` processes on fixed ports, each node on compose's ``deploy/redis/redis.conf``
with its data under ``.data`` as the standalone Redis has.

What a cluster or a Sentinel set is made of (node flags, ``redis-cli --cluster create``, a
sentinel's configuration, the readiness checks) is :mod:`dtq_devtools.topology`, shared with the
test kit. What is kept from one run to the next: a cluster's ``nodes.conf`` (so a second run
finds the cluster made and only waits for it), and every node's and sentinel's own configuration
file, which Redis rewrites after a failover, so a run after a failover starts with the promoted
master still the master.
"""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from dtq_devtools import topology

CLUSTER_PORTS = tuple(range(7000, 7006))
"""Three masters then three replicas; their cluster bus ports are Redis' default, + 10000."""
CLUSTER_REPLICAS = 1
CLUSTER_NODE_TIMEOUT_MS = 2000
SENTINEL_MASTER_PORT = 6380
SENTINEL_REPLICA_PORT = 6381
SENTINEL_PORTS = (26379, 26380, 26381)
SENTINEL_DOWN_AFTER_MS = 1000
READY_TIMEOUT_S = 60.0


@dataclass
class LocalRedis:
    """A started topology: the URL every service gets and the processes, in stop order."""

    url: str
    data: Path
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    summary: str = ""
    """What the banner says about it (ports and roles)."""


def _refuse_busy(ports: list[int]) -> None:
    busy = []
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((topology.HOST, port))
            except OSError:
                busy.append(port)
    if busy:
        raise SystemExit(
            f"ports {busy} are in use (is another `just up --redis ...` running?); "
            "stop what listens there first"
        )


def _server(
    conf: Path, port: int, folder: Path, extra: list[str], sentinel: bool = False
) -> subprocess.Popen[bytes]:
    args = ["redis-server", str(conf)]
    if sentinel:
        args.append("--sentinel")
    else:
        args += ["--port", str(port), "--bind", topology.HOST, "--dir", str(folder)]
        # A replica's first sync starts at once, not after Redis' 5 s wait for more replicas
        # to share the transfer (there is one per master here).
        args += ["--repl-diskless-sync-delay", "0", *extra]
    return subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the runner only; it stops Redis last
    )


def _node_conf(folder: Path, base_conf: Path, *lines: str) -> Path:
    """The node's own configuration file, written on its first run only: it includes compose's
    redis.conf, and Redis may rewrite it (``CONFIG REWRITE`` after a failover)."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "redis.conf"
    if not conf.exists():
        conf.write_text("\n".join([f"include {base_conf}", *lines]) + "\n")
    return conf


def stop(procs: list[tuple[str, subprocess.Popen[bytes]]], timeout: float = 30.0) -> None:
    """SIGTERM each process in order and wait for it (a Redis saves its AOF as it stops)."""
    for _, proc in procs:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def start_cluster(
    data: Path, base_conf: Path, ports: tuple[int, ...] = CLUSTER_PORTS
) -> LocalRedis:
    """Start the cluster's nodes; create the cluster on the first run; wait until it is ok."""
    _refuse_busy([*ports, *(p + 10000 for p in ports)])
    root = data / "redis-cluster"
    made = LocalRedis(topology.cluster_url(ports), root)
    try:
        for i, port in enumerate(ports):
            folder = root / str(port)
            conf = _node_conf(folder, base_conf)
            extra = topology.cluster_node_args(CLUSTER_NODE_TIMEOUT_MS)
            made.procs.append((f"redis-{i + 1}", _server(conf, port, folder, extra)))
        topology.wait_for(
            "the cluster's nodes did not answer", lambda: _all_answer(ports), READY_TIMEOUT_S
        )
        if topology.cluster_known(ports[0]) == 1:
            created = subprocess.run(
                topology.cluster_create_command(ports, CLUSTER_REPLICAS),
                capture_output=True,
                text=True,
                timeout=READY_TIMEOUT_S,
                check=False,
            )
            if created.returncode != 0:
                raise SystemExit(
                    f"redis-cli --cluster create failed: {created.stdout[-1500:]}"
                    f"{created.stderr[-500:]}\n(a half-made cluster: remove {root} to start over)"
                )
        topology.wait_for(
            "the cluster was not ok",
            topology.cluster_ready(ports, CLUSTER_REPLICAS),
            READY_TIMEOUT_S,
        )
    except BaseException:
        stop(made.procs)
        raise
    masters = len(ports) // (1 + CLUSTER_REPLICAS)
    made.summary = (
        f"Redis Cluster, {masters} masters and {len(ports) - masters} replicas on ports "
        f"{ports[0]}-{ports[-1]} (redis-cli -c -p {ports[0]} cluster nodes)"
    )
    return made


def start_sentinel(data: Path, base_conf: Path) -> LocalRedis:
    """Start the master, its replica and three sentinels; wait until the sentinels know them
    all and the replica is in sync."""
    data_ports = [SENTINEL_MASTER_PORT, SENTINEL_REPLICA_PORT]
    _refuse_busy([*data_ports, *SENTINEL_PORTS])
    root = data / "redis-sentinel"
    made = LocalRedis(topology.sentinel_url(SENTINEL_PORTS), root)
    nodes: list[tuple[str, subprocess.Popen[bytes]]] = []
    sentinels: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for name, port, lines in (
            ("redis-a", SENTINEL_MASTER_PORT, ()),
            ("redis-b", SENTINEL_REPLICA_PORT, (f"replicaof {topology.HOST} {data_ports[0]}",)),
        ):
            folder = root / str(port)
            nodes.append((name, _server(_node_conf(folder, base_conf, *lines), port, folder, [])))
        topology.wait_for(
            "the master and replica did not answer", lambda: _all_answer(data_ports), 30
        )
        for i, port in enumerate(SENTINEL_PORTS):
            folder = root / f"sentinel-{port}"
            folder.mkdir(parents=True, exist_ok=True)
            conf = folder / "sentinel.conf"
            if not conf.exists():  # a sentinel rewrites it with what it learnt (the master)
                conf.write_text(
                    topology.sentinel_conf(
                        port,
                        folder,
                        SENTINEL_MASTER_PORT,
                        down_after_ms=SENTINEL_DOWN_AFTER_MS,
                        logfile=False,
                    )
                )
            sentinels.append((f"sentinel-{i + 1}", _server(conf, port, folder, [], True)))
        topology.wait_for(
            "the Sentinel set was not ready",
            topology.sentinel_ready(SENTINEL_PORTS, replicas=1),
            READY_TIMEOUT_S,
        )
    except BaseException:
        stop(sentinels + nodes)
        raise
    # Sentinels stop first: a master stopping before them would start a failover.
    made.procs = sentinels + nodes
    master = topology.sentinel_master_port(SENTINEL_PORTS[0])
    made.summary = (
        f"Sentinel set: master {topology.HOST}:{master} (of {data_ports[0]}, {data_ports[1]}), "
        f"sentinels on {', '.join(map(str, SENTINEL_PORTS))} "
        f"(redis-cli -p {SENTINEL_PORTS[0]} sentinel master {topology.SENTINEL_MASTER})"
    )
    return made


def _all_answer(ports: list[int] | tuple[int, ...]) -> bool:
    for port in ports:
        with topology.node(port) as c:
            c.ping()
    return True
