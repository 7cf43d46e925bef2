"""Cgroups of a test's own: a memory limit, to let the kernel's OOM killer end one process,
and a write limit on a disk, to make one process's fsyncs slow.

cgroup v2 (``memory.max``, ``io.max``) where the unified hierarchy has the controller, else
the v1 hierarchy (``memory.limit_in_bytes``, ``blkio.throttle.write_bps_device``). Where
neither can be written (no root, a read-only ``/sys/fs/cgroup``) the test is
:func:`~dtq_devtools.testing.tools.unavailable`: skipped on a developer's machine, failed
under CI.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dtq_devtools.testing.tools import unavailable

ROOT = Path("/sys/fs/cgroup")


class Cgroup:
    """One cgroup directory with a limit; processes join it by PID."""

    def __init__(self, path: Path, limit_file: str) -> None:
        self.path = path
        self.limit_file = limit_file

    @property
    def version(self) -> int:
        return 2 if self.path.parent == ROOT else 1

    def add(self, pid: int) -> None:
        """Move a process in (all its threads): what it does from now on counts against
        the limit."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def release(self, pid: int) -> None:
        """Move a process back to the hierarchy's root: the limit no longer holds it."""
        (self.path.parent / "cgroup.procs").write_text(f"{pid}\n")

    def lift(self) -> None:
        """Take the limit off: what it held back goes on at once (a killed process waiting on
        a throttled write can then exit)."""
        current = (self.path / self.limit_file).read_text().split()
        if self.limit_file == "io.max" and current:
            (self.path / self.limit_file).write_text(f"{current[0]} wbps=max\n")
        elif current:
            (self.path / self.limit_file).write_text(f"{current[0]} 0\n")

    def remove(self, timeout: float = 10.0) -> None:
        """Delete the cgroup once its processes are gone (rmdir fails while any is left)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


class MemoryCgroup(Cgroup):
    """A cgroup with a memory limit."""

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended in this cgroup (when the kernel says)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            lines = (self.path / name).read_text().splitlines()
        except OSError:
            return 0
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0


def _made(parent: Path, limits: dict[str, str], kind: str) -> Path:
    """A new cgroup directory under ``parent`` with ``limits`` written (a file the kernel
    does not offer is left out); nothing is left behind when it cannot be made."""
    path = parent / f"dtqtest-{os.getpid()}-{time.monotonic_ns()}"
    try:
        path.mkdir()
        for i, (name, value) in enumerate(limits.items()):
            if i == 0 or (path / name).exists():
                (path / name).write_text(f"{value}\n")
    except OSError as exc:
        if path.exists():
            path.rmdir()
        unavailable(f"cannot make a {kind} cgroup under {parent}: {exc}")
    return path


def _base() -> tuple[Path, str] | None:
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return ROOT, "memory.max"
    if (ROOT / "memory" / "memory.limit_in_bytes").exists():
        return ROOT / "memory", "memory.limit_in_bytes"
    return None


@contextmanager
def memory_limit(limit_bytes: int) -> Iterator[MemoryCgroup]:
    """A new memory cgroup limited to ``limit_bytes`` (no swap to escape to), removed on
    the way out; the test stops the processes it added before leaving."""
    base = _base()
    if base is None:
        unavailable("no memory cgroup controller under /sys/fs/cgroup")
    parent, limit_file = base
    limits = {limit_file: str(limit_bytes)}
    if limit_file == "memory.max":
        limits["memory.swap.max"] = "0"
    group = MemoryCgroup(_made(parent, limits, "memory"), limit_file)
    try:
        yield group
    finally:
        group.remove()


def _disk_of(path: Path) -> str:
    """``major:minor`` of the whole disk that holds ``path`` (a limit names a disk, not a
    partition)."""
    dev = os.stat(path).st_dev
    sysfs = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if (sysfs / "partition").exists():
        return (sysfs.resolve().parent / "dev").read_text().strip()
    return f"{os.major(dev)}:{os.minor(dev)}"


@contextmanager
def write_limit(path: Path, bytes_per_s: int) -> Iterator[Cgroup]:
    """A new cgroup whose processes write at most ``bytes_per_s`` to the disk that holds
    ``path`` (what a slow or shared disk does to a process's fsyncs), removed on the way out;
    the test stops or releases the processes it added before leaving.

    The limit holds what a process submits itself, its fsync's writes included; the kernel's
    own flusher and the file system's journal are not held."""
    try:
        disk = _disk_of(path)
    except OSError as exc:
        unavailable(f"cannot tell which disk holds {path}: {exc}")
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "io" in (ROOT / "cgroup.subtree_control").read_text().split():
        parent, limit_file, limit = ROOT, "io.max", f"{disk} wbps={bytes_per_s}"
    elif (ROOT / "blkio" / "blkio.throttle.write_bps_device").exists():
        parent = ROOT / "blkio"
        limit_file, limit = "blkio.throttle.write_bps_device", f"{disk} {bytes_per_s}"
    else:
        unavailable("no io or blkio cgroup controller under /sys/fs/cgroup")
    group = Cgroup(_made(parent, {limit_file: limit}, "io"), limit_file)
    try:
        yield group
    finally:
        group.remove()
