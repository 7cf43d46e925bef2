"""The examples of README.md and docs/*.md as the docs test reads them: fenced blocks, the
commands in a shell block, what the page says each command answers, and how an answer is
compared with what the page shows.

Conventions a page follows (the test's docstring explains them to writers):

- ``sh``/``bash``/``console`` blocks are shell examples, ``python`` blocks Python examples;
  other fences (``json``, ``js``, plain) are illustrations and are not run.
- An italic line right above a block changes how it runs, visibly to a reader:
  ``*Not run by the docs test: <why>.*`` leaves it out; ``*Keeps running until Ctrl-C ...*``
  runs it in the background until the page ends, and ``wait for `text` `` in that line makes
  the test wait until the command has printed ``text`` before it goes on.
- A Python block whose first line is ``# <path>.py`` is a file: it is saved under that path,
  and a later shell block runs it.
- A command's answer is shown either after a ``$ `` prompt (the lines up to the next prompt)
  or in comments: ``# 201`` (a status), ``# 200 {...}``, ``# {...}``, continued on further
  comment lines; two comment lines that both start with a status are alternatives. Every
  command must exit with status 0 unless its comment starts with ``exit N`` (``# exit 1
  {"status": "dead", ...}``): a documented failure. A comment
  that starts with a word is prose. ``...`` and ``…`` elide: a member, an element, or the rest
  of a string (``"emails:3f0c..."``). A time (``"2026-01-05T10:00:00.123456Z"``) stands for
  any RFC 3339 time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHELL = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py"}
SKIP_MARK = re.compile(r"^\*Not run by the docs test: (?P<why>.+)\*$")
BACKGROUND_MARK = re.compile(r"^\*Keeps running until Ctrl-C(?P<rest>.*)\*$")
WAIT_FOR = re.compile(r"wait for (?:its |the )?`(?P<text>[^`]+)`")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
FILE_LINE = re.compile(r"^# (?P<path>[\w./-]+\.py)\s*$")
STATUS = re.compile(r"^(?P<status>[1-5]\d\d)\b\s*(?P<rest>.*)$")
EXIT = re.compile(r"^exit (?P<exit>\d+)\b:?\s*(?P<rest>.*)$")
HEADER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*): (?P<value>\S.*)$")
ELISION = re.compile(r"\.\.\.|…")
VARYING_KEY = re.compile(
    r"^(id|task_id|host|pid|request_id|detail|title|version|worker|cursor|next_cursor|ts)$"
    r"|_at$|heartbeat|_age_s$"
)
"""Keys whose values differ from run to run: the page's value stands for any of its type."""
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
"""A time the page shows stands for any time in the same format."""


@dataclass
class Expected:
    """What a page shows a command answering: a status, headers, a body, or text lines."""

    status: int | None = None
    exit: int = 0
    """The command's exit status (a CLI that reports a failure, say)."""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: str = ""

    def describe(self) -> str:
        return " ".join(p for p in (str(self.status or ""), self.body) if p)


@dataclass
class Command:
    """One command of a shell block and its documented answers (alternatives)."""

    text: str
    line: int
    expected: list[Expected] = field(default_factory=list)
    output: list[str] | None = None
    """The lines a ``$ `` prompt example prints, when it shows them."""


@dataclass
class Block:
    """A fenced block, where it is, and how the docs test treats it."""

    path: Path
    line: int
    lang: str
    text: str
    skip: str | None = None
    background: bool = False
    wait_for: str | None = None

    @property
    def kind(self) -> str:
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "file" if self.file_path else "python"
        return "illustration"

    @property
    def file_path(self) -> str | None:
        first = self.text.split("\n", 1)[0]
        m = FILE_LINE.match(first)
        return m["path"] if m and self.lang in PYTHON else None

    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown page, with the marker line above it."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, len(m["indent"])
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        block = Block(path, start + 2, m["lang"].lower(), "\n".join(body))
        _read_marker(block, _line_above(lines, start))
        found.append(block)
        i += 1
    return found


def _line_above(lines: list[str], index: int) -> str:
    """The paragraph right above a fence, on one line (a marker may wrap)."""
    j = index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    paragraph: list[str] = []
    while j >= 0 and lines[j].strip() and not FENCE.match(lines[j]):
        paragraph.insert(0, lines[j].strip())
        j -= 1
    return " ".join(paragraph)


def _read_marker(block: Block, above: str) -> None:
    if m := SKIP_MARK.match(above):
        block.skip = m["why"].rstrip(".")
    elif m := BACKGROUND_MARK.match(above):
        block.background = True
        if w := WAIT_FOR.search(m["rest"]):
            block.wait_for = w["text"]


