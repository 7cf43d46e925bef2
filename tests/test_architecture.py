"""The tree is the architecture (docs/architecture.md).

- No service imports another service, and ``dtq_core`` imports no service: services talk only
  through Redis.
- Key names are built in ``dtq_core/protocol/keys.py`` and nowhere else: no other module formats a
  hash-tagged key (``f"{ns}:{{{queue}}}:..."``) or spells the namespace ``dtq:`` into a string.
- A package's version is written in its ``pyproject.toml`` only; code reads it from the
  installed metadata.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = frozenset({"dtq_worker", "dtq_scheduler_leader", "dtq_ingest_api", "dtq_event_gateway"})
CORE = "dtq_core"
KEYS_MODULE = Path("libs/dtq-core/src/dtq_core/protocol/keys.py")


@dataclass(frozen=True)
class Module:
    path: Path  # relative to the repository root
    package: str  # the top-level import package the file belongs to
    tree: ast.Module


def _src_roots() -> Iterator[Path]:
    for group in ("libs", "services"):
        yield from sorted((ROOT / group).glob("*/src"))


def _modules() -> list[Module]:
    found = []
    for src in _src_roots():
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(src)
            found.append(
                Module(path.relative_to(ROOT), rel.parts[0], ast.parse(path.read_text(), str(path)))
            )
    return found


def _service_packages() -> set[str]:
    """The four services plus any other ``dtq_*`` package under ``services/``."""
    present = {
        child.name
        for src in (ROOT / "services").glob("*/src")
        for child in src.iterdir()
        if child.is_dir() and child.name.startswith("dtq_")
    }
    return set(SERVICES) | present


def _imported_packages(module: Module) -> Iterator[tuple[int, str]]:
    """Top-level packages imported by ``module``: import statements and constant-string
    ``importlib.import_module`` / ``__import__`` calls."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.lineno, node.module.split(".")[0]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in {"__import__", "import_module"}
                )
            )
        ):
            yield node.lineno, node.args[0].value.split(".")[0]


TEST_KIT = Path("libs/dtq-core/src/dtq_core/testing.py")
"""The one module of dtq-core that runs services: the test kit for users' suites runs the worker
and the leader's duties (docs/testing-your-tasks.md), only in test environments that install
them."""


def _forbidden_imports(modules: list[Module], services: set[str]) -> list[str]:
    problems = []
    for module in modules:
        if module.path == TEST_KIT:
            forbidden = services - {"dtq_worker", "dtq_scheduler_leader"}
        elif module.package == CORE:
            forbidden = services
        elif module.package in services:
            forbidden = services - {module.package}
        else:
            continue
        for lineno, imported in _imported_packages(module):
            if imported in forbidden:
                problems.append(f"{module.path}:{lineno}: {module.package} imports {imported}")
    return problems


@pytest.fixture(scope="module")
def modules() -> list[Module]:
    return _modules()


def test_the_walk_sees_the_packages(modules: list[Module]) -> None:
    packages = {m.package for m in modules}
    assert CORE in packages
    assert any(m.path == KEYS_MODULE for m in modules)
    assert packages & SERVICES, "no service package found under services/*/src"


def test_no_service_imports_another_and_core_imports_none(modules: list[Module]) -> None:
    assert _forbidden_imports(modules, _service_packages()) == []


def test_the_import_rule_catches_violations() -> None:
    """The checker itself, on code that breaks the rule."""
    bad = {
        CORE: "import dtq_worker\n",
        "dtq_worker": "from dtq_scheduler_leader.leader import Leader\n",
        "dtq_ingest_api": "import importlib\nimportlib.import_module('dtq_event_gateway.app')\n",
        "dtq_event_gateway": "from dtq_ingest_api import app\n",
    }
    fine = {
        "dtq_worker": "from dtq_core import Client\nfrom . import executor\nimport dtq_worker.x\n",
    }
    modules = [Module(Path(f"{p}.py"), p, ast.parse(src)) for p, src in bad.items()]
    assert len(_forbidden_imports(modules, set(SERVICES))) == 4
    modules = [Module(Path(f"{p}.py"), p, ast.parse(src)) for p, src in fine.items()]
    assert _forbidden_imports(modules, set(SERVICES)) == []


# -- key names are built in keys.py only --------------------------------------------------------

_NAMESPACE_LITERAL = re.compile(r"^dtq:[A-Za-z{]")


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _key_building(module: Module) -> list[str]:
    problems = []
    docstrings = _docstrings(module.tree)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "\x00" for part in node.values
            )
            # A literal brace right after a colon, next to a formatted value: "...:{<q>}...".
            if re.search(r":\{\x00\}", text):
                problems.append(f"{module.path}:{node.lineno}: builds a hash-tagged key")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _NAMESPACE_LITERAL.match(node.value)
        ):
            problems.append(f"{module.path}:{node.lineno}: hard-codes a key {node.value!r}")
    return problems


def test_keys_are_built_only_in_keys_py(modules: list[Module]) -> None:
    problems = [p for m in modules if m.path != KEYS_MODULE for p in _key_building(m)]
    assert problems == []


def test_the_key_rule_catches_violations() -> None:
    bad = [
        'key = f"{ns}:{{{queue}}}:p{pri}"\n',
        'key = f"dtq:{{{queue}}}:meta"\n',
        'key = "dtq:{emails}:p5"\n',
        'key = "dtq:queues"\n',
    ]
    for src in bad:
        module = Module(Path("x.py"), "dtq_worker", ast.parse(src))
        assert _key_building(module), src
    fine = [
        '"""Keys look like dtq:{emails}:p5."""\n',
        'log = f"dtq: {text}"\n',
        'msg = f"task {task_id!r} is {status}"\n',
        'data = f"{{\\"a\\": {n}}}"\n',
    ]
    for src in fine:
        module = Module(Path("x.py"), "dtq_worker", ast.parse(src))
        assert _key_building(module) == [], src
    # keys.py itself does it, which is what the rule excludes it for.
    keys_py = ROOT / KEYS_MODULE
    assert _key_building(Module(KEYS_MODULE, CORE, ast.parse(keys_py.read_text())))


_VERSION_LITERAL = re.compile(r"^\d+\.\d+(\.\d+)?([.-]?(a|b|rc|dev|post)\d*)?$")


def _written_versions(module: Module) -> list[str]:
    """Assignments of a version literal to ``__version__``."""
    problems = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        value = node.value
        if (
            any(n == "__version__" for n in names)
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
            and _VERSION_LITERAL.match(value.value)
        ):
            problems.append(f"{module.path}:{node.lineno}: writes the version {value.value!r}")
    return problems


def test_each_package_writes_its_version_only_in_pyproject(modules: list[Module]) -> None:
    """One version source per package: ``__version__`` is read with ``importlib.metadata``
    (``dtq --version``, the worker registry, ``dtq_build_info``)."""
    problems = [p for m in modules for p in _written_versions(m)]
    assert problems == []
    bad = Module(Path("x.py"), "dtq_worker", ast.parse('__version__ = "0.1.0"\n'))
    assert _written_versions(bad)
    typed = Module(Path("x.py"), "dtq_worker", ast.parse('__version__: str = "1.2"\n'))
    assert _written_versions(typed)
