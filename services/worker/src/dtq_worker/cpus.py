"""How many CPUs this worker may use: what ``--processes auto`` and the default handler-process
pool count.

``os.cpu_count()`` counts the host's CPUs. A container limited to one CPU on a 32-core host
would then start 32 processes that share one CPU's time. The count here is the smaller of:

- the CPUs the process may run on (its affinity: ``taskset``, a cpuset cgroup);
- the cgroup CPU quota, rounded up: cgroup v2 ``cpu.max`` (``200000 100000`` is 2 CPUs), or
  v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, the tightest along the process's cgroup
  path (Docker's ``--cpus``, Kubernetes' CPU limit).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The CPUs this process may use (at least 1).

    Args:
        root: where the cgroup hierarchies are mounted (tests pass a folder of their own).
        proc_cgroup: the process's cgroup membership file.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def cgroup_cpu_quota(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The CPU quota of this process's cgroups in CPUs (``1.5``), ``None`` when unlimited or
    unknown."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: "0::/path"
            quotas += _along(root, path, _v2_quota)
        elif "cpu" in controllers.split(","):  # cgroup v1: "4:cpu,cpuacct:/path"
            # Mounted under the joint name, often with a "cpu" link beside it.
            for mount in dict.fromkeys([root / controllers, root / "cpu"]):
                quotas += _along(mount, path, _v1_quota)
    return min(quotas) if quotas else None


def _along(mount: Path, path: str, reader: Callable[[Path], float | None]) -> list[float]:
    """The quotas of the cgroup at ``path`` under ``mount`` and of each of its parents.

    Inside a container the path names the cgroup on the host, while the mount shows the
    container's own cgroup at its root: the mount's root is read too."""
    if not mount.is_dir():
        return []
    found: list[float] = []
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    for depth in range(len(parts), -1, -1):
        folder = mount.joinpath(*parts[:depth])
        if folder.is_dir():
            quota = reader(folder)
            if quota is not None:
                found.append(quota)
    return found


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
    except OSError:
        return None
    if quota == "max" or not period:
        return None
    return _ratio(quota, period)


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None
