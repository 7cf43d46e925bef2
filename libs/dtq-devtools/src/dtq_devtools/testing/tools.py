"""System tools a test needs: missing one skips the test on a developer's machine and fails
it under CI, which installs every tool (``.ci/run`` sets ``CI=true``), so a missing tool can
never turn a CI run green by skipping."""

from __future__ import annotations

import glob
import os
import shutil
from typing import NoReturn

import pytest

LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/lib64/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
    "/opt/homebrew/lib/faketime/libfaketimeMT.1.dylib",
)
"""Where distributions put the multi-threaded libfaketime (the Debian path carries the
machine's multiarch triplet, x86_64-linux-gnu or aarch64-linux-gnu)."""


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() not in {"", "0", "false", "no"}


def unavailable(reason: str) -> NoReturn:
    """Skip locally; under CI a missing capability is a failure."""
    if under_ci():
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


def need_tool(name: str, install: str | None = None) -> str:
    """The path of a program on ``PATH``, or :func:`unavailable`."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (apt-get install -y {install or name})")
    return path


def libfaketime() -> str:
    """The path of libfaketimeMT (``DTQTEST_LIBFAKETIME`` names another), or
    :func:`unavailable`."""
    override = os.environ.get("DTQTEST_LIBFAKETIME")
    candidates = [override] if override else []
    for pattern in LIBFAKETIME_GLOBS:
        candidates.extend(sorted(glob.glob(pattern)))
    for path in candidates:
        if path and os.path.exists(path):
            return path
    unavailable("libfaketime is not installed (apt-get install -y faketime)")
