"""The ``dtq-scheduler`` entry point: --app loading, declared schedules, clean stop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from dtq_core.infra.settings import Settings
from dtq_core.ops.schedules import ScheduleStore
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import wait_until
from dtq_scheduler_leader.__main__ import load_registry, main, serve
from dtq_scheduler_leader.cron import declared_specs

APP = """
from dtq_core.tasks import TaskRegistry

registry = TaskRegistry()

@registry.task(name="ops.cleanup", queue="ops")
def cleanup() -> None:
    pass

registry.schedule("cleanup", task="ops.cleanup", cron="*/5 * * * *")
not_a_registry = 42
"""


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "dtq_sched_test_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "dtq_sched_test_app"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_colon", "must look like pkg.module:registry"),
        ("dtq_no_such_module_x:registry", "cannot import dtq_no_such_module_x"),
        ("{app}:not_a_registry", "is int, not a TaskRegistry"),
    ],
)
def test_a_bad_app_path_exits_with_a_message(app_module: str, path: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        load_registry(path.format(app=app_module))


def test_main_refuses_a_bad_app_before_starting(app_module: str) -> None:
    with pytest.raises(SystemExit, match="is int, not a TaskRegistry"):
        main(["--app", f"{app_module}:not_a_registry"])


async def test_serve_declares_schedules_leads_and_releases_on_stop(
    redis: aioredis.Redis, settings: Settings, app_module: str
) -> None:
    keys = Keys(settings.namespace)
    registry = load_registry(f"{app_module}:registry")
    stop = asyncio.Event()
    service = asyncio.create_task(
        serve(settings, stop, registry, declared_specs(registry.schedules))
    )
    try:
        await wait_until(lambda: redis.exists(keys.leader), timeout=5)
        stored = await ScheduleStore(redis, keys).get("cleanup")
    finally:
        stop.set()
        await service

    assert stored is not None
    assert (stored.task, stored.queue, stored.cron) == ("ops.cleanup", "ops", "*/5 * * * *")
    assert await redis.exists(keys.leader) == 0  # released on a clean stop
