"""``just test`` (the README's test command, which CI runs) runs the whole suite and then the
SDK, services and integration suites on the other Redis topologies, as docs/testing.md says;
``DTQTEST_TOPOLOGIES`` chooses those runs, and a failing one fails the command."""

from __future__ import annotations

import os
import re
import subprocess

from tests.deploy.conftest import ROOT, need_tool

SELECTION = "tests/deploy/test_parity.py::test_same_services"
"""A fast test for the standalone run (the recipe passes its arguments to that run)."""


def _just(*args: str, topologies: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTQTEST_REDIS")}
    env["DTQTEST_TOPOLOGIES"] = topologies
    return subprocess.run(
        [need_tool("just"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


def test_the_topology_runs_are_the_documented_commands() -> None:
    documented = re.findall(
        r"^uv run --all-packages pytest -n 2 --dist loadgroup -m 'not slow' --redis (\w+) (.+)$",
        (ROOT / "docs" / "testing.md").read_text(),
        re.M,
    )
    assert [t for t, _ in documented] == ["cluster", "sentinel"]
    for topology, paths in documented:
        done = _just("--dry-run", "test-topology", topology, topologies="")
        assert done.returncode == 0, done.stderr
        # The recipe's process count is DTQTEST_PROCESSES, 2 unless set.
        recipe = done.stderr.replace('-n "${DTQTEST_PROCESSES:-2}"', "-n 2")
        assert (
            f'uv run --all-packages pytest -n 2 --dist loadgroup -m "not slow" --redis {topology} '
            f"{paths}" in recipe
        )


def test_just_test_runs_each_topology_and_fails_when_one_fails() -> None:
    """``nosuch`` stands for a topology whose run fails: pytest refuses the choice."""
    done = _just("test", SELECTION, "-q", topologies="nosuch")
    assert done.returncode != 0
    assert "1 passed" in done.stdout  # the standalone run went first, and passed
    assert "--redis: invalid choice: 'nosuch'" in done.stderr
    assert "just test: failed on nosuch" in done.stderr

    skipped = _just("test", SELECTION, "-q", topologies="")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "--redis" not in skipped.stderr
