"""Secrets from files: ``DTQ_REDIS_PASSWORD_FILE``, ``DTQ_REDIS_USERNAME`` and
``DTQ_API_KEYS_FILE`` (Docker secrets), against a real redis-server with an ACL user."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError

from dtq_core.errors import SettingsError
from dtq_core.infra.auth import new_key
from dtq_core.infra.connection import connect
from dtq_core.infra.settings import load_settings

USER = "dtq-secret-test"


def test_api_keys_file_entries_one_per_line_with_comments(tmp_path: Path) -> None:
    _, first = new_key("ci", "submit")
    _, second = new_key("ops", "admin")
    path = tmp_path / "api_keys"
    path.write_text(f"# rotated 2024-05\n{first}\n\n{second}  # the operators\n")
    s = load_settings({"DTQ_API_KEYS_FILE": str(path)})
    assert s.api.keys == f"{first},{second}"


def test_api_keys_file_enables_production(tmp_path: Path) -> None:
    _, entry = new_key("ci", "submit")
    path = tmp_path / "api_keys"
    path.write_text(entry + "\n")
    s = load_settings({"DTQ_ENV": "production", "DTQ_API_KEYS_FILE": str(path)})
    assert s.env == "production"


@pytest.mark.parametrize(
    ("variable", "field"),
    [("DTQ_API_KEYS_FILE", "api_keys_file"), ("DTQ_REDIS_PASSWORD_FILE", "redis_password_file")],
)
def test_missing_secret_file_names_the_variable(tmp_path: Path, variable: str, field: str) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(SettingsError) as err:
        load_settings({variable: str(missing)})
    assert err.value.detail["variable"] == variable
    assert variable in str(err.value)
    assert str(missing) in str(err.value)
    with pytest.raises(SettingsError, match=variable):
        load_settings({}, **{field: str(missing)})


def test_empty_secret_files_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match=r"DTQ_REDIS_PASSWORD_FILE.*empty"):
        load_settings({"DTQ_REDIS_PASSWORD_FILE": str(empty)})
    comments = tmp_path / "comments"
    comments.write_text("# nothing here\n")
    with pytest.raises(SettingsError, match=r"DTQ_API_KEYS_FILE.*no key entry"):
        load_settings({"DTQ_API_KEYS_FILE": str(comments)})


def test_api_keys_in_two_places_are_refused(tmp_path: Path) -> None:
    _, entry = new_key("ci", "submit")
    path = tmp_path / "api_keys"
    path.write_text(entry)
    with pytest.raises(SettingsError) as err:
        load_settings({"DTQ_API_KEYS": entry, "DTQ_API_KEYS_FILE": str(path)})
    assert err.value.detail["variable"] == "DTQ_API_KEYS_FILE"


def test_a_bad_entry_in_the_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "api_keys"
    path.write_text("ci:submit:not-a-digest-but-a-secret-value\n")
    with pytest.raises(SettingsError) as err:
        load_settings({"DTQ_API_KEYS_FILE": str(path)})
    assert "not-a-digest-but-a-secret-value" not in str(err.value)


def test_password_in_url_and_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("s3cret")
    with pytest.raises(SettingsError) as err:
        load_settings(
            {"DTQ_REDIS_URL": "redis://u:inline@localhost/0", "DTQ_REDIS_PASSWORD_FILE": str(path)}
        )
    assert err.value.detail["variable"] == "DTQ_REDIS_URL"
    assert "inline" not in str(err.value)


def test_a_service_stops_at_start_up_naming_the_variable(tmp_path: Path) -> None:
    missing = tmp_path / "redis_pw"
    proc = subprocess.run(
        [sys.executable, "-m", "dtq_scheduler_leader"],
        env={"DTQ_REDIS_PASSWORD_FILE": str(missing), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "DTQ_REDIS_PASSWORD_FILE" in proc.stdout + proc.stderr
    assert str(missing) in proc.stdout + proc.stderr


@pytest.fixture
async def acl_user(redis: aioredis.Redis) -> AsyncIterator[aioredis.Redis]:
    """An ACL user allowed PING and GET only; removed afterwards."""
    await redis.acl_setuser(
        USER, enabled=True, passwords=["+first"], commands=["+ping", "+get"], keys=["*"]
    )
    yield redis
    await redis.acl_deluser(USER)


@pytest.mark.standalone_only  # an ACL user on one server, allowed PING and GET only
async def test_connect_reads_user_and_password_file(
    acl_user: aioredis.Redis, redis_url: str, tmp_path: Path
) -> None:
    pw = tmp_path / "redis_pw"
    pw.write_text("first\n")
    s = load_settings(
        {
            "DTQ_REDIS_URL": redis_url,
            "DTQ_REDIS_USERNAME": USER,
            "DTQ_REDIS_PASSWORD_FILE": str(pw),
        }
    )
    r = connect(s)
    try:
        assert await r.ping()
        assert await r.get("k") is None
        users = {c.get("user") for c in await acl_user.client_list()}
        assert USER in users
    finally:
        await r.aclose()

    # Rotation: the file changes, then Redis; a new connection reads the new password.
    pw.write_text("second\n")
    await acl_user.acl_setuser(USER, enabled=True, reset_passwords=True, passwords=["+second"])
    r = connect(s)
    try:
        assert await r.ping()
    finally:
        await r.aclose()

    pw.write_text("wrong\n")
    r = connect(s)
    try:
        with pytest.raises(AuthenticationError):
            await r.ping()
    finally:
        await r.aclose()


@pytest.mark.standalone_only  # an ACL user on one server; a redis:// URL
async def test_username_setting_wins_over_the_url_user(
    acl_user: aioredis.Redis, redis_url: str, tmp_path: Path
) -> None:
    pw = tmp_path / "redis_pw"
    pw.write_text("first")
    url = redis_url.replace("redis://", "redis://someone-else@")
    s = load_settings(
        {"DTQ_REDIS_URL": url, "DTQ_REDIS_USERNAME": USER, "DTQ_REDIS_PASSWORD_FILE": str(pw)}
    )
    r = connect(s)
    try:
        assert await r.ping()
        users = {c.get("user") for c in await acl_user.client_list()}
        assert USER in users
    finally:
        await r.aclose()
