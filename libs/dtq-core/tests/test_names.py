"""Names and task ids (``dtq_core.names``): the name pattern of queues, tasks and schedules,
which keeps key syntax out of every key, and the ``<queue>:<32 hex>`` task id."""

from __future__ import annotations

import pytest

from dtq_core.names import NAME_PATTERN, make_task_id, split_task_id, valid_name
from dtq_core.protocol.submit import new_rands

HEX32 = "0123456789abcdef" * 2


# -- names ------------------------------------------------------------------------------------

VALID_NAMES = [
    "a",
    "emails",
    "emails.send",
    "A-b_c.9",
    "0",
    "p5",
    "dlq",
    "x" * 64,
]

INVALID_NAMES = [
    "a:b",
    "{x}",
    "a}b",
    "a{b",
    "*",
    "?",
    "[a]",
    "../x",
    "%2e%2e%2f",
    "a b",
    " a",
    "a ",
    "a\n",
    "\n",
    "a\0",
    "é",
    "caf\u00e9",
    "\u0430",  # Cyrillic a, a homoglyph of Latin a
    "em\u0430ils",
    "x" * 65,
    "x" * 1000,
    "",
    ".a",
    "-a",
    "_a",
    "a\t",
    "a/b",
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_name_accepts(name: str) -> None:
    assert valid_name(name)


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_valid_name_rejects(name: str) -> None:
    assert not valid_name(name)


def test_name_pattern_excludes_key_syntax() -> None:
    # The characters that would break a key name or a hash tag can never be in a name.
    for ch in "{}: \n\r\t\0*?[]/\\,|\"'":
        assert not valid_name(f"a{ch}b"), repr(ch)
    assert NAME_PATTERN == r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


# -- task ids ---------------------------------------------------------------------------------


def test_task_id_round_trip() -> None:
    task_id = make_task_id("emails", HEX32)
    assert task_id == f"emails:{HEX32}"
    assert split_task_id(task_id) == ("emails", HEX32)


def test_new_rands_are_task_id_parts() -> None:
    rands = new_rands(50)
    assert len(set(rands)) == 50
    for rand in rands:
        assert split_task_id(make_task_id("q", rand)) == ("q", rand)


@pytest.mark.parametrize(
    "junk",
    [
        "dtq:{q}:p5",
        "dtq:{q}:t:" + HEX32,
        "*",
        "",
        ":",
        "q",
        "q:",
        ":" + HEX32,
        "q:" + HEX32[:-1],
        "q:" + HEX32 + "0",
        "q:" + HEX32.upper(),
        "q:" + "g" * 32,
        "q:" + HEX32 + "\n",
        "{q}:" + HEX32,
        "a b:" + HEX32,
        "q:*",
        "q:" + HEX32[:16] + ":" + HEX32[16:],
    ],
)
def test_split_task_id_rejects_junk(junk: str) -> None:
    assert split_task_id(junk) is None
