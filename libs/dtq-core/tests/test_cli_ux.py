"""The ``dtq`` CLI a person uses: ``--json`` everywhere, ``--version``, shell completion, the
progress of ``enqueue --wait``, ``status --watch``, colour on a terminal only, exit statuses,
``worker list`` and ``task cancel|retry``. Each runs the real ``dtq`` against a real
redis-server; the terminal cases run it on a pseudo-terminal."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import pty
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dtq_core.client import Client
from dtq_core.infra import tracing
from dtq_core.messages import TaskStatus
from dtq_core.ops.cli import build_parser
from dtq_core.ops.cli.completion import script, tree
from dtq_core.protocol.attempts import Claimed
from dtq_devtools.testing import announce_worker, wait_until
from dtq_devtools.testing.lifecycle import (
    EVENTS_MAXLEN,
    audit_entries,
    claim,
    finish,
    make_dead,
    status,
)

SGR = "\x1b["


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def _env(url: str, env: dict[str, str]) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "NO_COLOR"))}
    return {**clean, "DTQ_REDIS_URL": url, **env}


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "dtq_core.ops.cli", *args]


async def dtq(url: str, *args: str, **env: str) -> Run:
    """``dtq ARGS`` with stdout and stderr on pipes."""
    proc = await asyncio.create_subprocess_exec(
        *_argv(*args),
        env=_env(url, env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    return run


class Terminal:
    """A pseudo-terminal; everything written to it is gathered by a thread."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self._data = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: the last writer closed its end
                return
            if not chunk:
                return
            self._data += chunk

    def text(self) -> str:
        return self._data.decode(errors="replace")

    def done(self) -> str:
        """Everything written, once the program ended."""
        self._reader.join(timeout=30)
        os.close(self.master)
        return self.text()