# -- shell blocks -------------------------------------------------------------------------------


def _comment_start(text: str) -> tuple[int | None, bool]:
    """Where a shell comment starts in ``text`` (None: none), and whether every quote
    opened in ``text`` is closed."""
    quote: str | None = None
    escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return i, True
        elif ch == "\n":
            continue
    return None, quote is None


def _expectation(comment: str) -> Expected | None:
    """A comment that shows an answer (``201 ...``, ``{...``, ``[...``); None for prose."""
    text = comment.strip()
    status, exit_status = None, None
    if m := EXIT.match(text):
        exit_status, text = int(m["exit"]), m["rest"].strip()
    if m := STATUS.match(text):
        status, text = int(m["status"]), m["rest"].strip()
    expected = Expected(status=status, exit=exit_status or 0)
    if exit_status is not None and not text:
        return expected
    if h := HEADER.match(text):
        expected.headers.append((h["name"], h["value"].strip()))
    elif text.startswith(("{", "[")):
        expected.body = text
    elif status is None or text:
        return None if status is None else expected
    return expected


def _continues(comment: str) -> bool:
    """A comment line that continues the previous answer (an indented member)."""
    return comment.startswith((" ", "\t")) and comment.strip().startswith(('"', "{", "[", "}"))


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, each with what the page shows it answering."""
    lines = block.text.split("\n")
    if any(line.startswith("$ ") for line in lines):
        return _prompt_commands(block, lines)
    found: list[Command] = []
    pending: list[str] = []
    start = 0
    for n, line in enumerate(lines):
        stripped = line.strip()
        if not pending and stripped.startswith("#"):
            _comment_line(found, stripped[1:])
            continue
        if not pending and not stripped:
            continue
        if not pending:
            start = n
        pending.append(line)
        text = "\n".join(pending)
        cut, closed = _comment_start(text)
        if not closed or (cut is None and text.endswith("\\")):
            continue
        command, comment = (text, "") if cut is None else (text[:cut], text[cut + 1 :])
        cmd = Command(command.rstrip().removesuffix("\\").rstrip(), block.line + start)
        if comment and (e := _expectation(comment)):
            cmd.expected.append(e)
        found.append(cmd)
        pending = []
    return found


def _comment_line(found: list[Command], comment: str) -> None:
    if not found:
        return
    last = found[-1]
    if last.expected and _continues(comment):
        last.expected[-1].body += " " + comment.strip()
    elif e := _expectation(comment):
        previous = last.expected[-1] if last.expected else None
        if previous and previous.status and e.status is None and e.body and not previous.body:
            previous.body = e.body  # "# 201  Location: ..." then "# {...}": one answer
            return
        last.expected.append(e)


def _prompt_commands(block: Block, lines: list[str]) -> list[Command]:
    found: list[Command] = []
    n = 0
    while n < len(lines):
        if not lines[n].startswith("$ "):
            n += 1
            continue
        start, parts = n, [lines[n][2:]]
        while parts[-1].endswith("\\") and n + 1 < len(lines):
            n += 1
            parts.append(lines[n])
        n += 1
        output: list[str] = []
        while n < len(lines) and not lines[n].startswith("$ "):
            output.append(lines[n])
            n += 1
        text = "\n".join(parts)
        cut, _ = _comment_start(text)
        cmd = Command(text if cut is None else text[:cut].rstrip(), block.line + start)
        cmd.output = [o for o in output if o.strip()]
        found.append(cmd)
    return found


# -- comparing answers ----------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_HOLE = "\x00"


def sample_json(sample: str) -> Any:
    """A page's JSON sample as a value: elided members and elements dropped, elided strings
    kept as they are (the comparison knows them).

    Raises:
        ValueError: the sample is not JSON even with its elisions removed.
    """
    parts: list[str] = []
    pos = 0
    for m in _STRING.finditer(sample):
        parts.append(ELISION.sub(_HOLE, sample[pos : m.start()]))
        parts.append(m.group())
        pos = m.end()
    parts.append(ELISION.sub(_HOLE, sample[pos:]))
    text = "".join(parts)
    text = re.sub(rf",\s*{_HOLE}", "", text)
    text = re.sub(rf"{_HOLE}\s*,?", "", text)
    try:
        # Prose may follow the sample on its line: `{"status": "ok"} while the process lives`.
        return json.JSONDecoder().raw_decode(text.strip())[0]
    except json.JSONDecodeError as exc:
        raise ValueError(f"the page's sample is not JSON ({exc}): {sample}") from exc


def _elided_prefix(value: str) -> str:
    """The part of an elided string the answer must start with: up to its last separator
    (``emails:3f0c...`` → ``emails:``), since the rest is an example's random digits."""
    head = ELISION.split(value, 1)[0]
    m = re.match(r"^(.*[^A-Za-z0-9])", head)
    return m.group(1) if m else ""


