"""Render the hash-field tables into docs/architecture.md, between its ``task-fields``
markers: ``python -m dtq_devtools.fieldsdoc docs/architecture.md`` (``--check``: only say
whether the file is up to date)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dtq_core.protocol.fields import fields_markdown

BEGIN = "<!-- task-fields:begin (generated: just docs) -->\n"
END = "<!-- task-fields:end -->\n"


def render(document: str) -> str:
    """``document`` with the text between the markers replaced by the tables.

    Raises:
        ValueError: the markers are missing.
    """
    head, begin, rest = document.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the document needs the markers {BEGIN.strip()} and {END.strip()}")
    return f"{head}{BEGIN}{fields_markdown()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the file (or, with ``--check``, return 1 when it differs)."""
    parser = argparse.ArgumentParser(prog="python -m dtq_devtools.fieldsdoc")
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true")
    ns = parser.parse_args(argv)
    text = ns.path.read_text()
    rendered = render(text)
    if ns.check:
        return 0 if rendered == text else 1
    ns.path.write_text(rendered)
    return 0


if __name__ == "__main__":
    sys.exit(main())
