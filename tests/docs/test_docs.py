"""Every shell and Python example of README.md and docs/*.md, run against a real stack.

Each page's blocks run in order, as a reader follows the page: a later example uses what an
earlier one answered (the id of the task it submitted, the cursor of the page it read), so
pages are written that way. The stack is the module's (:mod:`tests.docs.conftest`), on free
ports: the test rewrites the documented addresses (``127.0.0.1:8000``, ``:8002``, Redis on
``:6379``) to its own, sets ``DTQ_REDIS_URL`` for ``uv run dtq ...``, and ``$API``, ``$SUBMIT``,
``$READ``, ``$ADMIN`` and ``$KEYS`` for docs/api.md, whose API has a key per scope (the other
pages, and the documented address ``127.0.0.1:8000`` everywhere, reach an open API, as
`just up` runs it).

How a page marks its examples (see :mod:`tests.docs.blocks` for the details):

- ``*Not run by the docs test: <why>.*`` in italics right above a block: the block is left
  out (a compose-only step, something destructive, a tool the machine does not have).
- ``*Keeps running until Ctrl-C ...*`` above a block: it runs in the background until the
  page ends (a worker, ``curl -N`` on the event stream); with ``wait for `text` `` in that
  line, the page goes on once the command printed ``text``. It must still run at the end.
- A ``python`` block whose first line is ``# <path>.py`` is saved as that file.
- Every other ``sh`` and ``python`` block runs: each shell command with ``bash -e -o pipefail``
  in the page's own directory, with ``uv run`` working on this checkout. What a page shows a
  command answering (``# 201``, ``# {"status": "queued", ...}``, the lines after a ``$ ``
  prompt) is checked: the status, the members it names, strings exactly unless elided with
  ``...`` or ``…`` or varying by nature (ids, times, hosts); numbers by type. A curl without a
  documented answer must get a 2xx, and a command must exit with 0 unless its comment
  starts with ``exit N`` (a documented failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dtq_devtools.testing import wait_until_sync
from tests.docs import blocks as md
from tests.docs.conftest import ROOT, DocsStack

pytestmark = pytest.mark.slow

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KEYED_PAGES = {"api.md"}
FIXED_PORTS = {3000, 3001, 4318, 6379, 8000, 8001, 8002, 8003, 9090, 16686}
"""The stack's documented ports: after rewriting, no example may still reach one of them
(it would talk to someone's `just up`)."""
ADDRESS = re.compile(r"(?:127\.0\.0\.1|localhost):(\d+)\b")
METRICS_PORT = re.compile(r"\b(DTQ_(?:WORKER|SCHEDULER)_METRICS_PORT)=\d+")
TASK_ID = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63}):[0-9a-f]{32}$")
ID_PLACEHOLDER = re.compile(r"\b([A-Za-z0-9][A-Za-z0-9_.-]*):[0-9a-f]*(?:\.\.\.|…)")
DEPLOY_IGNORE = shutil.ignore_patterns("secrets", "__pycache__")
COMMAND_TIMEOUT_S = 30
"""The longest documented wait is 10 s (`?wait=10`), plus `uv run` starting."""
PRELUDE = 'curl() { command curl -D "$DOCS_TEST_HEADERS" "$@"; }\n'
"""Every curl dumps its response headers for the test, leaving its output as the page shows."""


