"""``dtq keys new NAME SCOPES``: make an API key. Needs no Redis and no settings: the secret is
printed once for the client, the entry (its SHA-256, never the secret) for ``DTQ_API_KEYS``."""

from __future__ import annotations

import argparse
import sys

from dtq_core.errors import SettingsError
from dtq_core.infra.auth import new_key
from dtq_core.ops.cli.output import _json


def keys_new(ns: argparse.Namespace) -> int:
    """Print a new secret and its ``DTQ_API_KEYS`` entry; exit 2 on a bad name or scopes."""
    try:
        secret, entry = new_key(ns.name, ns.scopes)
    except SettingsError as exc:
        sys.stderr.write(f"dtq: {exc}\n")
        return 2
    if ns.json:
        doc = {"name": ns.name, "scopes": ns.scopes, "secret": secret, "entry": entry}
        sys.stdout.write(_json(doc) + "\n")
        return 0
    sys.stdout.write(f"secret (give it to the client, shown once): {secret}\n")
    sys.stdout.write(f"DTQ_API_KEYS entry (for the server):        {entry}\n")
    return 0
