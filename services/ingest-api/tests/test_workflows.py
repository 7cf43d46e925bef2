"""Workflow routes through a real socket: submit the JSON form, read every step, advance it as
the scheduler leader would (the same drain), cancel; bad definitions are refused whole."""

from __future__ import annotations

import json
from typing import Any

from dtq_core.client import Client

API = "/api/v1"


async def test_submit_run_and_read_a_chain(api: Any, worker: Any, sdk: Client) -> None:
    body = {
        "name": "etl",
        "workflow": {"chain": [{"task": "extract", "args": [1]}, {"task": "load", "args": ["x"]}]},
    }
    r = await api.http.post(f"{API}/workflows", json=body)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["status"] == "running"
    assert created["steps"] == 2
    assert r.headers["location"] == f"/api/v1/workflows/{created['id']}"
    wf = (await api.http.get(r.headers["location"])).json()
    assert wf["name"] == "etl"
    assert [s["status"] for s in wf["steps"]] == ["queued", "pending"]
    assert wf["steps"][1]["depends_on"] == [0]

    (first,) = await worker.claim("default")
    assert json.loads(first.args) == [1]
    assert await worker.finish("default", [first], "ok", '{"rows": 3}') == ["succeeded"]
    assert await sdk.workflows.drain("default") == 1
    (second,) = await worker.claim("default")
    assert json.loads(second.args) == [{"rows": 3}, "x"]
    await worker.finish("default", [second], "ok", "7")
    await sdk.workflows.drain("default")

    wf = (await api.http.get(f"{API}/workflows/{created['id']}")).json()
    assert wf["status"] == "succeeded"
    assert wf["result"] == 7
    assert [s["status"] for s in wf["steps"]] == ["succeeded", "succeeded"]
    assert [s["result"] for s in wf["steps"]] == [{"rows": 3}, 7]
    listed = (await api.http.get(f"{API}/workflows", params={"status": "succeeded"})).json()
    assert [w["id"] for w in listed["workflows"]] == [created["id"]]
    assert (await api.http.get(f"{API}/workflows", params={"status": "running"})).json()[
        "workflows"
    ] == []
    task = (await api.http.get(f"{API}/tasks/{wf['steps'][1]['task_id']}")).json()
    assert (task["workflow_id"], task["workflow_step"]) == (created["id"], 1)


async def test_a_drain_run_twice_submits_nothing_twice(api: Any, worker: Any, sdk: Client) -> None:
    body = {
        "workflow": {"chord": {"header": [{"task": "a"}, {"task": "b"}], "callback": {"task": "c"}}}
    }
    r = await api.http.post(f"{API}/workflows", json=body)
    claimed = await worker.claim("default")
    assert len(claimed) == 2
    await worker.finish("default", claimed, "ok", "1")
    outbox = sdk.queue_keys("default").workflow_outbox
    entries = await sdk.redis.zrange(outbox, 0, -1)
    assert len(entries) == 2
    await sdk.workflows.drain("default")
    # As if the drain had stopped before it removed its entries: it runs again.
    await sdk.redis.zadd(outbox, dict.fromkeys(entries, 1))
    await sdk.workflows.drain("default")
    await sdk.workflows.sweep()
    (callback,) = await worker.claim("default")
    assert json.loads(callback.args) == [[1, 1]]
    assert await worker.claim("default") == []
    wf = (await api.http.get(f"{API}/workflows/{r.json()['id']}")).json()
    assert [s["status"] for s in wf["steps"]] == ["succeeded", "succeeded", "running"]


async def test_cancel_then_cancel_again(api: Any, worker: Any, sdk: Client) -> None:
    body = {"workflow": {"chain": [{"task": "a"}, {"task": "b"}]}}
    wf_id = (await api.http.post(f"{API}/workflows", json=body)).json()["id"]
    r = await api.http.post(f"{API}/workflows/{wf_id}/cancel")
    assert r.status_code == 200, r.text
    assert r.json() == {"id": wf_id, "status": "cancelled"}
    wf = (await api.http.get(f"{API}/workflows/{wf_id}")).json()
    assert [s["status"] for s in wf["steps"]] == ["cancelled", "cancelled"]
    assert await worker.claim("default") == []
    r = await api.http.post(f"{API}/workflows/{wf_id}/cancel")
    assert r.status_code == 409
    assert r.json()["code"] == "invalid_state"
    actions = [f["action"] for _, f in await sdk.redis.xrange(sdk.keys.audit)]
    assert "workflow.cancel" in actions


async def test_unknown_workflows_are_404(api: Any) -> None:
    for path in (f"{API}/workflows/{'0' * 32}", f"{API}/workflows/nope"):
        r = await api.http.get(path)
        assert r.status_code == 404
        assert r.json()["code"] == "workflow_not_found"
    r = await api.http.post(f"{API}/workflows/{'0' * 32}/cancel")
    assert r.status_code == 404


async def test_bad_definitions_are_refused_whole(api: Any, sdk: Client) -> None:
    cases = [
        ({"workflow": {"chain": [{"task": "a"}, {"task": "b", "priority": 12}]}}, "priority"),
        ({"workflow": {"chain": [{"task": "a"}, {"taks": "b"}]}}, "workflow.chain[1]"),
        ({"workflow": {"group": []}}, "at least one step"),
        ({"workflow": {"chain": [{"task": "a", "dedup": "throttle"}]}}, "cannot have dedup"),
        ({"workflow": {"task": "a"}, "on_failure": "explode"}, "on_failure"),
        ({"workflow": {"task": "a"}, "extra": 1}, "extra"),
        ({"workflow": {"chord": {"header": [{"task": "a"}]}}}, "header and callback"),
    ]
    for body, fragment in cases:
        r = await api.http.post(f"{API}/workflows", json=body)
        assert r.status_code == 422, (body, r.text)
        assert fragment in r.text, (fragment, r.text)
    assert await sdk.redis.exists(sdk.keys.workflows) == 0
