"""Authentication and scopes over every operation of the served OpenAPI document
(docs/testing.md, reliability catalogue C9, C10a, C11), open mode, and the route table against
the document."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from litestar.routes import HTTPRoute
from structlog.testing import capture_logs

from dtq_core.client import Client

OPEN_PATHS = {"/health", "/ready", "/metrics"}
WHOAMI = "/api/v1/auth/whoami"
TASK_ID = "q:" + "0" * 32
PATH_VALUES = {
    "task_id": TASK_ID,
    "queue": "q",
    "name": "s",
    "group": "g",
    "workflow_id": "0" * 32,
    "batch_id": "0" * 32,
}
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/api/v1/tasks"): {"task": "t", "queue": "q"},
    ("post", "/api/v1/tasks/batch"): {"tasks": [{"task": "t", "queue": "q"}]},
    ("post", "/api/v1/workflows"): {"workflow": {"task": "t", "queue": "q"}},
    ("post", "/api/v1/batches"): {},
    ("post", "/api/v1/batches/{batch_id}/tasks"): {"tasks": [{"task": "t", "queue": "q"}]},
    ("post", "/api/v1/queues/{queue}/dlq/requeue"): {"all": True},
    ("post", "/api/v1/queues"): {"name": "q"},
    ("put", "/api/v1/schedules/{name}"): {"task": "t", "every_s": 60},
    ("put", "/api/v1/queues/{queue}"): {"partitions": 1},
    ("put", "/api/v1/queues/{queue}/groups/{group}"): {"paused": False},
}
SUBMIT_PATHS = {
    "/api/v1/tasks",
    "/api/v1/tasks/batch",
    "/api/v1/workflows",
    "/api/v1/batches",
    "/api/v1/batches/{batch_id}/tasks",
    "/api/v1/batches/{batch_id}/seal",
}
CALLERS = ["none", "wrong", "non_ascii", "read", "submit", "admin"]
OPERATIONS = 45
"""The document's operations: a route added without a look at its scope fails here."""


def needed_scope(method: str, path: str) -> str:
    if method == "get":
        return "read"
    if method == "post" and path in SUBMIT_PATHS:
        return "submit"
    return "admin"


def expected(caller: str, scope: str) -> set[int] | None:
    """The statuses allowed for ``caller`` on a route needing ``scope`` (None: not 401/403)."""
    if caller in {"none", "wrong", "non_ascii"}:
        return {401}
    if caller in ("admin", scope):
        return None
    return {403}


def operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "put", "delete", "patch"}
    )


def headers_for(caller: str, keys: Any) -> dict[str, Any]:
    match caller:
        case "none":
            return {}
        case "wrong":
            return {"Authorization": "Bearer dtq_not-a-key"}
        case "non_ascii":
            return {"X-API-Key": b"cl\xe9"}  # a raw non-ASCII byte on the wire
        case scope:
            return keys.header(scope)  # type: ignore[no-any-return]


async def call(
    http: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]
) -> httpx.Response:
    url = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], path)
    body = BODIES.get((method, path))
    return await http.request(method.upper(), url, json=body, headers=headers)


async def test_every_operation_enforces_its_scope(shared_api: Any, keys: Any, sdk: Client) -> None:
    document = (await shared_api.http.get("/schema/openapi.json")).json()
    ops = operations(document)
    assert len(ops) == OPERATIONS
    raw = httpx.AsyncClient(base_url=shared_api.url, timeout=30)  # no default key
    checked = 0
    try:
        for method, path in ops:
            op = document["paths"][path][method]
            if path in OPEN_PATHS:
                assert "security" not in op
                r = await call(raw, method, path, {})
                assert r.status_code in {200, 503}, (method, path, r.status_code)
                continue
            if path == WHOAMI:
                # The key is optional here: no key answers who you are not; a wrong one is 401.
                assert op["security"] == [{"bearer": []}, {"apiKey": []}, {}]
                continue
            assert op["security"] == [{"bearer": []}, {"apiKey": []}], (method, path)
            assert {"401", "403"} <= set(op["responses"]), (method, path)
            scope = needed_scope(method, path)
            for caller in CALLERS:
                r = await call(raw, method, path, headers_for(caller, keys))
                allowed = expected(caller, scope)
                where = (method, path, caller, r.status_code, r.text[:200])
                if allowed is None:
                    assert r.status_code not in {401, 403}, where
                else:
                    assert r.status_code in allowed, where
                    assert r.json()["code"] == ("unauthorized" if 401 in allowed else "forbidden")
                    if r.status_code == 401:
                        assert r.headers["www-authenticate"].startswith("Bearer")
                checked += 1
            # A key in the query string is never read.
            url_key = await call(raw, method, path + f"?api_key={keys.admin}", {})
            assert url_key.status_code == 401, (method, path)
    finally:
        await raw.aclose()
    assert checked == (OPERATIONS - 3 - 1) * len(CALLERS)
    metrics = (await shared_api.http.get("/metrics")).text
    for reason in ("missing", "invalid", "scope"):
        assert re.search(rf'dtq_auth_failures_total{{reason="{reason}"}} [1-9]', metrics), reason
    assert 'dtq_auth_mode{mode="keys"} 1.0' in metrics
    assert 'dtq_auth_mode{mode="open"} 0.0' in metrics