def match(doc: Any, actual: Any, bindings: dict[str, str], key: str = "") -> list[str]:
    """How ``actual`` differs from the page's ``doc`` value (empty: it matches). The page
    shows at least the members it names; elided strings (``"emails:3f0c..."``) are bound to
    the actual value in ``bindings`` so that later commands can use them."""
    if doc is None or (actual is None and VARYING_KEY.search(key.rsplit(".", 1)[-1])):
        return []
    if isinstance(doc, dict):
        return _match_object(doc, actual, bindings, key)
    if isinstance(doc, list):
        return _match_list(doc, actual, bindings, key)
    if isinstance(doc, bool) or isinstance(actual, bool):
        return [] if doc == actual else [f"{key}: expected {doc!r}, got {actual!r}"]
    if isinstance(doc, int | float):
        ok = isinstance(actual, int | float)
        return [] if ok else [f"{key}: expected a number, got {actual!r:.80}"]
    return _match_string(str(doc), actual, bindings, key)


def _match_object(
    doc: dict[str, Any], actual: Any, bindings: dict[str, str], key: str
) -> list[str]:
    if not isinstance(actual, dict):
        return [f"{key or 'body'}: expected an object, got {actual!r:.80}"]
    problems: list[str] = []
    for k, v in doc.items():
        if k not in actual:
            problems.append(f"{key}.{k}: missing")
        else:
            problems += match(v, actual[k], bindings, f"{key}.{k}")
    return problems


def _match_list(doc: list[Any], actual: Any, bindings: dict[str, str], key: str) -> list[str]:
    if not isinstance(actual, list):
        return [f"{key}: expected a list, got {actual!r:.80}"]
    problems: list[str] = []
    for i, item in enumerate(doc):
        if not any(not match(item, a, {}, f"{key}[{i}]") for a in actual):
            candidates = actual or [None]
            closest = min((match(item, a, {}, f"{key}[{i}]") for a in candidates), key=len)
            problems += closest or [f"{key}[{i}]: no element like {item!r:.80}"]
            continue
        chosen = next(a for a in actual if not match(item, a, {}, f"{key}[{i}]"))
        match(item, chosen, bindings, f"{key}[{i}]")
    return problems


def _match_string(doc: str, actual: Any, bindings: dict[str, str], key: str) -> list[str]:
    name = key.rsplit(".", 1)[-1]
    if RFC3339.match(doc):
        ok = isinstance(actual, str) and RFC3339.match(actual)
        return [] if ok else [f"{key}: expected an RFC 3339 time like {doc!r}, got {actual!r}"]
    if VARYING_KEY.search(name) and not (isinstance(actual, str) and ELISION.search(doc)):
        ok = actual is None or isinstance(actual, str | int | float)
        return [] if ok else [f"{key}: expected a string like {doc!r}, got {actual!r:.80}"]
    if not isinstance(actual, str):
        return [f"{key}: expected a string like {doc!r}, got {actual!r:.80}"]
    if ELISION.search(doc):
        if not actual.startswith(_elided_prefix(doc)):
            return [f"{key}: expected {doc!r}, got {actual!r:.80}"]
        if len(ELISION.split(doc)[0]) >= 3:
            bindings[doc] = actual
        return []
    return [] if doc == actual else [f"{key}: expected {doc!r}, got {actual!r:.80}"]


def text_matches(expected: str, actual: str) -> bool:
    """One line of printed text against the page's line, elisions matching anything."""
    parts = ELISION.split(expected.strip())
    # The letters and digits touching an elision are an example's random ones (`dtq_Jx0...`).
    trimmed = [re.sub(r"^[A-Za-z0-9]+", "", p) if i else p for i, p in enumerate(parts)]
    trimmed = [
        re.sub(r"[A-Za-z0-9]+$", "", p) if i < len(parts) - 1 else p for i, p in enumerate(trimmed)
    ]
    pattern = ".*".join(re.escape(p) for p in trimmed)
    return re.fullmatch(pattern, actual.strip()) is not None
