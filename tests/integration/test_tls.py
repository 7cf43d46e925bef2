"""dtq over TLS on each form of ``DTQ_REDIS_URL``: ``rediss://`` (one Redis),
``rediss+cluster://`` (every node, those found after the first included) and
``rediss+sentinel://`` (TLS to the data nodes, the sentinels asked in plain TCP).

Every data node listens on TLS only (``--port 0``), so a client that did not speak TLS would
get no answer at all: a task that runs proves the SDK, the worker and the CLI used TLS. A
client that does not trust the server's certificate, and one that speaks plain TCP to a TLS
port, fail at their first call with an error that says so, in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtq_core.client import Client
from dtq_core.errors import RedisUnavailableError
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.processes import services, worker_process
from dtq_devtools.testing.servers import flush_all
from dtq_devtools.testing.tls import TlsFiles, make_ca, make_tls_files
from dtq_devtools.testing.topologies import RedisClusterSet, SentinelSet

pytestmark = pytest.mark.slow  # a TLS cluster and a TLS Sentinel set of their own

Topology = RedisServer | RedisClusterSet | SentinelSet

FAIL_WITHIN_S = 8.0
"""A refused connection is reported this fast (the connect timeout is 2 s; a hang would be
the 10 s socket timeout or more)."""


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that did not sign the servers' certificate."""
    ca, _key = make_ca(Path(tmp_path_factory.mktemp("other-ca")), name="another CA")
    return ca


@pytest.fixture(scope="module", params=["standalone", "cluster", "sentinel"])
def topology(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tls: TlsFiles
) -> Iterator[Topology]:
    folder = Path(tmp_path_factory.mktemp(f"tls-{request.param}"))
    made: Topology
    if request.param == "standalone":
        made = RedisServer(folder, tls=tls)
    elif request.param == "cluster":
        made = RedisClusterSet(folder, tls=tls)
    else:
        made = SentinelSet(folder, tls=tls)
    made.start()
    yield made
    made.stop()


def url_of(topology: Topology, query: str, *, scheme_tls: bool = True) -> str:
    """The topology's URL with ``query`` as its TLS options. A cluster's URL names its first
    node only: the others are found from it, and must be reached over TLS too."""
    if isinstance(topology, RedisClusterSet):
        base = f"redis+cluster://127.0.0.1:{topology.nodes[0].port}"
    elif isinstance(topology, SentinelSet):
        base = topology.url.partition("?")[0].replace("rediss+", "redis+", 1)
    else:
        base = f"redis://127.0.0.1:{topology.port}/0"
    if scheme_tls:
        base = "rediss" + base.removeprefix("redis")
    return f"{base}?{query}" if query else base


@pytest.fixture
def url(topology: Topology, tls: TlsFiles) -> str:
    """The topology's URL trusting the test's CA, on a flushed Redis."""
    made = url_of(topology, tls.query())
    flush_all(made)
    return made


def sdk(url: str) -> Client:
    # The task goes in before the worker has registered its queue.
    return Client.from_url(url, reject_unknown_queues=False)


def cli_status(url: str) -> subprocess.CompletedProcess[str]:
    """``dtq status`` as its own process, on ``url``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-m", "dtq_core.ops.cli", "status", "--json"],
        env={**clean, "DTQ_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def worker_says(url: str, log: Path, words: str) -> None:
    """A worker started on ``url`` logs ``words`` at once (it keeps waiting for a Redis it can
    use, as on any start before Redis is up, but says why in its first lines)."""
    with services(worker_process(url, log)) as (worker,):
        await wait_until(
            lambda: words in worker.log(), timeout=10, message=f"the worker said {words!r}"
        )


async def test_a_task_runs_end_to_end_over_tls(url: str, tmp_path: Path) -> None:
    with services(worker_process(url, tmp_path / "worker.log")) as (worker,):
        async with sdk(url) as client:
            handle = await client.enqueue("echo", args=["over", "tls"], queue="default")
            outcome = await handle.result(timeout=30)
        assert worker.alive(), worker.log()[-3000:]
    assert outcome.status == "succeeded", outcome
    assert outcome.result == {"args": ["over", "tls"], "kwargs": {}, "attempt": 1}


async def test_the_cli_reads_status_over_tls(url: str, tmp_path: Path) -> None:
    with services(worker_process(url, tmp_path / "worker.log")) as (worker,):
        # The worker's registration is what the CLI must read back over TLS.
        async with sdk(url) as client:
            await wait_until(
                lambda: client.redis.exists(client.keys.workers),
                timeout=30,
                message="the worker registered",
            )
        done = cli_status(url)
        assert worker.alive(), worker.log()[-3000:]
    assert done.returncode == 0, done.stderr
    assert '"queues"' in done.stdout
    assert '"default"' in done.stdout


@pytest.mark.parametrize("trust", ["no CA", "another CA"])
async def test_an_untrusted_certificate_fails_the_first_call_at_once(
    topology: Topology, trust: str, other_ca: Path, tls: TlsFiles, tmp_path: Path
) -> None:
    # Without ssl_ca_certs redis-py trusts the system's CAs, which did not sign the test's.
    query = "ssl_cert_reqs=required" if trust == "no CA" else tls.query(other_ca)
    url = url_of(topology, query)
    started = time.monotonic()
    async with sdk(url) as client:
        with pytest.raises(RedisUnavailableError) as exc:
            await client.enqueue("echo", queue="default")
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert "certificate verify failed" in str(exc.value), exc.value
    assert "?ssl_ca_certs=" in str(exc.value), exc.value  # the hint at the fix

    started = time.monotonic()
    done = cli_status(url)
    assert time.monotonic() - started < FAIL_WITHIN_S + 5  # the interpreter's start included
    assert done.returncode == 1
    assert "certificate verify failed" in done.stderr, done.stderr
    assert "?ssl_ca_certs=" in done.stderr, done.stderr

    await worker_says(url, tmp_path / "worker.log", "certificate verify failed")


async def test_plain_tcp_to_a_tls_port_fails_the_first_call_at_once(
    topology: Topology, tmp_path: Path
) -> None:
    url = url_of(topology, "", scheme_tls=False)
    started = time.monotonic()
    async with sdk(url) as client:
        with pytest.raises(RedisUnavailableError) as exc:
            await client.enqueue("echo", queue="default")
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert "use the rediss scheme" in str(exc.value), exc.value

    done = cli_status(url)
    assert done.returncode == 1
    assert "use the rediss scheme" in done.stderr, done.stderr

    await worker_says(url, tmp_path / "worker.log", "use the rediss scheme")
