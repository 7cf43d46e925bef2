"""From ``DTQ_*`` variables to a validated :class:`Settings`, and the one start-up prologue
every entry point shares.

An unknown variable, a value of the wrong type or out of its range, and a broken rule between
fields all end as one :class:`SettingsError` naming the variable, the value and the rule.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from typing import Any

import msgspec

from dtq_core.errors import SettingsError
from dtq_core.infra.settings.base import BOOL_SPELLINGS, PREFIX, env_name
from dtq_core.infra.settings.model import (
    FIELD_PATHS,
    SECTIONS,
    Settings,
    check_known,
    group_by_section,
)
from dtq_core.infra.settings.rules import read_secret_file

# The last name of the error's path: ``$.worker.worker_concurrency`` -> worker_concurrency.
_FIELD_RE = re.compile(r"\$(?:\.\w+)*\.(\w+)")


def setting_names() -> tuple[str, ...]:
    """Every flat setting name, in the order of the reference (``DTQ_`` + upper case)."""
    return tuple(FIELD_PATHS)


@cache
def schema_properties() -> dict[str, dict[str, Any]]:
    """The JSON schema of every setting (type, bounds, default, description) by flat name."""
    defs: dict[str, dict[str, Any]] = msgspec.json.schema(Settings)["$defs"]
    props: dict[str, dict[str, Any]] = {}
    for name, (section, _) in FIELD_PATHS.items():
        struct = SECTIONS[section].__name__ if section else Settings.__name__
        props[name] = defs[struct]["properties"][name]
    return props


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from ``DTQ_*`` variables in ``env`` plus keyword overrides.

    Args:
        env: the environment (``os.environ``); variables without the prefix are ignored.
        overrides: values by flat name (``worker_concurrency=4``) that win over ``env``
            (tests and entry points use these).

    Raises:
        SettingsError: naming the variable, the value and the rule it breaks.
    """
    raw: dict[str, Any] = {}
    for name, value in (env or {}).items():
        if not name.startswith(PREFIX):
            continue
        field = name[len(PREFIX) :].lower()
        if field not in FIELD_PATHS:
            # A typo in a variable name silently falls back to the default otherwise.
            raise SettingsError(
                f"{name} is not a dtq setting; known settings: "
                + ", ".join(sorted(env_name(f) for f in FIELD_PATHS)),
                variable=name,
            )
        raw[field] = value
    check_known(list(overrides))
    raw.update(overrides)
    _api_keys_from_file(raw)
    grouped = group_by_section(raw, encoded=True)
    nested: dict[str, Any] = {**grouped.pop("", {}), **grouped}
    try:
        return msgspec.convert(nested, Settings, strict=False)
    except msgspec.ValidationError as exc:
        match = _FIELD_RE.search(str(exc))
        field = match.group(1) if match else "?"
        rule = str(exc).split(" - at ", 1)[0]
        prop = schema_properties().get(field, {})
        if prop.get("enum"):
            rule = "must be one of " + ", ".join(str(c) for c in prop["enum"])
        elif prop.get("type") == "boolean":
            rule = f"must be one of {BOOL_SPELLINGS}"
        raise SettingsError(
            f"{env_name(field)}={raw.get(field)!r} is invalid: {rule}", variable=env_name(field)
        ) from None


def _api_keys_from_file(raw: dict[str, Any]) -> None:
    """Replace ``api_keys_file`` by its entries in ``api_keys`` (before validation)."""
    path = raw.get("api_keys_file")
    if not path:
        return
    if raw.get("api_keys"):
        raise SettingsError(
            "DTQ_API_KEYS and DTQ_API_KEYS_FILE are both set: keep the keys in one place (the "
            "file)",
            variable="DTQ_API_KEYS_FILE",
        )
    text = read_secret_file(str(path), "DTQ_API_KEYS_FILE")
    entries = []
    for line in text.splitlines():
        content = line.split("#", 1)[0]
        entries += [e.strip() for e in content.split(",") if e.strip()]
    if not entries:
        raise SettingsError(
            f"DTQ_API_KEYS_FILE={path!r} is invalid: it holds no key entry",
            variable="DTQ_API_KEYS_FILE",
        )
    raw["api_keys"] = ",".join(entries)


@contextmanager
def exit_on_settings_error(program: str) -> Iterator[None]:
    """Turn a :class:`SettingsError` raised inside into one line and exit status 2.

    Every entry point starts under it (loading the settings, binding its ports), so a
    mistake in the configuration reads the same everywhere: ``<program>: <what to change>``,
    with no traceback.
    """
    try:
        yield
    except SettingsError as exc:
        sys.stderr.write(f"{program}: {exc}\n")
        raise SystemExit(2) from None


def settings_or_exit(program: str, **overrides: Any) -> Settings:
    """:func:`load_settings` from ``os.environ``, exiting as :func:`exit_on_settings_error`."""
    with exit_on_settings_error(program):
        return load_settings(os.environ, **overrides)
