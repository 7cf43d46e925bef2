"""pytest fixtures: a real ``redis-server`` per session, a clean database per test.

Load it from a ``conftest.py``: ``pytest_plugins = ["dtq_devtools.testing.plugin"]``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from dtq_core.client import Client
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import Settings, load_settings
from dtq_devtools.testing import SEED_VARIABLE, RedisServer, run_seed
from dtq_devtools.testing.topologies import RedisClusterSet, ReplicaSet, SentinelSet

FAST = {
    "visibility_timeout_s": 2.0,
    "heartbeat_interval_s": 0.5,
    "retry_base_delay": 0.05,
    "retry_max_delay": 0.5,
    "leader_ttl_s": 2.0,
    "scheduler_tick_s": 0.05,
    "worker_metrics_port": 0,
    "scheduler_metrics_port": 0,
    "reject_unknown_queues": False,
}
"""Settings that make fault tests finish in seconds (the "fast knobs" of docs/testing.md). Tests
submit into queues of their own without starting a worker for each, so a submit creates its
queue (DTQ_REJECT_UNKNOWN_QUEUES=false); the tests of that rule turn it back on."""


TOPOLOGIES = ("standalone", "cluster", "sentinel")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis",
        choices=TOPOLOGIES,
        default=os.environ.get("DTQTEST_REDIS", "standalone"),
        help="the Redis topology behind the redis_url fixture: one redis-server, a 3-master "
        "Redis Cluster, or a master with a replica and 3 sentinels (default: $DTQTEST_REDIS, "
        "else standalone)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """A fresh seed each run for every randomised test (Hypothesis, schemathesis, the fault
    tests' random choices), unless ``DTQTEST_SEED`` names one. It becomes Hypothesis'
    ``--hypothesis-seed`` (this runs before Hypothesis' own plugin reads that option), unless
    that option was given on the command line."""
    seed = run_seed()
    if hasattr(config.option, "hypothesis_seed") and config.option.hypothesis_seed is None:
        config.option.hypothesis_seed = str(seed)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"dtq test seed: {run_seed()} (replay with {SEED_VARIABLE}={run_seed()})",
        f"dtq Redis topology: {config.getoption('--redis')}",
    ]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets the ``xdist_group`` of :func:`parallel_group` (read by ``--dist
    loadgroup`` in the xdist workers, which collect, and ignored without xdist).

    On another topology than ``standalone``, only the tests that reach Redis through
    :func:`redis_topology` (the ``redis_url`` fixtures) run: the others (pure units, tests that
    start servers of their own) would repeat the standalone run's work exactly, so they are
    deselected. Tests marked ``standalone_only`` (they signal, reconfigure or inspect one
    redis-server through the ``redis_url`` fixtures) are skipped."""
    in_worker = bool(getattr(config.option, "loadgroup", False))
    for item in items:
        group = parallel_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if in_worker:
                _suffix_group(item, group)
    topology = config.getoption("--redis")
    if topology == "standalone":
        return
    kept: list[pytest.Item] = []
    repeated: list[pytest.Item] = []
    for item in items:
        uses = "redis_topology" in getattr(item, "fixturenames", ())
        (kept if uses else repeated).append(item)
    if repeated:
        config.hook.pytest_deselected(items=repeated)
        items[:] = kept
    skip = pytest.mark.skip(reason=f"needs one redis-server, not a {topology}")
    for item in items:
        if item.get_closest_marker("standalone_only"):
            item.add_marker(skip)


def _suffix_group(item: pytest.Item, group: str) -> None:
    """Give ``item`` the ``<nodeid>@<group>`` id by which the xdist controller schedules a
    group on one process. pytest-xdist 3.8 sets it as ``item._nodeid``, which pytest 9.2 no
    longer reads (a node's id is the structured ``_id``), so every group was spread over
    every process; this sets the id pytest reads, once."""
    if "@" in item.nodeid:
        return
    node_id = getattr(item, "_id", None)
    if node_id is None or not hasattr(type(node_id), "parse"):
        raise RuntimeError(
            f"cannot set the xdist group of {item.nodeid}: pytest {pytest.__version__} keeps "
            "node ids in another form (dtq_devtools.testing.plugin._suffix_group)"
        )
    item._id = type(node_id).parse(f"{item.nodeid}@{group}")


def parallel_group(item: pytest.Item) -> str | None:
    """The group of tests one ``pytest-xdist`` process runs one after the other (``-n 2 --dist
    loadgroup``, as ``just test`` runs), or ``None`` for a test any process may take.

    - ``slow``: the multi-process fault tests and everything else marked slow. They measure
      what a fault costs and start servers, workers and containers of their own, so they run
      one at a time (as on one process), beside the quick tests of the other process. The
      tests marked ``fixed_ports`` join them: they bind the stack's documented ports, as ``just
      up``, the docs' examples and the containers do, so no two may run at once.
    - ``e2e``: the browser tests share the dashboard's build folder and a stack per module.
    """
    if item.get_closest_marker("slow") or item.get_closest_marker("fixed_ports"):
        return "slow"
    if "tests/e2e/" in item.nodeid:
        return "e2e"
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if exitstatus != 0:
        seed = run_seed()
        terminalreporter.write_line(
            f"dtq test seed: {seed}; replay this run's random choices with {SEED_VARIABLE}={seed}"
        )


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One ``redis-server`` for the session, on a free port with its own data dir."""
    server = RedisServer(Path(tmp_path_factory.mktemp("redis")))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def replica_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaSet]:
    """A master with one replica (no Sentinel), for the ``DTQ_REDIS_WAIT_REPLICAS`` tests;
    started on first use. A test flushes it itself."""
    made = ReplicaSet(Path(tmp_path_factory.mktemp("replicas")))
    made.start()
    yield made
    made.stop()


@pytest.fixture(scope="session")
def redis_topology(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer | RedisClusterSet | SentinelSet]:
    """The Redis behind :func:`redis_url`: the session's redis-server, or (``--redis``) a
    Redis Cluster of 3 masters or a Sentinel set, made of redis-server processes."""
    topology = request.config.getoption("--redis")
    if topology == "standalone":
        yield request.getfixturevalue("redis_server")
        return
    folder = Path(tmp_path_factory.mktemp(topology))
    made = RedisClusterSet(folder) if topology == "cluster" else SentinelSet(folder)
    made.start()
    yield made
    made.stop()


@pytest.fixture
def redis_url(redis_topology: RedisServer | RedisClusterSet | SentinelSet) -> str:
    return redis_topology.url


@pytest.fixture
def settings(redis_url: str) -> Settings:
    """Fast-knob settings pointing at the session's Redis."""
    return load_settings({}, redis_url=redis_url, **FAST)


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A client on a flushed database."""
    client = connect(settings)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
async def client(redis: aioredis.Redis, settings: Settings) -> AsyncIterator[Client]:
    """An SDK client on the flushed database."""
    c = Client(redis, settings)
    yield c
    await c.aclose()
