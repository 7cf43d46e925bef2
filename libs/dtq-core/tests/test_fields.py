"""The hash-field table against what the code does: every field a Lua file names is in it
(and every entry is used), its writers and readers are the transitions and modules that write
and read it, and docs/architecture.md renders it as it is."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtq_core.protocol.fields import META_HASH, TASK_HASH, FieldSpec, MetaField, TaskField
from dtq_core.protocol.library import SCRIPT_NAMES, lua_sources
from dtq_devtools.fieldsdoc import BEGIN, END, render

REPO = Path(__file__).resolve().parents[3]
READS = {"HGET", "HMGET", "HSTRLEN", "HEXISTS"}
Uses = dict[tuple[str, str], tuple[set[str], set[str]]]  # (hash, field) -> (writers, readers)


def _code(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _split(args: str) -> list[str]:
    """Top-level comma-separated arguments of a Lua call (quotes and brackets respected)."""
    out, depth, cur, quoted = [], 0, "", False
    for c in args:
        quoted = not quoted if c == "'" else quoted
        depth += (c in "({") - (c in ")}") if not quoted else 0
        if c == "," and depth == 0 and not quoted:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
    return [*out, cur.strip()]


def _hash_calls(code: str) -> Iterator[tuple[str, list[str]]]:
    """``(command, arguments)`` of every ``rcall('H...', ...)``."""
    for m in re.finditer(r"rcall\('(H[A-Z]+)',", code):
        depth, quoted, j = 1, False, m.end()
        while depth:
            c = code[j]
            quoted = not quoted if c == "'" else quoted
            depth += ((c == "(") - (c == ")")) if not quoted else 0
            j += 1
        yield m.group(1), _split(code[m.end() : j - 1])


def _literal(arg: str) -> str:
    m = re.fullmatch(r"'([^']*)'", arg)
    assert m, f"a hash field is named by a literal, not {arg!r}"
    return m.group(1)


def _direct_uses(code: str) -> Iterator[tuple[str, str, bool]]:
    """``(hash, field, written)`` for each field a piece of Lua names."""
    for cmd, (key, *rest) in _hash_calls(code):
        if "'gq:" in key:
            continue  # a queue's group weights (group -> weight), not one of the two hashes
        if key == "wf":
            continue  # a workflow's hash (its fields: dtq_core.protocol.workflows)
        if key == "hist":
            continue  # a queue's per-minute history (its fields: dtq_core.protocol.history)
        where = "meta" if "meta" in key else "task"
        if cmd in READS:
            names, written = rest, False
        elif cmd in {"HDEL", "HINCRBY"}:
            names, written = rest if cmd == "HDEL" else rest[:1], True
        elif rest and rest[0].startswith("unpack"):
            continue  # HSET of a field list built below
        else:
            names, written = rest[0::2], True
        for name in names:
            yield where, _literal(name), written
    for m in re.finditer(r"local fields = \{\w+, (.*?)\}", code, re.S):
        for name in _split(m.group(1))[0::2]:
            yield "task", _literal(name), True
    for m in re.finditer(r"fields\[#fields \+ 1\] = '(\w+)'; fields\[#fields \+ 1\] =", code):
        yield "task", m.group(1), True


def _helpers() -> dict[str, str]:
    """The code of each helper of ``_lib.lua`` by name."""
    parts = re.split(r"^local function (\w+)", _code(lua_sources()["_lib"]), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _called(code: str, helpers: dict[str, str]) -> set[str]:
    """The helpers ``code`` calls, directly or through other helpers."""
    found: set[str] = set()
    todo = [code]
    while todo:
        text = todo.pop()
        for name, body in helpers.items():
            if name not in found and re.search(rf"\b{name}\(", text):
                found.add(name)
                todo.append(body)
    return found


def lua_uses() -> Uses:
    """Per field, the transitions that write and read it (a helper's uses count for each
    transition that calls it)."""
    helpers = _helpers()
    uses: Uses = defaultdict(lambda: (set(), set()))
    for name in SCRIPT_NAMES:
        code = _code(lua_sources()[name])
        for piece in [code, *(helpers[h] for h in _called(code, helpers))]:
            for where, field, written in _direct_uses(piece):
                uses[(where, field)][0 if written else 1].add(name)
    return uses


def _transitions(names: tuple[str, ...]) -> set[str]:
    return {n for n in names if not n.startswith("dtq_")}


TABLES = [("task", TASK_HASH, TaskField), ("meta", META_HASH, MetaField)]


@pytest.mark.parametrize(("where", "table", "enum"), TABLES, ids=["task", "meta"])
def test_the_table_has_one_row_per_field(
    where: str, table: tuple[FieldSpec, ...], enum: type[TaskField] | type[MetaField]
) -> None:
    assert [r.field for r in table] == list(enum)  # each member once, in declaration order


def test_every_field_the_lua_files_name_is_in_the_table_and_every_entry_is_used() -> None:
    used = set(lua_uses())
    # A field the table names no transition for is Python's alone (a queue's configuration
    # as asked): no lua/ file is expected to name it.
    table = {("task", r.field.value) for r in TASK_HASH} | {
        ("meta", r.field.value)
        for r in META_HASH
        if _transitions(r.written_by) or _transitions(r.read_by)
    }
    assert used - table == set(), "fields used in lua/ but missing from protocol/fields.py"
    assert table - used == set(), "fields in protocol/fields.py that no lua/ file uses"


@pytest.mark.parametrize("row", [*TASK_HASH, *META_HASH], ids=lambda r: r.field.value)
def test_writers_and_readers_are_the_transitions_that_write_and_read_it(row: FieldSpec) -> None:
    where = "task" if isinstance(row.field, TaskField) else "meta"
    writers, readers = lua_uses()[(where, row.field.value)]
    assert _transitions(row.written_by) == writers
    assert _transitions(row.read_by) == readers


def _python_modules() -> Iterator[tuple[str, str]]:
    for src in sorted([*REPO.glob("libs/*/src"), *REPO.glob("services/*/src")]):
        if src.parent.name == "dtq-devtools":
            continue  # the test kit: not a writer or reader the table documents
        for path in sorted(src.rglob("*.py")):
            dotted = ".".join(path.relative_to(src).with_suffix("").parts)
            yield dotted, path.read_text()


def test_the_python_modules_named_are_those_that_name_the_field() -> None:
    """A module that names ``TaskField.X`` (or ``MetaField.X``) outside the table's own module
    and the record decoder's field tuple is listed as a writer or reader of X, and the other
    way round."""
    naming: dict[TaskField | MetaField, set[str]] = defaultdict(set)
    for dotted, text in _python_modules():
        if dotted == "dtq_core.protocol.fields":
            continue
        for enum, member in re.findall(r"\b(TaskField|MetaField)\.([A-Z_]+)\b", text):
            naming[(TaskField if enum == "TaskField" else MetaField)[member]].add(dotted)
    for row in (*TASK_HASH, *META_HASH):
        listed = {n for n in (*row.written_by, *row.read_by) if n.startswith("dtq_")}
        assert listed == naming[row.field], row.field.value


def test_docs_architecture_md_renders_the_table() -> None:
    path = REPO / "docs" / "architecture.md"
    text = path.read_text()
    assert BEGIN in text
    assert END in text
    assert render(text) == text, "docs/architecture.md drifted: run `just docs`"


def test_the_entry_point_checks_and_rewrites(tmp_path: Path) -> None:
    doc = tmp_path / "architecture.md"
    doc.write_text(f"# title\n{BEGIN}stale\n{END}after\n")
    command = [sys.executable, "-m", "dtq_devtools.fieldsdoc", str(doc)]

    def run(*extra: str) -> int:
        done = subprocess.run([*command, *extra], capture_output=True, check=False, timeout=60)
        return done.returncode

    assert run("--check") == 1
    assert run() == 0
    assert run("--check") == 0
    assert doc.read_text() == render(f"# title\n{BEGIN}{END}after\n")


def test_render_refuses_a_document_without_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        render("# no markers\n")