@dataclass
class Answer:
    rc: int
    stdout: str
    stderr: str
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Page:
    """One page's run: its directory, environment, what earlier answers bound, failures."""

    path: Path
    stack: DocsStack
    workdir: Path
    bindings: dict[str, str] = field(default_factory=dict)
    last_ids: dict[str, str] = field(default_factory=dict)
    background: list[tuple[md.Block, subprocess.Popen[bytes], Path]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    ran: int = 0

    @property
    def api(self) -> str:
        return self.stack.keyed_api if self.path.name in KEYED_PAGES else self.stack.open_api

    def env(self, headers: str = ".headers") -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "OTEL_"))}
        keys = self.stack.keys
        env.update(
            DTQ_REDIS_URL=self.stack.redis_url,
            DTQ_WORKER_METRICS_PORT="0",
            DTQ_SCHEDULER_METRICS_PORT="0",
            UV_PROJECT=str(ROOT),
            API=self.api,
            SUBMIT=keys["submit"],
            READ=keys["read"],
            ADMIN=keys["admin"],
            KEYS=self.stack.entries,
            DOCS_TEST_HEADERS=str(self.workdir / headers),
        )
        return env

    # -- text a reader would type -------------------------------------------------------------

    def rewrite(self, text: str) -> str:
        """The documented addresses → the test's; ids and cursors → what earlier answers said."""
        ports = {
            "8000": self.stack.open_api.rsplit(":", 1)[1],
            "8002": self.stack.gateway.rsplit(":", 1)[1],
            "6379": self.stack.redis_url.rsplit(":", 1)[1].split("/")[0],
        }
        text = ADDRESS.sub(lambda m: m.group().replace(m[1], ports.get(m[1], m[1])), text)
        text = METRICS_PORT.sub(r"\1=0", text)
        for placeholder in sorted(self.bindings, key=len, reverse=True):
            text = text.replace(placeholder, self.bindings[placeholder])
        text = ID_PLACEHOLDER.sub(lambda m: self.last_ids.get(m[1], m.group()), text)
        if "<id>" in text and "" in self.last_ids:
            text = text.replace("<id>", self.last_ids[""])
        return text

    def fixed_port(self, text: str) -> int | None:
        return next((int(p) for p in ADDRESS.findall(text) if int(p) in FIXED_PORTS), None)

    # -- running ------------------------------------------------------------------------------

    def prepare(self) -> None:
        """The page's directory looks like a checkout where it matters: `deploy/` for its
        scripts (a copy: an example cannot change the checkout's), `.data/redis` for `just
        up`'s Redis data (here the test's)."""
        shutil.copytree(ROOT / "deploy", self.workdir / "deploy", ignore=DEPLOY_IGNORE)
        (self.workdir / ".data").mkdir()
        (self.workdir / ".data" / "redis").symlink_to(self.stack.redis_dir)

    def run(self) -> None:
        self.prepare()
        for block in md.blocks(self.path):
            if block.skip or block.kind == "illustration":
                continue
            self.ran += 1
            if block.kind == "file":
                target = self.workdir / str(block.file_path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(self.rewrite(block.text) + "\n")
            elif block.kind == "python":
                script = self.workdir / f"block_{block.line}.py"
                script.write_text(self.rewrite(block.text) + "\n")
                self.command(block, md.Command(f"uv run python {script.name}", block.line))
            elif block.background:
                self.start_background(block)
            else:
                for command in md.commands(block):
                    self.command(block, command)

    def start_background(self, block: md.Block) -> None:
        text = self.rewrite(block.text)
        if port := self.fixed_port(text):
            self.failures.append(f"{block.where()}: no test service for port {port}; mark it")
            return
        log = self.workdir / f"background_{block.line}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", PRELUDE + text],
                cwd=self.workdir,
                env=self.env(f".headers_{block.line}"),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append((block, proc, log))
        if block.wait_for:
            wanted = block.wait_for
            try:
                wait_until_sync(
                    lambda: wanted in log.read_text(errors="replace") or proc.poll() is not None,
                    timeout=60,
                    interval=0.1,
                    message=f"{block.where()}: {wanted!r}",
                )
            except TimeoutError as exc:
                self.failures.append(str(exc))
            if wanted not in log.read_text(errors="replace"):
                self.failures.append(f"{block.where()}: never printed {wanted!r}:\n{_tail(log)}")

    def command(self, block: md.Block, command: md.Command) -> None:
        text = self.rewrite(command.text)
        where = f"{block.path.name}:{command.line}"
        if port := self.fixed_port(text):
            self.failures.append(f"{where}: no test service for port {port}: {text}")
            return
        headers = self.workdir / ".headers"
        headers.unlink(missing_ok=True)
        # A session of its own: a command that outlives its timeout is killed with every
        # process it started (a service started in the foreground would keep its port).
        proc = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", PRELUDE + text],
            cwd=self.workdir,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            self.failures.append(f"{where}: still running after {COMMAND_TIMEOUT_S} s: {text}")
            return
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # what it left in the background
        answer = Answer(proc.returncode, out.decode(), err.decode())
        if headers.exists():
            _read_headers(headers.read_text(errors="replace"), answer)
        self.remember_ids(answer.stdout)
        problems = self.check(command, answer)
        if problems:
            self.failures.append(
                f"{where}: {text}\n    " + "\n    ".join(problems) + f"\n    got: {_short(answer)}"
            )

    def check(self, command: md.Command, answer: Answer) -> list[str]:
        exits = {e.exit for e in command.expected} or {0}
        if answer.rc not in exits:
            return [f"exit status {answer.rc}, the page shows {sorted(exits)}"]
        if command.output:
            return self.check_output(command.output, answer.stdout)
        if not command.expected:
            if answer.status is not None and not 200 <= answer.status < 300:
                return [f"status {answer.status} where the page shows no error"]
            return []
        best: list[str] | None = None
        for expected in command.expected:
            trial: dict[str, str] = {}
            problems = _check_expected(expected, answer, trial)
            if not problems:
                self.bindings.update(trial)
                return []
            if best is None or len(problems) < len(best):
                best = problems
        return best or []

    def check_output(self, lines: list[str], stdout: str) -> list[str]:
        shown = "\n".join(lines)
        if shown.lstrip().startswith(("{", "[")):
            try:
                doc = md.sample_json(shown)
                actual = json.loads(stdout)
            except ValueError as exc:
                return [str(exc)]
            return md.match(doc, actual, self.bindings)
        got = [line for line in stdout.splitlines() if line.strip()]
        problems = []
        at = 0
        for line in lines:
            found = next((i for i in range(at, len(got)) if md.text_matches(line, got[i])), None)
            if found is None:
                problems.append(f"no line like {line!r}")
            else:
                at = found + 1
        return problems

    def remember_ids(self, stdout: str) -> None:
        try:
            value = json.loads(stdout)
        except ValueError:
            return
        seen: dict[str, str] = {}
        for text in _strings(value):
            if (m := TASK_ID.match(text)) and m[1] not in seen:
                seen[m[1]] = text
                seen.setdefault("", text)
        self.last_ids.update(seen)

    def stop(self) -> None:
        for block, proc, log in self.background:
            if proc.poll() is not None:
                self.failures.append(
                    f"{block.where()}: stopped by itself (status {proc.returncode}) before the "
                    f"page ended:\n{_tail(log)}"
                )
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _check_expected(expected: md.Expected, answer: Answer, bindings: dict[str, str]) -> list[str]:
    problems: list[str] = []
    if answer.rc != expected.exit:
        problems.append(f"exit status {answer.rc}, the page shows {expected.exit}")
    if expected.status is not None and answer.status != expected.status:
        problems.append(f"status {answer.status}, the page shows {expected.status}")
    if expected.status is None and answer.status is not None and answer.status >= 300:
        problems.append(f"status {answer.status} where the page shows a success")
    for name, value in expected.headers:
        got = answer.headers.get(name.lower())
        if got is None or not md.text_matches(value, got):
            problems.append(f"header {name}: {got!r}, the page shows {value!r}")
    if expected.body:
        try:
            doc = md.sample_json(expected.body)
        except ValueError as exc:
            return [*problems, str(exc)]
        try:
            actual = json.loads(answer.stdout)
        except ValueError:
            return [*problems, "the answer is not JSON"]
        problems += md.match(doc, actual, bindings)
    return problems


def _read_headers(text: str, answer: Answer) -> None:
    """The last response's status and headers (curl dumps every response it followed)."""
    for line in text.splitlines():
        if line.startswith("HTTP/"):
            answer.status = int(line.split()[1])
            answer.headers = {}
        elif ":" in line:
            name, value = line.split(":", 1)
            answer.headers[name.strip().lower()] = value.strip()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _short(answer: Answer) -> str:
    out = answer.stdout.strip()[:600] or answer.stderr.strip()[-600:]
    return f"status {answer.status}, exit {answer.rc}: {out}"


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_example_of_the_page_runs_as_documented(
    path: Path, docs_stack: DocsStack, tmp_path: Path
) -> None:
    page = Page(path, docs_stack, tmp_path)
    try:
        page.run()
    finally:
        page.stop()
    print(f"{path.name}: {page.ran} blocks run")
    assert not page.failures, f"{len(page.failures)} examples of {path.name} fail:\n" + "\n".join(
        page.failures
    )
