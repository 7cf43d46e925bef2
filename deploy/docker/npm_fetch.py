"""Fetch one package tarball from the npm registry, check it, unpack it (bases.Dockerfile).

    python npm_fetch.py NAME VERSION sha512-<base64> DEST

The node stand-in base needs Node 20 (Debian bookworm has 18) and npm before any npm exists in
the image, so this does what `npm pack` would with the standard library alone: download
``<registry>/<name>/-/<name>-<version>.tgz``, refuse it unless its SHA-512 is the pinned
integrity (the value of the package's ``dist.integrity``), then unpack its ``package/`` folder
into DEST. HTTPS trusts ``SSL_CERT_FILE`` when set (the BuildKit secret ``ca``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

REGISTRY = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")


def fetch(name: str, version: str, integrity: str, dest: Path) -> None:
    algorithm, _, expected = integrity.partition("-")
    if algorithm != "sha512" or not expected:
        raise SystemExit(f"npm_fetch: {integrity!r} is not a sha512-<base64> integrity")
    url = f"{REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=120) as answer:  # noqa: S310 - https, pinned hash
        data = answer.read()
    actual = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual != expected:
        raise SystemExit(f"npm_fetch: {url} has sha512-{actual}, not the pinned {integrity}")
    staging = dest.with_name(dest.name + ".unpack")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        # The "data" filter (no absolute paths, no links out, no devices) where this Python
        # has it: bookworm's 3.11 got it in a security update.
        if hasattr(tarfile, "data_filter"):
            archive.extractall(staging, filter="data")
        else:
            archive.extractall(staging)  # noqa: S202 - the bytes match the pinned hash
    shutil.rmtree(dest, ignore_errors=True)
    (staging / "package").rename(dest)
    shutil.rmtree(staging)
    print(f"npm_fetch: {name}@{version} ({len(data) // 1024} KiB, integrity checked) in {dest}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    fetch(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
