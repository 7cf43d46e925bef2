"""The id a worker registers under is ``<DTQ_WORKER_ID>:<6 random hex digits>``, fresh at every
start, and the docs state exactly that format."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from dtq_core import Client, TaskRegistry
from dtq_core.infra.settings import load_settings
from dtq_core.ops.admin import Admin
from dtq_devtools.testing import wait_until
from dtq_worker.context import consumer_name

if TYPE_CHECKING:
    from conftest import Runner

DOCS = Path(__file__).resolve().parents[3] / "docs"
FORMAT = "`<DTQ_WORKER_ID>:<6 random hex digits>`"
"""The format, as the docs write it."""
SUFFIX = ":[0-9a-f]{6}"


def test_the_default_worker_id_is_host_and_pid_and_the_id_adds_a_random_part() -> None:
    worker_id = load_settings({}).worker.id
    assert worker_id == f"{socket.gethostname()}-{os.getpid()}"
    first, second = consumer_name(worker_id), consumer_name(worker_id)
    assert re.fullmatch(re.escape(worker_id) + SUFFIX, first), first
    assert re.fullmatch(re.escape(worker_id) + SUFFIX, second), second
    assert first != second


async def test_two_workers_with_one_worker_id_register_under_two_ids(
    client: Client, run_worker: Runner
) -> None:
    registry = TaskRegistry()

    @registry.task(name="ids.noop")
    async def noop() -> None:
        return None

    a = await run_worker(registry, worker_id="billing-1")
    b = await run_worker(registry, worker_id="billing-1")

    async def registered() -> list[str] | None:
        # A worker is running before its first beat lands: wait for both records.
        ids = sorted(w.id for w in await Admin(client).workers())
        return ids if len(ids) >= 2 else None

    ids = await wait_until(registered, message="both workers registered")
    assert ids == sorted([a.consumer, b.consumer])
    for worker_id in ids:
        assert re.fullmatch("billing-1" + SUFFIX, worker_id), worker_id


def test_the_docs_state_the_registered_id_format() -> None:
    operations = (DOCS / "operations.md").read_text()
    assert FORMAT in operations
    assert FORMAT in (DOCS / "configuration.md").read_text()
    api = (DOCS / "api.md").read_text()
    assert FORMAT in api
    # The GET /workers example shows an id of that shape, not the bare <hostname>-<pid>.
    example = re.search(r'"items": \[\{"id": "([^"]+)", "host": "([^"]+)", "pid": (\d+)', api)
    assert example is not None
    worker_id, host, pid = example.groups()
    assert re.fullmatch(re.escape(f"{host}-{pid}") + SUFFIX, worker_id), worker_id
    assert (
        "(`<container hostname>-<pid>:<6 random hex digits>`)"
        in (DOCS / "deployment.md").read_text()
    )
