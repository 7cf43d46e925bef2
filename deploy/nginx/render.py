"""Render ``dtq.conf.template`` into a whole nginx.conf for the dashboard.

    python deploy/nginx/render.py --listen 127.0.0.1:3000 --api 127.0.0.1:8000 \\
        --gateway 127.0.0.1:8002 --root services/dashboard/dist --runtime .data/nginx > nginx.conf
    nginx -c "$PWD/nginx.conf" -p .data/nginx -g 'daemon off;'

The placeholders (``@@LISTEN@@`` ...) are replaced as plain strings, so nginx's own
``$variables`` are left alone. :func:`nginx_argv` is the command line that runs the result in
the foreground as an ordinary process.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

TEMPLATE = Path(__file__).with_name("dtq.conf.template")
SECURITY_HEADERS = Path(__file__).with_name("security-headers.conf")
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "services" / "dashboard" / "dist"

_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}$")
_LISTEN = re.compile(r"^([A-Za-z0-9_.\-\[\]:]+:)?[0-9]{1,5}$")
_UNSAFE_PATH = re.compile(r"[\s;{}'\"$]")


def _path(value: Path, what: str) -> str:
    text = str(value.resolve())
    if _UNSAFE_PATH.search(text):
        raise ValueError(f"{what} {text!r} holds a character nginx would misread (space, ;, {{}})")
    return text


def _directives(snippet: Path) -> str:
    """The directives of ``snippet`` (comments dropped) on one line, to stand for a
    placeholder wherever it is indented."""
    lines = (line.strip() for line in snippet.read_text().splitlines())
    return " ".join(line for line in lines if line and not line.startswith("#"))


def render(listen: str, api: str, gateway: str, root: Path, runtime: Path) -> str:
    """The nginx.conf text.

    Args:
        listen: what nginx listens on: ``127.0.0.1:3000``, ``8080`` or ``[::]:8080``.
        api: ``host:port`` of the ingest API.
        gateway: ``host:port`` of the event gateway.
        root: the built SPA (``services/dashboard/dist``).
        runtime: a writable directory for the pid file and the temp paths.

    Raises:
        ValueError: a value that is not an address or a path nginx can take as it is.
    """
    if not _LISTEN.match(listen):
        raise ValueError(f"listen {listen!r} must be PORT or HOST:PORT")
    for what, value in (("api", api), ("gateway", gateway)):
        if not _HOST_PORT.match(value):
            raise ValueError(f"{what} {value!r} must be HOST:PORT")
    replacements = {
        "@@LISTEN@@": listen,
        "@@API@@": api,
        "@@GATEWAY@@": gateway,
        "@@ROOT@@": _path(root, "root"),
        "@@RUNTIME@@": _path(runtime, "runtime"),
        "@@SECURITY_HEADERS@@": _directives(SECURITY_HEADERS),
    }
    text = TEMPLATE.read_text()
    for placeholder, value in replacements.items():
        text = text.replace(placeholder, value)
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise ValueError(f"placeholders left unreplaced: {sorted(set(left))}")
    return text


def nginx_argv(conf: Path, runtime: Path, nginx: str = "nginx") -> list[str]:
    """The command that runs ``conf`` in the foreground with ``runtime`` as its prefix.

    As root, nginx would hand its worker processes to ``nobody``, who may not enter a private
    runtime or build directory; the workers then stay with the user that started nginx.
    """
    directives = "daemon off;"
    if os.geteuid() == 0:
        directives += " user root;"
    return [nginx, "-c", str(conf.resolve()), "-p", str(runtime.resolve()), "-g", directives]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the dashboard's nginx.conf.")
    parser.add_argument("--listen", default="127.0.0.1:3000")
    parser.add_argument("--api", default="127.0.0.1:8000")
    parser.add_argument("--gateway", default="127.0.0.1:8002")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--runtime", type=Path, default=Path("/tmp/dtq-nginx"))  # noqa: S108
    args = parser.parse_args(argv)
    try:
        text = render(args.listen, args.api, args.gateway, args.root, args.runtime)
    except ValueError as exc:
        sys.stderr.write(f"render: {exc}\n")
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
