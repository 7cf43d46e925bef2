"""Imports go down the layers and never in a circle (docs/architecture.md, "Layers").

dtq-core is five layers, each importing only its own and the ones below:

1. vocabulary: ``dtq_core.errors``, ``dtq_core.messages``, ``dtq_core.names``
2. ``dtq_core.infra``: settings, the Redis connection, logging, tracing, metrics, start-up
3. ``dtq_core.protocol``: the key map, the task-hash fields, the functions, records, submit
   preparation
4. the SDK: ``dtq_core`` itself, ``dtq_core.client``, ``dtq_core.tasks`` (and any other module at
   the top of the package)
5. ``dtq_core.ops``: the operator API and the ``dtq`` command line
6. ``dtq_core.testing``: the test kit for users' suites (it runs the operator API's reads, and
   the worker and leader services above them)

The services sit on top. Nothing the SDK's install ships imports ``dtq_devtools``. No module in
``libs/`` or ``services/`` takes part in an import circle, lazy imports included: an import
inside a function is a dependency all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS = ("vocabulary", "infra", "protocol", "sdk", "ops", "testing")
VOCABULARY = frozenset({"dtq_core.errors", "dtq_core.messages", "dtq_core.names"})
DEVTOOLS = "dtq_devtools"


@dataclass(frozen=True)
class Source:
    name: str  # dotted module name, "dtq_core.protocol.keys"; a package is its __init__
    path: Path  # relative to the repository root
    is_package: bool
    tree: ast.Module


def _sources(roots: Iterable[Path]) -> dict[str, Source]:
    found = {}
    for src in roots:
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join(parts)
            found[name] = Source(
                name, path.relative_to(ROOT), is_package, ast.parse(path.read_text(), str(path))
            )
    return found


def _roots() -> list[Path]:
    return [p for group in ("libs", "services") for p in sorted((ROOT / group).glob("*/src"))]


def _absolute(source: Source, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = source.name.split(".")
    if not source.is_package:
        base.pop()
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def imports(source: Source, known: set[str]) -> Iterator[tuple[int, str]]:
    """The modules ``source`` imports, anywhere in its body: ``from a.b import c`` is ``a.b.c``
    when that is a module, else ``a.b``."""
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(source, node.module, node.level)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if sub in known else target


def layer(name: str) -> int | None:
    """The layer index of a dtq_core module, None for anything outside dtq_core."""
    if name != "dtq_core" and not name.startswith("dtq_core."):
        return None
    if name in VOCABULARY:
        return LAYERS.index("vocabulary")
    if name == "dtq_core.testing":
        return LAYERS.index("testing")
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in ("infra", "protocol", "ops"):
        return LAYERS.index(parts[1])
    return LAYERS.index("sdk")


def upward_imports(sources: dict[str, Source]) -> list[str]:
    known = set(sources)
    problems = []
    for source in sources.values():
        own = layer(source.name)
        for lineno, target in imports(source, known):
            if target.split(".")[0] == DEVTOOLS and not source.name.startswith(DEVTOOLS):
                problems.append(f"{source.path}:{lineno}: imports {target} (developer tools)")
            theirs = layer(target)
            if own is not None and theirs is not None and theirs > own:
                problems.append(
                    f"{source.path}:{lineno}: {LAYERS[own]} module imports {target} "
                    f"({LAYERS[theirs]})"
                )
    return problems


def circles(sources: dict[str, Source]) -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (Tarjan's
    strongly connected components of the import graph, largest first)."""
    known = set(sources)
    graph = {
        name: sorted({t for _, t in imports(s, known) if t in known and t != name})
        for name, s in sources.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found, key=len, reverse=True)


@pytest.fixture(scope="module")
def sources() -> dict[str, Source]:
    return _sources(_roots())


def test_the_walk_sees_every_layer(sources: dict[str, Source]) -> None:
    seen = {layer(name) for name in sources}
    assert seen >= set(range(len(LAYERS))), "a layer of dtq_core has no module"
    assert "dtq_devtools.testing" in sources


def test_imports_only_go_down_the_layers(sources: dict[str, Source]) -> None:
    assert upward_imports(sources) == []


def test_no_import_circle_in_libs_or_services(sources: dict[str, Source]) -> None:
    assert circles(sources) == []


def _fake(files: dict[str, str]) -> dict[str, Source]:
    out = {}
    for file, text in files.items():
        name = file.removesuffix(".__init__")
        path = Path(name.replace(".", "/") + ".py")
        out[name] = Source(name, path, file.endswith(".__init__"), ast.parse(text))
    return out


def test_the_layer_rule_catches_violations() -> None:
    bad = _fake(
        {
            "dtq_core.errors": "from dtq_core.infra.settings import Settings\n",
            "dtq_core.infra.settings": "def f():\n    from dtq_core.protocol import keys\n",
            "dtq_core.protocol.keys": "from dtq_core import Client\n",
            "dtq_core.client": "from dtq_core.ops.admin import Admin\n",
            "dtq_core.ops.admin": "import dtq_devtools.testing\n",
            "dtq_core.__init__": "",
            "dtq_core.protocol.__init__": "",
            "dtq_core.infra.__init__": "",
        }
    )
    assert len(upward_imports(bad)) == 5
    fine = _fake(
        {
            "dtq_core.ops.admin": "from dtq_core import Client\nfrom ..protocol import keys\n",
            "dtq_core.protocol.keys": "from dtq_core.names import PRIORITIES\n",
            "dtq_core.protocol.__init__": "",
            "dtq_core.names": "from dtq_core.errors import ValidationError\n",
            "dtq_devtools.testing": "from dtq_core.ops.admin import Admin\n",
        }
    )
    assert upward_imports(fine) == []


def test_the_circle_rule_catches_circles() -> None:
    bad = _fake(
        {
            "svc.app": "from svc import openapi\n",
            "svc.openapi": "from svc.routes.tasks import handler\n",
            "svc.routes.tasks": "def f():\n    from svc.app import build\n",
            "svc.routes.__init__": "",
            "svc.__init__": "",
            "svc.alone": "import svc.app\n",
            "other.a": "from . import b\n",
            "other.b": "from .a import x\n",
            "other.__init__": "",
        }
    )
    assert circles(bad) == [["svc.app", "svc.openapi", "svc.routes.tasks"], ["other.a", "other.b"]]
    fine = _fake({"svc.app": "from svc import openapi\n", "svc.openapi": "import json\n"})
    assert circles(fine) == []
