"""The error mapping itself (pure): every dtq-core code has a status, docs/api.md's table is
the same table, and decode errors point at the right place."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from dtq_core import errors
from dtq_ingest_api.body import pointer, translate
from dtq_ingest_api.problems import STATUS, TITLES, ApiError
from dtq_ingest_api.schemas import SubmitRequest

DOCS = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def test_every_dtq_core_error_code_has_a_status_and_a_title() -> None:
    codes = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.DtqError) and cls is not errors.DtqError
    }
    assert "schedule_not_found" in codes
    assert codes <= set(STATUS)
    assert set(STATUS) == set(TITLES)


def test_the_docs_error_table_is_the_mapping() -> None:
    documented: dict[str, int] = {}
    for line in DOCS.read_text().splitlines():
        match = re.fullmatch(r"\| (`[a-z_]+`(?:, `[a-z_]+`)*) \| (\d{3}) \| .+ \|", line)
        if match:
            for code in re.findall(r"`([a-z_]+)`", match.group(1)):
                documented[code] = int(match.group(2))
    assert documented == dict(STATUS)


def test_an_unknown_code_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown error code"):
        ApiError("teapot", "short and stout")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("", ""),
        (".priority", "/priority"),
        (".tasks[12].priority", "/tasks/12/priority"),
        (".kwargs['a/b~c']", "/kwargs/a~1b~0c"),
    ],
)
def test_msgspec_paths_become_json_pointers(path: str, expected: str) -> None:
    assert pointer(path) == expected


def test_decode_errors_name_the_field_with_a_pointer() -> None:
    decoder = msgspec.json.Decoder(SubmitRequest)
    with pytest.raises(msgspec.ValidationError) as info:
        decoder.decode(b'{"task": "t", "queue": "a:b"}')
    error = translate(info.value, prefix="/tasks/3")
    assert error.code == "invalid_name"
    assert error.errors is not None
    assert (error.errors[0].pointer, error.errors[0].field) == ("/tasks/3/queue", "queue")
