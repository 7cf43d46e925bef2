"""``DTQ_API_KEYS`` parsing: a bad entry is named by its position, and no part of any entry
(a secret pasted in place of one, or into one of its fields) reaches the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtq_core.errors import SettingsError
from dtq_core.infra.auth import Scope, new_key, parse_api_keys
from dtq_core.infra.settings import load_settings

SECRET = "dtq_Zq8vN3kRp1wXyT7mLb2cHs9dJf4gEa6u"  # noqa: S105 - a made-up secret to look for
DIGEST = "ab" * 32
_, GOOD = new_key("ci", "submit")

BAD = {
    "the secret alone": (SECRET, "three fields"),
    "secret as the scopes": (f"ops:{SECRET}:x", "scopes must be submit, read or admin"),
    "secret as the name": (f"{SECRET}!:read:{DIGEST}", "its name must be"),
    "secret as the digest": (f"ops:read:{SECRET}", "SHA-256 of its secret"),
    "secret as a fourth field": (f"ops:read:{DIGEST}:{SECRET}", "three fields"),
    "no scope": (f"ops::{DIGEST}", "scopes must be"),
}


def _parts(entry: str) -> list[str]:
    """Every piece of ``entry`` a message must not quote (fields of 4+ characters, and the
    first characters of the secret, which a truncated echo would show)."""
    return [p for p in entry.split(":") if len(p) >= 4] + [SECRET[:8]]


@pytest.mark.parametrize(("entry", "says"), BAD.values(), ids=BAD.keys())
def test_a_bad_entry_is_named_by_position_and_never_quoted(entry: str, says: str) -> None:
    with pytest.raises(SettingsError) as exc:
        parse_api_keys(f"{GOOD}, {entry}")
    message = str(exc.value)
    assert message.startswith("entry 2 of DTQ_API_KEYS is invalid: "), message
    assert says in message, message
    for part in _parts(entry):
        assert part not in message, message
    assert exc.value.detail["variable"] == "DTQ_API_KEYS"


def test_a_name_used_twice_names_both_positions_not_the_name() -> None:
    _, other = new_key("ci", "read")
    with pytest.raises(SettingsError) as exc:
        parse_api_keys(f"{GOOD},{other}")
    message = str(exc.value)
    assert message == (
        "entry 2 of DTQ_API_KEYS is invalid: its name is the name of entry 1 (names must be unique)"
    )


def test_blank_entries_do_not_count() -> None:
    with pytest.raises(SettingsError, match=r"^entry 2 of DTQ_API_KEYS is invalid"):
        parse_api_keys(f" ,{GOOD},, {SECRET}")


def test_load_settings_refuses_the_entry_the_same_way() -> None:
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_API_KEYS": f"ci:{SECRET}:x"})
    assert str(exc.value).startswith("entry 1 of DTQ_API_KEYS is invalid: its scopes")
    assert SECRET[:8] not in str(exc.value)


def test_an_entry_of_the_keys_file_is_named_against_the_file(tmp_path: Path) -> None:
    path = tmp_path / "api_keys"
    path.write_text(f"# operators\n{GOOD}\n\nops:{SECRET}:x  # pasted by mistake\n")
    with pytest.raises(SettingsError) as exc:
        load_settings({"DTQ_API_KEYS_FILE": str(path)})
    message = str(exc.value)
    assert message.startswith("entry 2 of DTQ_API_KEYS_FILE is invalid: its scopes"), message
    assert SECRET[:8] not in message
    assert exc.value.detail["variable"] == "DTQ_API_KEYS_FILE"


def test_good_entries_parse() -> None:
    _, admin = new_key("ops", "admin+read")
    keys = parse_api_keys(f"{GOOD}, {admin}")
    assert [k.name for k in keys] == ["ci", "ops"]
    assert keys[1].scopes == {Scope.ADMIN, Scope.READ}


def test_making_a_key_names_the_bad_argument() -> None:
    with pytest.raises(SettingsError, match=r"^SCOPES 'bad' is invalid: it must be submit"):
        new_key("ci", "bad")
    with pytest.raises(SettingsError, match=r"^NAME 'c i' is invalid: it must be 1-64 letters"):
        new_key("c i", "read")
