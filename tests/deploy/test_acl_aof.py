"""With the generated users.acl, what the services wrote comes back from the AOF after a restart.

Redis replays the AOF as a client of the default user, and re-checks the ACL of every command
queued in a MULTI/EXEC against that user when it replays the EXEC (redis/redis#14541, fixed in
#14545; 7.0, the version these tests run, has the check). Every dtq state transition is a
function, whose effects the AOF holds as MULTI ... EXEC: with a default user granted nothing,
a restart would silently drop every transition since the last rewrite (the task hashes, the
stream entries, the acks). users.acl keeps the default user off, with no password, so no
client can be it, but grants it the writes on dtq's keys that the replay re-checks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

from dtq_core import SyncClient
from dtq_devtools.testing.processes import FAST_ENV
from dtq_devtools.testing.servers import with_user
from tests.deploy.conftest import ADMIN_PASSWORD, AclRedis, acl_file_with_admin

AOF = ("--appendonly", "yes", "--appendfsync", "always")


def as_user(server: AclRedis, secrets_dir: Path, make_secrets: ModuleType, user: str) -> str:
    password = (secrets_dir / make_secrets.password_file(user)).read_text().strip()
    return with_user(server.url(), user, password)


def dtq(server: AclRedis, secrets_dir: Path, user: str, *args: str) -> None:
    """The operator CLI, as ``user``."""
    done = subprocess.run(
        [sys.executable, "-m", "dtq_core.ops.cli", *args],
        env={
            **FAST_ENV,
            "PATH": "/usr/bin:/bin",
            "DTQ_REDIS_URL": server.url(),
            "DTQ_REDIS_USERNAME": user,
            "DTQ_REDIS_PASSWORD_FILE": str(secrets_dir / f"redis_pw_{user.removeprefix('dtq-')}"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_submitted_tasks_survive_a_restart_from_the_aof(
    tmp_path: Path, secrets_dir: Path, make_secrets: ModuleType
) -> None:
    aclfile = acl_file_with_admin(secrets_dir, tmp_path / "users.acl", ADMIN_PASSWORD)
    data = tmp_path / "redis"
    server = AclRedis(data, aclfile, *AOF)
    try:
        dtq(server, secrets_dir, "dtq-migrate", "migrate")
        dtq(server, secrets_dir, "dtq-ops", "queue", "create", "default")
        with SyncClient.from_url(as_user(server, secrets_dir, make_secrets, "dtq-api")) as api:
            ids = [api.enqueue("examples.add", args=[i, 1]).id for i in range(5)]
            delayed = api.enqueue("examples.add", args=[9, 9], delay_s=3600).id
    finally:
        server.stop()  # SIGTERM: Redis fsyncs the AOF and exits

    server = AclRedis(data, aclfile, *AOF)
    try:
        with SyncClient.from_url(as_user(server, secrets_dir, make_secrets, "dtq-api")) as api:
            found = {task_id: api.get(task_id) for task_id in [*ids, delayed]}
    finally:
        server.stop()
    log = (data / "redis.log").read_text(errors="replace")
    assert "AOF-loading-client" not in log, log[-3000:]
    statuses = {task_id: record and record.status.value for task_id, record in found.items()}
    assert statuses == {**dict.fromkeys(ids, "queued"), delayed: "scheduled"}
