"""``dtq schedule show|next|put|pause|resume|delete`` run as a subprocess against a real
redis-server: output, exit codes and the audit entries of the changes."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import msgspec

from dtq_core.client import Client
from dtq_core.ops.schedules import ScheduleStore


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


async def dtq(url: str, *args: str, stdin: bytes | None = None) -> Run:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DTQ_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dtq_core.ops.cli",
        *args,
        env={**clean, "DTQ_REDIS_URL": url},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=60)
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    return run


async def test_put_from_a_file_and_flags_show_next_pause_resume_delete_audited(
    client: Client, redis_url: str, tmp_path: Path
) -> None:
    body = {"task": "reports.build", "queue": "reports", "cron": "0 9 * * *", "args": [1]}
    file = tmp_path / "nightly.json"
    file.write_text(msgspec.json.encode({**body, "allow_unknown_task": True}).decode())
    put = await dtq(
        redis_url, "--actor", "alice", "schedule", "put", "nightly", str(file),
        "--cron", "30 2 * * *", "--timezone", "America/New_York", "--misfire", "all",
        "--jitter", "60",
    )  # fmt: skip
    assert put.code == 0, put.err
    assert put.out.startswith(
        "schedule nightly created: cron 30 2 * * * America/New_York misfire=all/100 jitter=60s"
    )
    store = ScheduleStore(client.redis, client.keys)
    spec = await store.get("nightly")
    assert spec is not None
    assert (spec.cron, spec.timezone, spec.misfire, spec.jitter_s, spec.args) == (
        "30 2 * * *", "America/New_York", "all", 60, [1],
    )  # fmt: skip

    shown = await dtq(redis_url, "schedule", "show", "nightly")
    assert shown.code == 0, shown.err
    assert "America/New_York" in shown.out
    assert "all (cap 100)" in shown.out
    as_json = msgspec.json.decode(
        (await dtq(redis_url, "schedule", "show", "nightly", "--json")).out
    )
    assert as_json["timezone"] == "America/New_York"

    upcoming = await dtq(redis_url, "schedule", "next", "nightly", "--count", "3", "--json")
    items = msgspec.json.decode(upcoming.out)["items"]
    assert len(items) == 3
    ny = ZoneInfo("America/New_York")
    assert {datetime.fromisoformat(i["local"]).astimezone(ny).hour for i in items} <= {2, 3}
    table = await dtq(redis_url, "schedule", "next", "nightly")
    assert table.out.splitlines()[0].split() == [
        "TICK",
        "(UTC)",
        "LOCAL",
        "(America/New_York)",
        "DELAY",
    ]
    assert len(table.out.splitlines()) == 6
    assert (await dtq(redis_url, "schedule", "next", "nightly", "--count", "0")).code == 1

    paused = await dtq(redis_url, "--actor", "bob", "schedule", "pause", "nightly")
    assert (paused.code, paused.out) == (
        0,
        "schedule nightly paused: it fires nothing until resumed\n",
    )
    assert "is paused" in (await dtq(redis_url, "schedule", "next", "nightly")).out
    assert (await dtq(redis_url, "schedule", "resume", "nightly")).code == 0
    assert (await dtq(redis_url, "schedule", "delete", "nightly")).code == 0
    gone = await dtq(redis_url, "schedule", "delete", "nightly")
    assert (gone.code, gone.err) == (
        1,
        "dtq: schedule nightly not found (dtq schedule list shows them)\n",
    )
    missing = await dtq(redis_url, "schedule", "next", "nightly")
    assert missing.code == 1

    audit = [f for _, f in await client.redis.xrange(client.keys.audit)]
    assert [(e["action"], e["actor"]) for e in audit] == [
        ("schedule.put", "alice"),
        ("schedule.pause", "bob"),
        ("schedule.resume", "cli"),
        ("schedule.delete", "cli"),
    ]
    assert "schedule=nightly" in audit[0]["detail"]


async def test_put_refuses_bad_input_and_writes_nothing(client: Client, redis_url: str) -> None:
    async def refused(*args: str, stdin: bytes | None = None) -> str:
        run = await dtq(redis_url, "schedule", "put", "s", *args, stdin=stdin)
        assert run.code == 1, run.out
        return run.err

    flags = ("--task", "t.run", "--allow-unknown-task")
    assert "not a known IANA time zone" in await refused(
        *flags, "--cron", "@daily", "--timezone", "Mars/Olympus"
    )
    assert "jitter_s must be a number of seconds from 0 to 3600" in await refused(
        *flags, "--every", "7200", "--jitter", "4000"
    )
    assert "less than the schedule's period" in await refused(
        *flags, "--every", "60", "--jitter", "60"
    )
    assert "misfire_cap must be an integer from 1 to 1000" in await refused(
        *flags, "--every", "60", "--misfire-cap", "0"
    )
    assert "unknown field 'misfre'" in await refused(
        "-", stdin=b'{"task": "t.run", "every_s": 60, "misfre": "all"}'
    )
    assert "every tick would be refused" in await refused("--task", "t.run", "--every", "60")
    bad_choice = await dtq(redis_url, "schedule", "put", "s", "--misfire", "sometimes")
    assert bad_choice.code == 2
    assert await client.redis.exists(client.keys.schedules, client.keys.audit) == 0
