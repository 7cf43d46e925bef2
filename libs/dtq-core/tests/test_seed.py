"""Randomised tests draw a fresh seed each run and replay one on request (docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import core

from dtq_devtools.testing import SEED_VARIABLE


def test_hypothesis_draws_from_this_runs_seed() -> None:
    assert core.global_force_seed == int(os.environ[SEED_VARIABLE])


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_probe.py").write_text(
        "import os\n"
        "from hypothesis import core\n"
        "def test_probe():\n"
        "    print('SEED', core.global_force_seed, os.environ['DTQTEST_SEED'])\n"
    )
    clean = {k: v for k, v in os.environ.items() if k != SEED_VARIABLE}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "dtq_devtools.testing.plugin",
            "-s",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_probe.py",
        ],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_seed_is_replayed_on_request(tmp_path: Path) -> None:
    done = _run(tmp_path, {SEED_VARIABLE: "4242"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SEED 4242 4242" in done.stdout


def test_each_run_draws_a_fresh_seed(tmp_path: Path) -> None:
    seeds = set()
    for _ in range(2):
        done = _run(tmp_path, {})
        assert done.returncode == 0, done.stdout + done.stderr
        line = next(x for x in done.stdout.splitlines() if x.startswith("SEED"))
        _, hypothesis_seed, env_seed = line.split()
        assert hypothesis_seed == env_seed
        seeds.add(env_seed)
    assert len(seeds) == 2  # two draws from 2**32 seeds
