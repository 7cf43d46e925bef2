"""A rolling upgrade: two versions of the function library side by side on one Redis.

The "old" version is a copy of dtq-core whose ``lua/`` is the one before the last change to
it in git (so a library with another name, as a deploy of the previous release loads); where
there is no such history, the current scripts with a trivially changed body. An old and a new
worker drain one queue together, each calling its own library; the old one is stopped with
SIGTERM and replaced by a second new one, as an orchestrator's rollout does; then
``dtq migrate --prune`` deletes the old library and the new workers go on. Nothing is lost,
ended twice or run twice (architecture.md, "Versioned").
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

import dtq_core
from dtq_core import Client, TaskRequest
from dtq_core.infra.connection import connect
from dtq_core.protocol.scripts import SCRIPT_NAMES, library
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


def _previous_lua(root: Path) -> dict[str, str] | None:
    """The scripts as they were before the last commit that changed them, when that version
    has every script this code calls (else None)."""
    last = (_git(root, "log", "-1", "--format=%H", "--", LUA) or "").strip()
    if not last:
        return None
    names = _git(root, "ls-tree", "--name-only", f"{last}^", f"{LUA}/")
    if names is None:
        return None
    files = {Path(n).name for n in names.split()}
    if not {f"{n}.lua" for n in SCRIPT_NAMES} | {"_lib.lua"} <= files:
        return None
    out = {}
    for name in sorted(files):
        text = _git(root, "show", f"{last}^:{LUA}/{name}")
        if text is None:
            return None
        out[name] = text
    return out


def old_build(root: Path, dest: Path) -> tuple[str, str]:
    """A copy of dtq_core under ``dest`` with older scripts: returns how it was made and the
    name of its library (as a process importing it from ``dest`` builds it)."""
    copy = dest / "dtq_core"
    shutil.copytree(
        Path(dtq_core.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    previous = _previous_lua(root)
    if previous is not None:
        for name, text in previous.items():
            (copy / "protocol" / "lua" / name).write_text(text)
        name = _library_name(dest)
        if name != library().name:
            return "previous git version of lua/", name
    beat = copy / "protocol" / "lua" / "heartbeat.lua"
    beat.write_text(beat.read_text() + "-- an older build\n")
    return "trivially changed body", _library_name(dest)


def _library_name(path: Path) -> str:
    """The library name of the dtq_core a process finds first on ``PYTHONPATH=path``."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dtq_core.protocol.scripts import library; print(library().name)",
        ],
        check=True,
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
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
    how, old_library = old_build(request.config.rootpath, tmp_path / "old")
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Client.from_url(server.url, max_queue_depth=0, reject_unknown_queues=False)
    side_url = server.url.replace("/0", "/1")
    side = connect(side_url)
    env = {"DTQTEST_SIDE_URL": side_url}
    old = worker_process(
        server.url, tmp_path / "old.log", env={**env, "PYTHONPATH": str(tmp_path / "old")}
    )
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
