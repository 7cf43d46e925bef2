"""The test kit (``dtq_core.testing``) as a user's suite loads it: a pytest process of its own
runs kit_project/kit_checks.py with the plugin, against a redis-server the kit starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dtq_core.infra.clock import test_clock_key, use_test_clock
from dtq_core.protocol.library import library

PROJECT = Path(__file__).parent / "kit_project"
INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
python_files = kit_checks.py
dtq_registry = kitapp:registry
filterwarnings = error
"""


def test_the_kit_runs_a_users_suite(tmp_path: Path) -> None:
    for name in ("kitapp.py", "kit_checks.py"):
        shutil.copy(PROJECT / name, tmp_path / name)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["dtq_core.testing"]\n')
    (tmp_path / "pytest.ini").write_text(INI)
    env = {k: v for k, v in os.environ.items() if k != "DTQ_TEST_REDIS_URL"}
    env["PYTHONPATH"] = str(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    passed = {
        line.removeprefix("PASSED kit_checks.py::")
        for line in run.stdout.splitlines()
        if line.startswith("PASSED kit_checks.py::")
    }
    expected = {
        line.split("(")[0].removeprefix("async def ")
        for line in (PROJECT / "kit_checks.py").read_text().splitlines()
        if line.startswith("async def test_")
    }
    assert len(expected) >= 10
    assert passed == expected


def test_the_kits_clock_builds_a_library_of_its_own() -> None:
    production = library()
    assert test_clock_key() is None
    use_test_clock("dtq:test:clock")
    try:
        kit = library()
        assert kit.name != production.name
        assert "local TEST_CLOCK = 'dtq:test:clock'" in kit.source
    finally:
        use_test_clock(None)
    assert library() == production
    assert "local TEST_CLOCK = nil" in production.source


def test_a_clock_key_that_would_break_the_lua_is_refused() -> None:
    with pytest.raises(ValueError, match="quotes"):
        use_test_clock("it's")
    assert test_clock_key() is None
