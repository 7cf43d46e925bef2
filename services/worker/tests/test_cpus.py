"""``--processes auto``: the CPUs a worker may use, from its affinity and its cgroup CPU quota
(cgroup v1 and v2 trees written in a temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path

from dtq_worker.cpus import cgroup_cpu_quota, usable_cpus


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_v2_quota_is_the_tightest_along_the_path(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "cg/cpu.max": "max 100000\n",
            "cg/kubepods/cpu.max": "400000 100000\n",
            "cg/kubepods/pod1/cpu.max": "150000 100000\n",
        },
    )
    membership = tmp_path / "self"
    membership.write_text("0::/kubepods/pod1\n")
    assert cgroup_cpu_quota(tmp_path / "cg", membership) == 1.5
    # A quota of 1.5 CPUs runs 2 processes; never more than the CPUs the process may use.
    assert usable_cpus(tmp_path / "cg", membership) == min(2, len(os.sched_getaffinity(0)))


def test_v2_without_a_quota_is_unlimited(tmp_path: Path) -> None:
    _tree(tmp_path, {"cg/cpu.max": "max 100000\n"})
    membership = tmp_path / "self"
    membership.write_text("0::/\n")
    assert cgroup_cpu_quota(tmp_path / "cg", membership) is None
    assert usable_cpus(tmp_path / "cg", membership) == len(os.sched_getaffinity(0))


def test_v1_quota_and_a_container_that_sees_its_cgroup_at_the_root(tmp_path: Path) -> None:
    # Inside a container the path names the host's cgroup; the mount shows the container's.
    _tree(
        tmp_path,
        {
            "cg/cpu,cpuacct/cpu.cfs_quota_us": "100000\n",
            "cg/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        },
    )
    membership = tmp_path / "self"
    membership.write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    assert cgroup_cpu_quota(tmp_path / "cg", membership) == 1.0
    assert usable_cpus(tmp_path / "cg", membership) == 1


def test_v1_unlimited_and_unreadable_files_mean_no_quota(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {"cg/cpu/cpu.cfs_quota_us": "-1\n", "cg/cpu/cpu.cfs_period_us": "100000\n"},
    )
    membership = tmp_path / "self"
    membership.write_text("1:cpu:/\n")
    assert cgroup_cpu_quota(tmp_path / "cg", membership) is None
    assert cgroup_cpu_quota(tmp_path / "cg", tmp_path / "missing") is None


def test_this_host() -> None:
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)
