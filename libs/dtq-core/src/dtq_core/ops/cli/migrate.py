"""``dtq migrate``: load this version's function library into Redis."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import (
    _write,
)
from dtq_core.protocol.scripts import load_library, prune_libraries


async def _migrate(ns: argparse.Namespace, admin: Admin) -> int:
    name = await load_library(admin.client.redis)
    _write(f"loaded function library {name}")
    if ns.prune:
        pruned = await prune_libraries(admin.client.redis)
        _write(
            f"deleted {len(pruned)} older libraries" + (f": {', '.join(pruned)}" if pruned else "")
        )
    return 0
