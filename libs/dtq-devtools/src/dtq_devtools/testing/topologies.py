"""Real Redis topologies for tests: a Redis Cluster and a Sentinel set, made of ``redis-server``
processes on free ports, each with its own data dir (no stand-ins).

Given ``tls`` (:mod:`dtq_devtools.testing.tls`), every data node listens on TLS only and speaks
TLS to the others (replication, the cluster bus); sentinels stay plain TCP for clients, as
``rediss+sentinel://`` expects, and speak TLS to the data nodes and to one another.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from dtq_devtools import topology
from dtq_devtools.testing import RedisServer, free_port, free_ports, terminate
from dtq_devtools.testing.tls import TlsFiles
from dtq_devtools.topology import SENTINEL_MASTER

__all__ = ["SENTINEL_MASTER", "RedisClusterSet", "SentinelSet"]


class RedisClusterSet:
    """A Redis Cluster of ``masters`` masters, each with ``replicas`` replicas.

    :meth:`start` returns once every replica holds its master's data: a failover test kills a
    master a few seconds after the start, and its replica, promoted whatever its data
    (``cluster-replica-validity-factor 0``), must not be one that never synced.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        masters: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        appendonly: bool = True,
        tls: TlsFiles | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.masters = masters
        self.replicas = replicas
        self.tls = tls
        bus_tls = ("--tls-cluster", "yes") if tls is not None else ()
        count = masters * (1 + replicas)
        ports = free_ports(2 * count)  # a data port and a bus port each, all different
        self.nodes = [
            RedisServer(
                data_dir / f"node{i}",
                port=ports[2 * i],
                appendonly=appendonly,
                extra=(
                    *topology.cluster_node_args(node_timeout_ms, ports[2 * i + 1]),
                    *bus_tls,
                    # A replica's first sync starts at once (Redis waits 5 s for more
                    # replicas to join), so start() waits for it a moment, not 5 s.
                    "--repl-diskless-sync-delay",
                    "0",
                ),
                tls=tls,
            )
            for i in range(count)
        ]

    @property
    def url(self) -> str:
        """``redis+cluster://``, or with TLS ``rediss+cluster://`` trusting the test's CA."""
        url = topology.cluster_url([n.port for n in self.nodes])
        if self.tls is None:
            return url
        return f"rediss{url.removeprefix('redis')}?{self.tls.query()}"

    @property
    def _client_tls(self) -> topology.Tls:
        return self.tls.client_options() if self.tls is not None else None

    def start(self, timeout: float = 30.0) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run(
            topology.cluster_create_command(
                [n.port for n in self.nodes],
                self.replicas,
                self.tls.ca if self.tls is not None else None,
            ),
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        self.wait_ok(timeout)
        self.wait_synced(timeout)

    def wait_synced(self, timeout: float = 30.0) -> None:
        """Until every master streams to its ``replicas`` replicas (their first sync done).

        Without it, a master killed within the first seconds (Redis delays a first sync by
        5 s by default) left an empty replica to take over its slots: the keys it served,
        the function library and the queue registry among them, were gone."""
        topology.wait_for(
            "the cluster's replicas were not in sync",
            lambda: all(online_replicas(m) >= self.replicas for m in self.primaries()),
            timeout,
        )

    def client(self, node: RedisServer) -> redis.Redis:
        return node.client()

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says the cluster is ok and agrees on who serves each slot."""
        live = [n.port for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        topology.wait_for(
            "the cluster was not ok",
            topology.cluster_ready(live, tls=self._client_tls),
            timeout,
        )

    def primaries(self) -> list[RedisServer]:
        """The nodes that serve slots now."""
        by_port = {n.port: n for n in self.nodes}
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                with self.client(node) as c:
                    slots = c.execute_command("CLUSTER SLOTS")
                return sorted({by_port[int(s[2][1])] for s in slots}, key=lambda n: n.port)
        raise RuntimeError("no node of the cluster runs")

    def master_of(self, key: str) -> RedisServer:
        for node in self.primaries():
            with self.client(node) as c:
                slot = c.execute_command("CLUSTER", "KEYSLOT", key)
                owner = next(s for s in c.execute_command("CLUSTER SLOTS") if s[0] <= slot <= s[1])
            return next(n for n in self.nodes if n.port == int(owner[2][1]))
        raise RuntimeError("no primary")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def online_replicas(master: RedisServer) -> int:
    """How many replicas ``master`` streams to (``INFO replication``, state online)."""
    with master.client() as m:
        info = m.info("replication")
    return sum(
        1
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


class ReplicaSet:
    """One master and ``replicas`` replicas of it, without Sentinel: what
    ``DTQ_REDIS_WAIT_REPLICAS`` is tested on with a plain ``redis://`` URL."""

    def __init__(self, data_dir: Path, *, replicas: int = 1) -> None:
        # The replica's first sync starts at once (Redis waits 5 s for more replicas to join).
        self.master = RedisServer(data_dir / "master", extra=("--repl-diskless-sync-delay", "0"))
        self.replicas = [
            RedisServer(
                data_dir / f"replica{i}", extra=("--replicaof", "127.0.0.1", str(self.master.port))
            )
            for i in range(replicas)
        ]

    @property
    def url(self) -> str:
        return self.master.url

    def start(self, timeout: float = 30.0) -> None:
        for node in (self.master, *self.replicas):
            node.start()
        self.wait_synced(timeout)

    def wait_synced(self, timeout: float = 30.0) -> None:
        """Until every replica streams from the master."""
        topology.wait_for(
            "the replicas were not online",
            lambda: online_replicas(self.master) >= len(self.replicas),
            timeout,
        )

    def stop(self) -> None:
        for node in (*self.replicas, self.master):
            node.stop()


class SentinelSet:
    """One master, ``replicas`` replicas and ``sentinels`` sentinels watching them (quorum 2)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        appendonly: bool = True,
        sentinel_password: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.sentinel_password = sentinel_password
        self.tls = tls
        self.master = RedisServer(data_dir / "master", appendonly=appendonly, tls=tls)
        self.replicas = [
            RedisServer(
                data_dir / f"replica{i}",
                appendonly=appendonly,
                extra=("--replicaof", "127.0.0.1", str(self.master.port)),
                tls=tls,
            )
            for i in range(replicas)
        ]
        self.down_after_ms = down_after_ms
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        # With TLS each sentinel also listens on a TLS port, which it announces to the others.
        self.sentinel_tls_ports = [free_port() for _ in range(sentinels)] if tls else []
        self.sentinel_procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The URL of the master, with the sentinels' password when they want one; with TLS
        ``rediss+sentinel://`` trusting the test's CA (the sentinels are asked in plain TCP)."""
        nodes = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        options = [f"sentinel_password={self.sentinel_password}"] if self.sentinel_password else []
        if self.tls is not None:
            options.append(self.tls.query())
        query = f"?{'&'.join(options)}" if options else ""
        scheme = "rediss+sentinel" if self.tls is not None else "redis+sentinel"
        return f"{scheme}://{nodes}/{SENTINEL_MASTER}/0{query}"

    @property
    def data_nodes(self) -> list[RedisServer]:
        return [self.master, *self.replicas]

    def start(self, timeout: float = 30.0) -> None:
        for node in self.data_nodes:
            node.start()
        binary = shutil.which("redis-server")
        assert binary is not None
        for i, port in enumerate(self.sentinel_ports):
            folder = self.data_dir / f"sentinel{i}"
            folder.mkdir(parents=True, exist_ok=True)
            conf = folder / "sentinel.conf"
            conf.write_text(
                topology.sentinel_conf(
                    port,
                    folder,
                    self.master.port,
                    down_after_ms=self.down_after_ms,
                    tls_port=self.sentinel_tls_ports[i] if self.tls is not None else None,
                    tls_conf=self.tls.conf_lines() if self.tls is not None else "",
                )
                + (
                    # Clients and the other sentinels alike must give it.
                    f"requirepass {self.sentinel_password}\n"
                    f"sentinel sentinel-pass {self.sentinel_password}\n"
                    if self.sentinel_password
                    else ""
                )
            )
            self.sentinel_procs.append(
                subprocess.Popen(
                    [binary, str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        self.wait_ready(timeout)

    def sentinel(self, i: int = 0) -> redis.Redis:
        return redis.Redis(
            port=self.sentinel_ports[i],
            password=self.sentinel_password,
            decode_responses=True,
            socket_timeout=2,
        )

    def master_port(self) -> int:
        return topology.sentinel_master_port(
            self.sentinel_ports[0], password=self.sentinel_password
        )

    def current_master(self) -> RedisServer:
        port = self.master_port()
        return next(n for n in self.data_nodes if n.port == port)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every sentinel knows the master, its replicas and the other sentinels, and
        the replicas are in sync."""
        ready = topology.sentinel_ready(
            self.sentinel_ports,
            len(self.replicas),
            password=self.sentinel_password,
            tls=self.tls.client_options() if self.tls is not None else None,
        )
        topology.wait_for("the Sentinel set was not ready", ready, timeout)

    def stop(self) -> None:
        for proc in self.sentinel_procs:
            terminate(proc)
        for node in self.data_nodes:
            node.stop()
