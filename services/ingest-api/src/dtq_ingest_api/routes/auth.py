"""``GET /auth/whoami``: the auth mode and the presented key's name and scopes.

A client such as the dashboard asks this before anything else, to know whether it must ask
its user for a key and which actions that key allows. It is the one route under ``/api/v1``
that answers without a key (with no name and no scope); a key that is presented but unknown
is still a 401, counted like any other failure.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from dtq_core.infra.auth import Scope
from dtq_ingest_api.auth import OPEN_ACTOR, Authenticator
from dtq_ingest_api.problems import responses
from dtq_ingest_api.schemas import Identity

_ALL_SCOPES = sorted(s.value for s in Scope)


@get(
    "/auth/whoami",
    operation_id="whoami",
    tags=["auth"],
    summary="The auth mode and the presented key's scopes",
    # The empty requirement makes the key optional here (OpenAPI 3.1 "Security Requirement").
    security=[{}],
    responses=responses(),
)
async def whoami(request: Request[Any, Any, Any]) -> Identity:
    """``auth`` is ``keys`` or ``open``; without a key, ``name`` is null and ``scopes`` empty.
    ``admin`` implies the other scopes, and the list says so."""
    authenticator: Authenticator = request.app.state.auth
    if authenticator.open:
        return Identity(auth="open", name=OPEN_ACTOR, scopes=_ALL_SCOPES)
    key = authenticator.identify(request)
    if key is None:
        return Identity(auth="keys", name=None, scopes=[])
    scopes = _ALL_SCOPES if Scope.ADMIN in key.scopes else sorted(s.value for s in key.scopes)
    return Identity(auth="keys", name=key.name, scopes=scopes)


HANDLERS = [whoami]
