"""The function outcomes and error codes: each enum value is a spelling the Lua files use, and
an error reply becomes its typed error by its code, never by its text."""

from __future__ import annotations

import re
from enum import StrEnum

import pytest
from redis.exceptions import ResponseError

from dtq_core.errors import StaleLeaderError
from dtq_core.protocol import outcomes
from dtq_core.protocol.library import lua_sources

ENUMS: list[type[StrEnum]] = [
    outcomes.SubmitOutcome,
    outcomes.ClaimState,
    outcomes.FinishOutcome,
    outcomes.Fence,
    outcomes.CancelOutcome,
    outcomes.RequeueOutcome,
    outcomes.DropOutcome,
    outcomes.LeaseMode,
    outcomes.ErrorCode,
]


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.__name__)
def test_every_outcome_is_spelled_in_the_lua_files(enum: type[StrEnum]) -> None:
    lua = "\n".join(lua_sources().values())
    # Quoted in a body, or in a header's list of replies.
    literals = set(re.findall(r"['\"]([A-Za-z_]+)\b", lua))
    assert {m.value for m in enum} <= literals


def test_a_stale_leader_reply_raises_by_its_code() -> None:
    with pytest.raises(StaleLeaderError) as exc:
        outcomes.raise_for_code(ResponseError("STALE_LEADER 7"), queue="q", epoch=3)
    assert exc.value.detail == {"queue": "q", "epoch": 3}
    assert isinstance(exc.value.__cause__, ResponseError)


@pytest.mark.parametrize(
    "message", ["ERR something mentions STALE_LEADER", "WRONGTYPE Operation", ""]
)
def test_other_replies_are_left_to_the_caller(message: str) -> None:
    assert outcomes.raise_for_code(ResponseError(message)) is None


def test_the_code_is_the_first_word() -> None:
    assert outcomes.reply_code(ResponseError("STALE_LEADER 7")) == "STALE_LEADER"
    assert outcomes.reply_code(ResponseError("")) == ""


def test_every_code_has_its_error_type() -> None:
    assert set(outcomes.ERROR_TYPES) == set(outcomes.ErrorCode)


def test_outcomes_compare_equal_to_their_wire_spelling() -> None:
    assert outcomes.SubmitOutcome.DUPLICATE == "dup"
    assert outcomes.Fence.STALE == "stale"


def test_errors_by_code_adds_the_wrappers_detail_and_passes_other_errors() -> None:
    with pytest.raises(StaleLeaderError) as exc, outcomes.errors_by_code(queue="q", epoch=2):
        raise ResponseError("STALE_LEADER 5")
    assert exc.value.detail == {"queue": "q", "epoch": 2}
    with pytest.raises(ResponseError), outcomes.errors_by_code(queue="q"):
        raise ResponseError("ERR no STALE_LEADER here")
