"""A rolling upgrade: two versions of the function library side by side on one Redis.

The "old" version is the code as it was before the last change to ``lua/`` in git: dtq-core,
the worker and the test app of that commit (so a library with another name, called by the code
written for it, as a deploy of the previous release runs); where there is no such history, the
current code with a trivially changed script body. An old and a new
worker drain one queue together, each calling its own library; the old one is stopped with
SIGTERM and replaced by a second new one, as an orchestrator's rollout does; then
``dtq migrate --prune`` deletes the old library and the new workers go on. Nothing is lost,
ended twice or run twice (architecture.md, "Versioned").
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

import dtq_core
from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.protocol.scripts import library
from dtq_devtools.testing import RedisServer, wait_until
from dtq_devtools.testing.history import check_history, settle
from dtq_devtools.testing.processes import services, worker_process
from tests.chaos.conftest import FaultFigures

pytestmark = pytest.mark.slow

LUA = "libs/dtq-core/src/dtq_core/protocol/lua"


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


SOURCES = ("libs/dtq-core/src", "services/worker/src", "libs/dtq-devtools/src")
"""What an old worker process imports, taken from the old commit."""


def _previous_sources(root: Path, dest: Path) -> str | None:
    """The worker's sources as they were before the last commit that changed the scripts,
    unpacked under ``dest``: their ``PYTHONPATH``, or None without that history."""
    last = (_git(root, "log", "-1", "--format=%H", "--", LUA) or "").strip()
    if not last:
        return None
    try:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", f"{last}^", *SOURCES],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return os.pathsep.join(str(dest / source) for source in SOURCES)


def old_build(root: Path, dest: Path) -> tuple[str, str, str]:
    """An older version of the worker under ``dest``: returns how it was made, the name of
    its library (as a process importing it builds it) and the ``PYTHONPATH`` that runs it."""
    path = _previous_sources(root, dest / "git")
    if path is not None:
        name = _library_name(path)
        if name != library().name:
            return "the previous git version", name, path
    copy = dest / "copy" / "dtq_core"
    shutil.copytree(
        Path(dtq_core.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    beat = copy / "protocol" / "lua" / "heartbeat.lua"
    beat.write_text(beat.read_text() + "-- an older build\n")
    return "trivially changed body", _library_name(str(copy.parent)), str(copy.parent)


def _library_name(path: str) -> str:
    """The library name of the dtq_core a process finds first on ``PYTHONPATH=path``."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dtq_core.protocol.scripts import library; print(library().name)",
        ],
        check=True,
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip()


def _libraries(url: str) -> list[str]:
    with redis.Redis.from_url(url, decode_responses=True) as r:
        entries = r.function_list(library="dtq_*")
    return sorted(str(dict(zip(e[::2], e[1::2], strict=True))["library_name"]) for e in entries)


def _migrate_prune(url: str) -> subprocess.CompletedProcess[str]:
    """``dtq migrate --prune``, as a deploy runs it once the rollout is over."""
    return subprocess.run(
        [sys.executable, "-m", "dtq_core.ops.cli", "migrate", "--prune"],
        check=False,
        env={"DTQ_REDIS_URL": url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_old_and_new_libraries_drain_one_queue_then_prune(
    tmp_path: Path, request: pytest.FixtureRequest, faults: FaultFigures
) -> None:
    how, old_library, old_path = old_build(request.config.rootpath, tmp_path / "old")
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    env = {"DTQTEST_SIDE_URL": side_url}
    old = worker_process(server.url, tmp_path / "old.log", env={**env, "PYTHONPATH": old_path})
    new1 = worker_process(server.url, tmp_path / "new1.log", env=env)
    new2 = worker_process(server.url, tmp_path / "new2.log", env=env)
    current = library().name
    ids: list[str] = []

    async def submit(n: int) -> None:
        handles = await client.enqueue_many(
            [TaskRequest(task="sleep", args=[0.02]) for _ in range(n)]
        )
        ids.extend(h.id for h in handles if not isinstance(h, Exception))

    try:
        await submit(300)
        with services(old, new1):
            await wait_until(
                lambda: len(_libraries(server.url)) == 2, timeout=30, message="two libraries"
            )
            both = _libraries(server.url)
            # Both versions run tasks of the one queue before the old one goes.
            await wait_until(
                lambda: _ran_on(side, {old.pid, new1.pid}), timeout=60, message="both ran"
            )
            await submit(300)
            old_pid = old.pid
            old.signal(signal.SIGTERM)
            old_exit = old.wait(30)
            new2.start()
            await submit(100)
            await settle(client.redis, ids, timeout=90)
            migrate = await asyncio.to_thread(_migrate_prune, server.url)
            after = _libraries(server.url)
            await submit(100)  # the new workers go on after the prune
            settle_s = await settle(client.redis, ids, timeout=90)
            new2.stop()
        check = await check_history(client.redis, ids, side=side)
        per_pid = Counter(int(s.split("|")[2]) for s in await side.lrange("exec_start", 0, -1))
        faults.record(
            "rolling upgrade: two function libraries, workers of both, then migrate --prune",
            check,
            old_version=how,
            libraries_side_by_side=len(both),
            ran_on_old=per_pid[old_pid],
            ran_on_new=per_pid[new1.pid] + per_pid[new2.pid],
            old_exit=old_exit,
            libraries_after_prune=len(after),
            settle_s=round(settle_s, 2),
        )
        assert both == sorted([current, old_library])
        assert migrate.returncode == 0, migrate.stderr
        assert "deleted 1 older libraries" in migrate.stdout, migrate.stdout
        assert after == [current]
        assert old_exit == 0
        assert per_pid[old_pid] > 0
        assert len(ids) == 800
        check.assert_clean()
        assert check.statuses["succeeded"] == 800
    finally:
        await side.aclose()
        await client.aclose()
        server.stop()


async def _ran_on(side: aioredis.Redis, pids: set[int]) -> bool:
    starts = await side.lrange("exec_start", 0, -1)
    return pids <= {int(s.split("|")[2]) for s in starts}
