"""Every Lua body names its KEYS and its fixed ARGV in locals at the top: a position is read
in a ``local`` declaration only, never in the body (variable-length tails are walked from a
named first index)."""

from __future__ import annotations

import re

import pytest

from dtq_core.protocol.library import SCRIPT_NAMES, lua_sources

_POSITIONAL = re.compile(r"\b(KEYS|ARGV)\[\d+\]")


def _code(line: str) -> str:
    return line.split("--", 1)[0]


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_keys_and_argv_are_named_in_locals(name: str) -> None:
    body = lua_sources()[name].splitlines()[1:]
    stray = [
        line
        for line in body
        if _POSITIONAL.search(_code(line)) and not _code(line).startswith("local ")
    ]
    assert stray == []


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_streams_are_read_through_stream_key(name: str) -> None:
    body = "\n".join(_code(line) for line in lua_sources()[name].splitlines()[1:])
    assert re.findall(r"KEYS\[[a-z]", body) in ([], ["KEYS[p"])  # only in stream_key()
