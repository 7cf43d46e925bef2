"""Typed tasks: ``@registry.task`` returns a :class:`~dtq_core.tasks.Task` that keeps the
handler's signature. A sample is checked with ``mypy --strict``: correct calls pass and wrong
ones fail where marked. At run time the task submits by its definition and still runs its
handler when called."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from dtq_core import Client, TaskContext, TaskRegistry
from dtq_core.tasks import Task

SAMPLE = Path(__file__).parent / "typing" / "typed_tasks_sample.py"
MARK = re.compile(r"#\s*E:\s*([a-z-]+)")


def test_mypy_accepts_correct_calls_and_rejects_wrong_ones(tmp_path: Path) -> None:
    expected = {
        n: MARK.search(line).group(1)  # type: ignore[union-attr]
        for n, line in enumerate(SAMPLE.read_text().splitlines(), 1)
        if MARK.search(line)
    }
    assert len(expected) == 7
    # Its own process: mypy raises the interpreter's recursion limit for good.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(SAMPLE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out, err = run.stdout, run.stderr
    found: dict[int, str] = {}
    for line in out.splitlines():
        m = re.match(rf".*{re.escape(SAMPLE.name)}:(\d+): error: .*\[([a-z-]+)\]$", line)
        assert m is not None or ": note:" in line, line
        if m is not None:
            found[int(m.group(1))] = m.group(2)
    assert found == expected, out + err


async def test_a_typed_task_submits_by_its_definition_and_runs_when_called(
    client: Client,
) -> None:
    registry = TaskRegistry()

    @registry.task(name="typed.send", queue="emails", priority=8)
    async def send(ctx: TaskContext, to: str, subject: str = "") -> str:
        return f"{to}: {subject}"

    assert isinstance(send, Task)
    assert send.name == "typed.send"
    assert registry.get("typed.send") is send.definition
    ctx = TaskContext(task_id="q:1", queue="q", task="typed.send", attempt=1, max_attempts=1)
    assert await send(ctx, "a@b.c", subject="hi") == "a@b.c: hi"

    handle = await send.enqueue(client, "a@b.c", subject="hi")
    record = await handle.info()
    assert (record.queue, record.priority, record.args, record.kwargs) == (
        "emails",
        8,
        ["a@b.c"],
        {"subject": "hi"},
    )
    delayed = await send.with_options(priority=2, delay_s=60, queue="other").enqueue(client, "x")
    record = await delayed.info()
    assert (record.queue, record.priority, record.status) == ("other", 2, "scheduled")
    step = send.with_options(priority=3).step("y@b.c")
    assert (step.request.task, step.request.args, step.request.priority) == (
        "typed.send",
        ["y@b.c"],
        3,
    )
    by_name = await client.enqueue(send, ["z@b.c"])
    assert (await by_name.info()).queue == "emails"
