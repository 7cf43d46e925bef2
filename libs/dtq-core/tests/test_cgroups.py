"""The memory cgroup helper the OOM test (A9) relies on: a process past the limit is killed
by the kernel, the kill is counted, and the cgroup is gone afterwards."""

from __future__ import annotations

import signal
import subprocess
import sys

from dtq_devtools.testing.cgroups import memory_limit

HOG = """
import sys
held = []
sys.stdin.readline()  # moved into the cgroup by now
for _ in range(64):
    held.append(bytearray(b"\\x01" * (8 << 20)))
print("survived", flush=True)
"""


def test_a_process_past_the_limit_is_oom_killed_and_the_cgroup_removed() -> None:
    with memory_limit(32 << 20) as cgroup:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOG],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        cgroup.add(proc.pid)
        out, _ = proc.communicate("go\n", timeout=60)
        kills = cgroup.oom_kills()
        path = cgroup.path
    assert proc.returncode == -signal.SIGKILL
    assert "survived" not in out
    assert kills >= 1
    assert not path.exists()
