"""``dtq migrate``: load this version's function library into Redis."""

from __future__ import annotations

import argparse

from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import (
    _json,
    _write,
)
from dtq_core.protocol.scripts import load_library, prune_libraries


async def _migrate(ns: argparse.Namespace, admin: Admin) -> int:
    name = await load_library(admin.client.redis)
    pruned = await prune_libraries(admin.client.redis) if ns.prune else None
    if ns.json:
        _write(_json({"library": name, "pruned": pruned}))
        return 0
    _write(f"loaded function library {name}")
    if pruned is not None:
        _write(
            f"deleted {len(pruned)} older libraries" + (f": {', '.join(pruned)}" if pruned else "")
        )
    return 0