_started: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _close_pipes() -> Any:
    """Close the pipes of every program a test started, so none is left for the collector
    (whose warning would land in whichever test runs next)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _popen(args: list[str], env: dict[str, str], **streams: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(args, env=env, **streams)
    _started.append(proc)
    return proc


def on_terminal(
    url: str, *args: str, stdout: bool = True, stderr: bool = False, **env: str
) -> tuple[subprocess.Popen[bytes], Terminal]:
    """``dtq ARGS`` with stdout and/or stderr on a new terminal (the other on a pipe)."""
    term = Terminal()
    proc = _popen(
        _argv(*args),
        _env(url, {"COLUMNS": "120", **env}),
        stdout=term.slave if stdout else subprocess.PIPE,
        stderr=term.slave if stderr else subprocess.PIPE,
    )
    os.close(term.slave)  # the child holds it; EOF once it exits
    return proc, term


def piped(url: str, *args: str) -> subprocess.Popen[bytes]:
    """``dtq ARGS`` started with stdout and stderr on pipes, read as the test goes."""
    return _popen(_argv(*args), _env(url, {}), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def ended(proc: subprocess.Popen[bytes]) -> int:
    return await asyncio.to_thread(proc.wait, 60)


# -- --json, --version --------------------------------------------------------------------


def test_every_command_takes_json() -> None:
    leaves = [n for n in tree(build_parser()).walk() if not n.commands]
    assert len(leaves) > 30
    for node in leaves:
        if node.path == "/completion":  # prints a script, not a result
            continue
        assert any("--json" in o.strings for o in node.options), node.path


async def test_mutations_print_what_changed_as_json(client: Client, redis_url: str) -> None:
    async def as_json(*args: str) -> Any:
        run = await dtq(redis_url, *args, "--json")
        assert run.code == 0, run.err
        return msgspec.json.decode(run.out)

    assert await as_json("queue", "create", "q") == {"queue": "q", "created": True}
    assert await as_json("queue", "create", "q") == {"queue": "q", "created": False}
    assert await as_json("queue", "pause", "q") == {"queue": "q", "paused": True}
    assert await as_json("queue", "resume", "q") == {"queue": "q", "paused": False}
    configured = await as_json("queue", "configure", "q", "--rate", "10/s")
    assert (configured["queue"], configured["config"]["rate"]) == ("q", "10/s")
    enqueued = await as_json("enqueue", "t.a", "--queue", "q", "--group", "g")
    assert (enqueued["queue"], enqueued["status"], enqueued["created"]) == ("q", "queued", True)
    assert await status(client, enqueued["id"]) is TaskStatus.QUEUED
    assert await as_json("group", "pause", "q", "g") == {"queue": "q", "group": "g", "paused": True}
    assert await as_json("group", "resume", "q", "g") == {
        "queue": "q",
        "group": "g",
        "paused": False,
    }
    assert await as_json("group", "weight", "q", "g", "3") == {
        "queue": "q",
        "group": "g",
        "weight": 3,
    }
    assert await as_json("queue", "purge", "q", "--yes") == {"queue": "q", "purged": 1}

    dead = await make_dead(client, "d", 3)
    assert await as_json("dlq", "requeue", "d", dead[0]) == {"queue": "d", "requeued": 1}
    assert await as_json("dlq", "discard", "d", dead[1]) == {"queue": "d", "discarded": 1}
    assert await as_json("dlq", "purge", "d", "--yes") == {"queue": "d", "removed": 1}

    # The global flag, before the command, is the same flag.
    run = await dtq(redis_url, "--json", "queue", "pause", "q")
    assert msgspec.json.decode(run.out) == {"queue": "q", "paused": True}
    keys = await dtq(redis_url, "keys", "new", "ci", "read", "--json")
    doc = msgspec.json.decode(keys.out)
    assert (doc["name"], doc["scopes"]) == ("ci", "read")
    assert doc["entry"].startswith("ci:read:")
    assert SGR not in keys.out


async def test_version_is_the_packages() -> None:
    run = await dtq("redis://127.0.0.1:1", "--version")
    assert run.code == 0
    assert run.out == f"dtq {importlib.metadata.version('dtq-core')}\n"


# -- completion ---------------------------------------------------------------------------


def _complete(bash_script: str, *words: str) -> list[str]:
    """What the bash completion offers after ``words`` (the last one being typed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = f"{bash_script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _dtq\n"
    program += 'printf "%s\\n" "${COMPREPLY[@]}"\n'
    done = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.split()


def _bash_syntax_errors(text: str) -> str:
    checked = subprocess.run(
        ["bash", "-n"], input=text, text=True, capture_output=True, check=False, timeout=30
    )
    return checked.stderr


async def test_bash_completion_is_valid_and_names_every_command_and_action() -> None:
    run = await dtq("redis://127.0.0.1:1", "completion", "bash")
    assert run.code == 0
    assert _bash_syntax_errors(run.out) == ""
    root = tree(build_parser())
    for node in root.walk():
        if node.path:
            assert node.path in run.out, node.path

    top = _complete(run.out, "dtq", "")
    assert set(root.commands) <= set(top)
    assert {"--json", "--version", "--actor"} <= set(top)
    assert _complete(run.out, "dtq", "queue", "p") == ["pause", "purge"]
    after_globals = _complete(run.out, "dtq", "--actor", "me", "task", "")
    assert after_globals == ["show", "cancel", "retry", "-h", "--help"]
    assert "--wait" in _complete(run.out, "dtq", "enqueue", "t.a", "--")
    assert _complete(run.out, "dtq", "enqueue", "--dedup", "d") == ["debounce"]
    assert _complete(run.out, "dtq", "completion", "") == ["bash", "zsh", "fish", "-h", "--help"]


async def test_zsh_and_fish_completion_name_every_command() -> None:
    root = tree(build_parser())
    zsh = await dtq("redis://127.0.0.1:1", "completion", "zsh")
    fish = await dtq("redis://127.0.0.1:1", "completion", "fish")
    assert zsh.out.startswith("#compdef dtq\n")
    assert "bashcompinit" in zsh.out
    for name, node in root.commands.items():
        assert f"-a {name} " in fish.out
        for action in node.commands:
            assert f"-n '__dtq_at /{name}' -a {action} " in fish.out
    assert script(build_parser(), "bash") in zsh.out
    assert (await dtq("redis://127.0.0.1:1", "completion", "tcsh")).code == 2


def _shell(*argv: str, path: str = "") -> str:
    env = {**os.environ, "PATH": f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"]}
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30, env=env)
    return done.stdout


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completion_completes(tmp_path: Path) -> None:
    completions = tmp_path / "dtq.fish"
    completions.write_text(script(build_parser(), "fish"))
    _shell("fish", "-n", str(completions))
    (tmp_path / "dtq").write_text("#!/bin/sh\n")  # fish completes commands it can find
    (tmp_path / "dtq").chmod(0o755)
    asked = f'source {completions}; complete -C "dtq queue p"; complete -C "dtq enqueue --dedup "'
    offered = [
        line.split("\t")[0] for line in _shell("fish", "-c", asked, path=str(tmp_path)).splitlines()
    ]
    assert offered == ["pause", "purge", "debounce", "throttle", "until_finished"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_registers_the_function(tmp_path: Path) -> None:
    completions = tmp_path / "dtq.zsh"
    completions.write_text(script(build_parser(), "zsh"))
    _shell("zsh", "-n", str(completions))
    assert _shell("zsh", "-c", f"source {completions}; print ${{_comps[dtq]}}").strip() == (
        "_bash_complete -F _dtq"
    )


# -- enqueue --wait progress --------------------------------------------------------------


async def _report(client: Client, got: Claimed, value: float, msg: str) -> None:
    payload = msgspec.json.encode({"value": value, "message": msg}).decode()
    ok = await client.scripts.progress(
        client.queue_keys("q"), got.rand, got.lease, payload, events_maxlen=EVENTS_MAXLEN
    )
    assert ok


async def test_enqueue_wait_prints_progress_lines_off_a_terminal(
    client: Client, redis_url: str
) -> None:
    assert (await dtq(redis_url, "queue", "create", "q")).code == 0
    proc = await asyncio.create_subprocess_exec(
        *_argv("enqueue", "t.long", "--queue", "q", "--wait", "30"),
        env=_env(redis_url, {}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    got = await wait_until(lambda: claim(client, "q", 1), timeout=30, message="submitted")
    await _report(client, got[0], 0.25, "reading")
    first = await asyncio.wait_for(proc.stderr.readline(), timeout=30)
    assert first.decode() == "progress  25% reading\n"
    await _report(client, got[0], 0.75, "writing")
    second = await asyncio.wait_for(proc.stderr.readline(), timeout=30)
    assert second.decode() == "progress  75% writing\n"
    await finish(client, "q", got, "ok", payload='{"n": 1}')
    out, rest = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0
    assert rest == b""
    outcome = msgspec.json.decode(out)  # stdout holds the outcome alone
    assert (outcome["status"], outcome["result"]) == ("succeeded", {"n": 1})


async def test_enqueue_wait_draws_a_bar_on_a_terminal(client: Client, redis_url: str) -> None:
    assert (await dtq(redis_url, "queue", "create", "q")).code == 0
    proc, term = on_terminal(
        redis_url, "enqueue", "t.long", "--queue", "q", "--wait", "30", stdout=False, stderr=True
    )
    got = await wait_until(lambda: claim(client, "q", 1), timeout=30, message="submitted")
    await _report(client, got[0], 0.5, "half")
    await wait_until(lambda: "half" in term.text(), timeout=30, message="the bar drawn")
    await finish(client, "q", got, "ok", payload="1")
    assert await ended(proc) == 0
    drawn = term.done()
    assert "\r[" + "#" * 15 + "." * 15 + "]  50% half" in drawn
    assert proc.stdout is not None
    assert msgspec.json.decode(proc.stdout.read())["result"] == 1


# -- status --watch, colour ---------------------------------------------------------------


async def test_status_watch_redraws_until_ctrl_c_and_exits_0(
    client: Client, redis_url: str
) -> None:
    proc = piped(redis_url, "status", "--watch", "--interval", "0.1")
    lines: list[str] = []

    def read_two_rounds() -> None:
        assert proc.stdout is not None
        while sum(line.startswith("dtq status, every 0.1 s") for line in lines) < 2:
            lines.append(proc.stdout.readline().decode())

    await asyncio.wait_for(asyncio.to_thread(read_two_rounds), timeout=30)
    proc.send_signal(signal.SIGINT)
    assert await ended(proc) == 0
    assert "no queues yet" in "".join(lines)
    assert "\x1b[2J" not in "".join(lines)  # not a terminal: no clearing

    as_json = piped(redis_url, "status", "--watch", "--interval", "0.1", "--json")
    assert as_json.stdout is not None
    read = as_json.stdout.readline
    rounds = [await asyncio.wait_for(asyncio.to_thread(read), timeout=30) for _ in range(2)]
    as_json.send_signal(signal.SIGINT)
    assert await ended(as_json) == 0
    assert [msgspec.json.decode(r) for r in rounds] == [{"queues": [], "workers": []}] * 2

    watch, term = on_terminal(redis_url, "status", "--watch", "--interval", "0.1")
    await wait_until(lambda: term.text().count("\x1b[2J") >= 2, timeout=30, message="redrawn")
    watch.send_signal(signal.SIGINT)
    assert await ended(watch) == 0
    term.done()


async def test_statuses_are_coloured_on_a_terminal_only(client: Client, redis_url: str) -> None:
    await announce_worker(client.redis, "w-1", ["q"], {})
    proc, term = on_terminal(redis_url, "worker", "list")
    assert await ended(proc) == 0
    assert "\x1b[33mrunning\x1b[0m" in term.done()

    proc, term = on_terminal(redis_url, "worker", "list", NO_COLOR="1")
    assert await ended(proc) == 0
    shown = term.done()
    assert "running" in shown
    assert SGR not in shown

    proc, term = on_terminal(redis_url, "worker", "list", "--json")
    assert await ended(proc) == 0
    assert SGR not in term.done()

    piped = await dtq(redis_url, "worker", "list")
    assert "running" in piped.out
    assert SGR not in piped.out


# -- exit statuses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "required"),
        (["queue"], 2, "required"),
        (["task", "cancel"], 2, "required"),
        (["worker", "list", "extra"], 2, "unrecognized arguments"),
        (["status", "--interval", "0"], 2, "must be > 0"),
        (["task", "cancel", "q:" + "0" * 32], 1, "not found"),
        (["task", "retry", "q:" + "0" * 32], 1, "not found"),
        (["task", "show", "q:" + "0" * 32], 1, "not found"),
        (["task", "cancel", "nope"], 1, "'nope' is not a task id"),
        (["workflow", "cancel", "0" * 32], 1, "not found"),
        (["batch", "cancel", "0" * 32], 1, "not found"),
    ],
)
async def test_exit_status_2_for_usage_and_1_for_a_failed_operation(
    client: Client, redis_url: str, args: list[str], code: int, message: str
) -> None:
    run = await dtq(redis_url, *args)
    assert (run.code, run.out) == (code, "")
    assert message in run.err
    assert await client.redis.exists(client.keys.audit) == 0


# -- worker list, task show|cancel|retry ---------------------------------------------------


async def test_worker_list(client: Client, redis_url: str) -> None:
    assert (await dtq(redis_url, "worker", "list")).out == "no workers\n"
    await announce_worker(client.redis, "w-1", ["emails", "reports"], {})
    table = await dtq(redis_url, "worker", "list")
    assert table.code == 0
    header, row = table.out.splitlines()
    assert header.split()[:3] == ["WORKER", "QUEUES", "CONC"]
    assert row.split()[:2] == ["w-1", "emails,reports"]
    assert "running" in row
    assert " ago" in row
    doc = msgspec.json.decode((await dtq(redis_url, "worker", "list", "--json")).out)
    assert [(w["id"], w["queues"], w["state"]) for w in doc] == [
        ("w-1", ["emails", "reports"], "running")
    ]
    assert isinstance(doc[0]["heartbeat_age_s"], float)


async def test_task_show_gives_the_trace_and_its_link(client: Client, redis_url: str) -> None:
    plain = await client.enqueue("t.a", queue="q")
    tracing.configure_tracing("dtq-test", exporter=InMemorySpanExporter(), env={})
    try:
        traced = await client.enqueue("t.a", queue="q")
    finally:
        tracing.shutdown()
    assert traced.trace_id is not None
    template = "http://127.0.0.1:16686/trace/{trace_id}"
    shown = msgspec.json.decode((await dtq(redis_url, "task", "show", traced.id)).out)
    assert (shown["trace_id"], shown["trace_url"]) == (traced.trace_id, None)
    linked = await dtq(redis_url, "task", "show", traced.id, DTQ_TRACE_URL=template)
    doc = msgspec.json.decode(linked.out)
    assert doc["trace_url"] == f"http://127.0.0.1:16686/trace/{traced.trace_id}"
    untraced = await dtq(redis_url, "task", "show", plain.id, DTQ_TRACE_URL=template)
    assert msgspec.json.decode(untraced.out)["trace_url"] is None


async def test_task_show_cancel_and_retry_with_their_audit(client: Client, redis_url: str) -> None:
    waiting = await client.enqueue("t.a", queue="q")
    old = await dtq(redis_url, "task", waiting.id)
    new = await dtq(redis_url, "task", "show", waiting.id)
    assert old.code == new.code == 0
    assert old.out == new.out
    assert msgspec.json.decode(new.out)["status"] == "queued"

    cancelled = await dtq(redis_url, "--actor", "ops", "task", "cancel", waiting.id)
    assert (cancelled.code, cancelled.out) == (0, f"task {waiting.id} cancelled\n")
    assert await status(client, waiting.id) is TaskStatus.CANCELLED
    again = await dtq(redis_url, "task", "cancel", waiting.id)
    assert again.code == 1
    assert "already ended" in again.err

    running = await client.enqueue("t.b", queue="q")
    await claim(client, "q", 1)
    asked = await dtq(redis_url, "task", "cancel", running.id, "--json")
    assert msgspec.json.decode(asked.out) == {"id": running.id, "status": "running"}

    (dead,) = await make_dead(client, "d", 1)
    not_dead = await dtq(redis_url, "task", "retry", running.id)
    assert not_dead.code == 1
    assert "only dead or failed tasks can be retried" in not_dead.err
    retried = await dtq(redis_url, "task", "retry", dead, "--json")
    assert msgspec.json.decode(retried.out) == {"id": dead, "status": "queued"}
    assert await status(client, dead) is TaskStatus.QUEUED

    entries = await audit_entries(client)
    assert [(e["action"], e["queue"], e["actor"], e["detail"]) for e in entries] == [
        ("task.cancel", "q", "ops", f"ids={waiting.id}"),
        ("task.cancel", "q", "cli", f"ids={running.id}"),
        ("task.retry", "d", "cli", f"ids={dead}"),
    ]