async def test_the_route_table_is_the_openapi_document(shared_api: Any) -> None:
    document = (await shared_api.http.get("/schema/openapi.json")).json()
    app = shared_api.server.app
    served = set()
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or route.path.startswith("/schema"):
            continue
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        served |= {(m.lower(), path) for m in route.methods if m not in {"OPTIONS", "HEAD"}}
    assert served == set(operations(document))


@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
async def test_both_headers_carry_the_key_and_the_actor_is_its_name(
    shared_api: Any, keys: Any, sdk: Client, header: str
) -> None:
    sent = (
        {"authorization": f"Bearer {keys.admin}"}
        if header == "authorization"
        else keys.header("admin")
    )
    async with httpx.AsyncClient(base_url=shared_api.url, headers=sent) as http:
        r = await http.put("/api/v1/schedules/nightly", json={"task": "t", "every_s": 60})
    assert r.status_code in {200, 201}
    (entry,) = [f for _, f in await sdk.redis.xrange(sdk.keys.audit)]
    assert entry["actor"] == "operator"


async def test_keys_are_never_logged(shared_api: Any, keys: Any) -> None:
    async with httpx.AsyncClient(base_url=shared_api.url) as http:
        with capture_logs() as logs:
            for scope in ("read", "submit", "admin"):
                await http.post("/api/v1/tasks", json={"task": "t"}, headers=keys.header(scope))
            await http.get("/api/v1/queues", headers={"Authorization": "Bearer dtq_wrong-secret"})
    assert {e.get("reason") for e in logs if e["event"] == "auth_refused"} == {"scope", "invalid"}
    text = repr(logs)
    for secret in (keys.read, keys.submit, keys.admin, "dtq_wrong-secret"):
        assert secret not in text
    assert "reader" in text  # the key's name is what logs and audit entries show


async def test_open_mode_lets_everyone_in_and_says_so(api_factory: Any) -> None:
    api = api_factory(open=True)
    r = await api.http.post("/api/v1/tasks", json={"task": "t"})
    assert r.status_code == 201
    assert (await api.http.delete("/api/v1/queues/default/tasks")).status_code == 200
    metrics = (await api.http.get("/metrics")).text
    assert 'dtq_auth_mode{mode="open"} 1.0' in metrics
    assert 'dtq_auth_mode{mode="keys"} 0.0' in metrics


WHOAMI_ANSWERS: dict[str, tuple[int, str | None, list[str] | None]] = {
    "none": (200, None, []),
    "read": (200, "reader", ["read"]),
    "submit": (200, "producer", ["submit"]),
    "admin": (200, "operator", ["admin", "read", "submit"]),
    "wrong": (401, None, None),
}


@pytest.mark.parametrize("caller", list(WHOAMI_ANSWERS))
async def test_whoami_tells_the_mode_and_the_keys_scopes(
    shared_api: Any, keys: Any, caller: str
) -> None:
    status, name, scopes = WHOAMI_ANSWERS[caller]
    async with httpx.AsyncClient(base_url=shared_api.url) as raw:
        r = await raw.get(WHOAMI, headers=headers_for(caller, keys))
    assert r.status_code == status, r.text
    if status == 200:
        assert r.json() == {"auth": "keys", "name": name, "scopes": scopes}
    else:
        assert r.json()["code"] == "unauthorized"


async def test_whoami_in_open_mode_has_every_scope(api_factory: Any) -> None:
    api = api_factory(open=True)
    r = await api.http.get(WHOAMI)
    assert r.json() == {"auth": "open", "name": "anonymous", "scopes": ["admin", "read", "submit"]}
