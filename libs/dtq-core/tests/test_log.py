"""One log stream: with ``DTQ_LOG_JSON`` every line a process writes is one JSON object, the
standard library's loggers, warnings and uncaught exceptions included (a process of its own:
the set-up replaces the process's logging hooks)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

PROGRAM = r"""
import asyncio, gc, logging, sys, threading, warnings

# A library that set up its own handler at import, before the service configured logging.
logging.getLogger("chatty").addHandler(logging.StreamHandler(sys.stdout))

from dtq_core.infra.log import configure_logging
import structlog

configure_logging("INFO", json=sys.argv[1] == "json")
structlog.get_logger().info("structlog_line", password="s3cret")
logging.getLogger("uvicorn.error").info("Started server process [%d]", 42)
logging.getLogger("uvicorn.error").debug("below the level")
logging.getLogger("redis.connection").warning("lost redis://dtq:hunter2@db:6379/0")
logging.getLogger("chatty").warning("from a library's own handler")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("litestar").exception("handler failed")
warnings.warn("a user warning", UserWarning)

async def main():
    async def boom():
        raise RuntimeError("never retrieved")
    task = asyncio.get_running_loop().create_task(boom())
    await asyncio.sleep(0.01)
    del task
    gc.collect()

asyncio.run(main())
thread = threading.Thread(target=lambda: 1 / 0, name="side")
thread.start()
thread.join()

class Leaky:
    def __del__(self):
        raise ValueError("raised in __del__")

Leaky()
gc.collect()
raise RuntimeError("uncaught at the top")
"""


def run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def by_event(lines: list[dict[str, Any]], text: str) -> dict[str, Any]:
    found = [line for line in lines if text in str(line["event"])]
    assert len(found) == 1, (text, lines)
    return found[0]


def test_every_line_is_json_whoever_wrote_it() -> None:
    done = run("json")
    assert done.returncode == 1
    assert done.stdout == ""  # the library's own handler is gone
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # each one parses
    assert all({"event", "level", "timestamp"} <= line.keys() for line in lines)

    redacted = by_event(lines, "structlog_line")
    assert redacted["password"] == "***"  # noqa: S105 - the mask, not a password
    started = by_event(lines, "Started server process [42]")
    assert (started["logger"], started["level"]) == ("uvicorn.error", "info")
    assert not [line for line in lines if "below the level" in line["event"]]
    lost = by_event(lines, "lost redis://")
    assert lost["event"] == "lost redis://dtq:***@db:6379/0"  # redacted like structlog's own
    assert by_event(lines, "from a library's own handler")["logger"] == "chatty"
    failed = by_event(lines, "handler failed")
    assert (failed["logger"], failed["level"]) == ("litestar", "error")
    assert "ZeroDivisionError" in failed["exception"]
    warning = by_event(lines, "a user warning")
    assert (warning["logger"], warning["level"]) == ("py.warnings", "warning")
    never = by_event(lines, "Task exception was never retrieved")
    assert never["logger"] == "asyncio"
    assert "never retrieved" in never["exception"]
    thread = by_event(lines, "thread_exception")
    assert thread["thread"] == "side"
    assert "ZeroDivisionError" in thread["exception"]
    unraisable = by_event(lines, "unraisable_exception")
    assert "raised in __del__" in unraisable["exception"]
    uncaught = by_event(lines, "uncaught_exception")
    assert uncaught["level"] == "critical"
    assert "uncaught at the top" in uncaught["exception"]


def test_on_a_terminal_the_same_lines_are_readable_text() -> None:
    done = run("console")
    assert done.returncode == 1
    assert "Started server process [42]" in done.stderr
    assert "uvicorn.error" in done.stderr
    assert "uncaught at the top" in done.stderr
    assert "Traceback" in done.stderr
    assert not done.stderr.lstrip().startswith("{")
