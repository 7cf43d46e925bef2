"""Backup and restore as docs/deployment.md describes them: deploy/redis/backup.sh copies the
append-only directory of a RUNNING redis-server (tasks written before and after a rewrite,
so both the base and the incremental file matter); a new redis-server started on the copy
has every task, in the state it had."""

from __future__ import annotations

import asyncio
import subprocess
import tarfile
from pathlib import Path

from dtq_core.client import Client
from dtq_core.infra.settings import load_settings
from dtq_core.messages import TaskStatus
from dtq_devtools.testing import RedisServer, wait_until
from tests.deploy.conftest import ROOT

BACKUP = ROOT / "deploy" / "redis" / "backup.sh"
REDIS_CONF = ("--aof-use-rdb-preamble", "yes", "--appenddirname", "appendonlydir")


async def _rewrite_done(client: Client) -> bool:
    info = await client.redis.info("persistence")
    return info["aof_rewrite_in_progress"] == 0 and info["aof_rewrite_scheduled"] == 0


async def test_backup_of_a_running_server_restores_every_task(tmp_path: Path) -> None:
    source = RedisServer(tmp_path / "live", extra=REDIS_CONF)
    source.start()
    restored: RedisServer | None = None
    try:
        settings = load_settings({}, redis_url=source.url, reject_unknown_queues=False)
        client = Client.from_settings(settings)
        try:
            before = [
                (await client.enqueue("backup.job", args=[i], queue="backup")).id for i in range(30)
            ]
            delayed = [
                (await client.enqueue("backup.later", args=[i], queue="backup", delay_s=3600)).id
                for i in range(10)
            ]
            # Fold everything so far into the base file, then write more into the increment.
            await client.redis.bgrewriteaof()
            await wait_until(lambda: _rewrite_done(client), timeout=20, message="AOF rewrite")
            after = [
                (await client.enqueue("backup.job", args=[i], queue="backup")).id
                for i in range(30, 50)
            ]
            cancelled = after[-1]
            await client.cancel(cancelled)

            archive = tmp_path / "backup.tar"
            with archive.open("wb") as out:
                proc = await asyncio.create_subprocess_exec(
                    "sh", str(BACKUP), str(source.data_dir), stdout=out, stderr=subprocess.PIPE
                )
                _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
            assert proc.returncode == 0, err.decode()
        finally:
            await client.aclose()
        # The source keeps running while the copy is restored elsewhere.
        assert source.ping()

        target = tmp_path / "restored"
        target.mkdir()
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            tar.extractall(target, filter="data")
        assert any(n.endswith(".manifest") for n in names)
        assert any(".base." in n for n in names)
        assert any(".incr." in n for n in names)

        restored = RedisServer(target, extra=REDIS_CONF)
        restored.start()
        settings = load_settings({}, redis_url=restored.url)
        client = Client.from_settings(settings)
        try:
            statuses = {}
            for task_id in [*before, *delayed, *after]:
                record = await client.get(task_id)
                assert record is not None, task_id
                statuses[task_id] = record.status
        finally:
            await client.aclose()
        assert all(statuses[t] == TaskStatus.QUEUED for t in before)
        assert all(statuses[t] == TaskStatus.SCHEDULED for t in delayed)
        assert all(statuses[t] == TaskStatus.QUEUED for t in after[:-1])
        assert statuses[cancelled] == TaskStatus.CANCELLED
    finally:
        source.stop()
        if restored is not None:
            restored.stop()
