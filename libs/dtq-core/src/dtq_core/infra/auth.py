"""API keys with scopes, shared by the ingest API and the event gateway.

``DTQ_API_KEYS`` holds entries ``name:scope+scope:sha256hex`` separated by commas: the server
stores only the SHA-256 of each secret. A request presents the secret (``Authorization:
Bearer <secret>`` or ``X-API-Key: <secret>``); its digest is compared with every configured
digest in constant time (``hmac.compare_digest`` on bytes, no early exit across keys), so
neither the content nor the position of a key leaks through timing, and a non-ASCII header is
simply a wrong key.

``dtq keys new NAME SCOPES`` makes a new key: it prints the secret once, for the
client, and the ``DTQ_API_KEYS`` entry for the server.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import StrEnum

from dtq_core.errors import SettingsError
from dtq_core.names import valid_name


class Scope(StrEnum):
    SUBMIT = "submit"
    READ = "read"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A configured key: its name (for logs and the audit stream), scopes and digest."""

    name: str
    scopes: frozenset[Scope]
    digest: bytes

    def allows(self, scope: Scope) -> bool:
        # admin implies the others: an operator's key can do what a client's can.
        return scope in self.scopes or Scope.ADMIN in self.scopes


NAME_RULE = "1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
SCOPES_RULE = "submit, read or admin, joined with +"


def _scopes(text: str) -> frozenset[Scope]:
    """The scopes ``text`` names (``read+submit``); empty when one is unknown or none is."""
    try:
        return frozenset(Scope(s) for s in text.split("+") if s)
    except ValueError:
        return frozenset()


def digest(secret: str | bytes) -> bytes:
    raw = secret.encode("utf-8", "surrogateescape") if isinstance(secret, str) else secret
    return hashlib.sha256(raw).digest()


def parse_api_keys(value: str, variable: str = "DTQ_API_KEYS") -> tuple[ApiKey, ...]:
    """Parse ``DTQ_API_KEYS`` (or the entries of ``DTQ_API_KEYS_FILE``, named by ``variable``).

    An error names the bad entry by its position and never quotes any part of it: a secret
    pasted in place of an entry, or into one of its fields, must not reach a log.

    Raises:
        SettingsError: naming the entry's position and what is wrong with it.
    """
    keys: list[ApiKey] = []
    names: dict[str, int] = {}
    entries = [e.strip() for e in value.split(",") if e.strip()]
    for position, entry in enumerate(entries, start=1):
        where = f"entry {position} of {variable}"
        parts = entry.split(":")
        if len(parts) != 3:
            raise SettingsError(
                f"{where} is invalid: it must be name:scope+scope:sha256hex, three fields "
                f"joined by ':' (it has {len(parts)}); make one with "
                "`dtq keys new NAME SCOPES`",
                variable=variable,
            )
        name, scopes_text, hexdigest = parts
        if not valid_name(name):
            raise SettingsError(
                f"{where} is invalid: its name must be {NAME_RULE}", variable=variable
            )
        if name in names:
            raise SettingsError(
                f"{where} is invalid: its name is the name of entry {names[name]} (names "
                "must be unique)",
                variable=variable,
            )
        scopes = _scopes(scopes_text)
        if not scopes:
            raise SettingsError(
                f"{where} is invalid: its scopes must be {SCOPES_RULE}", variable=variable
            )
        try:
            raw_digest = bytes.fromhex(hexdigest)
        except ValueError:
            raw_digest = b""
        if len(raw_digest) != 32:
            raise SettingsError(
                f"{where} is invalid: it must end with the SHA-256 of its secret, 64 hex "
                "digits (never the secret itself)",
                variable=variable,
            )
        names[name] = position
        keys.append(ApiKey(name, scopes, raw_digest))
    return tuple(keys)


def authenticate(keys: tuple[ApiKey, ...], presented: str | bytes | None) -> ApiKey | None:
    """The key whose secret was presented, or ``None``; constant time over all keys."""
    if presented is None or not keys:
        return None
    d = digest(presented)
    found: ApiKey | None = None
    for key in keys:
        if hmac.compare_digest(d, key.digest):
            found = key
    return found


def credentials(authorization: str | None, x_api_key: str | None) -> str | None:
    """The secret a request presents: ``Authorization: Bearer <secret>`` or ``X-API-Key``."""
    if x_api_key:
        return x_api_key
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return None


def new_key(name: str, scopes: str) -> tuple[str, str]:
    """A new secret and its ``DTQ_API_KEYS`` entry.

    Raises:
        SettingsError: naming the argument (``name`` or ``scopes``) that is invalid; they are
            typed by the operator and hold no secret, so they are quoted.
    """
    if not valid_name(name):
        raise SettingsError(f"NAME {name!r} is invalid: it must be {NAME_RULE}")
    if not _scopes(scopes):
        raise SettingsError(f"SCOPES {scopes!r} is invalid: it must be {SCOPES_RULE}")
    secret = "dtq_" + secrets.token_urlsafe(32)
    entry = f"{name}:{scopes}:{hashlib.sha256(secret.encode()).hexdigest()}"
    parse_api_keys(entry)  # the entry parses as the server will read it
    return secret, entry
