"""Batch routes through a real socket: create one, add tasks over time, read its live counts,
seal it, and the callbacks the scheduler leader submits (the same drain and kick); bad
batches and tasks are refused whole."""

from __future__ import annotations

import json
from typing import Any

from dtq_core.client import Client

API = "/api/v1"


async def test_create_add_seal_and_call_back(api: Any, worker: Any, sdk: Client) -> None:
    body = {
        "name": "exports",
        "on_success": {"task": "mail", "kwargs": {"to": "ops@example.com"}},
        "on_complete": {"task": "report", "pass_result": False},
    }
    r = await api.http.post(f"{API}/batches", json=body)
    assert r.status_code == 201, r.text
    batch = r.json()
    assert r.headers["location"] == f"/api/v1/batches/{batch['id']}"
    assert batch["status"] == "running"
    assert (batch["sealed"], batch["total"], batch["pending"]) == (False, 0, 0)
    assert (batch["on_success"], batch["on_complete"]) == ("pending", "pending")

    tasks_url = f"{API}/batches/{batch['id']}/tasks"
    r = await api.http.post(tasks_url, json={"tasks": [{"task": "export", "args": [1]}]})
    assert r.status_code == 201, r.text
    (first_id,) = r.json()["task_ids"]
    r = await api.http.post(tasks_url, json={"tasks": [{"task": "export", "args": [2]}]})
    (second_id,) = r.json()["task_ids"]
    claimed = await worker.claim("default")
    assert sorted(json.loads(c.args)[0] for c in claimed) == [1, 2]
    await worker.finish("default", claimed, "ok", "1")
    await sdk.workflows.drain("default")
    counts = (await api.http.get(f"{API}/batches/{batch['id']}")).json()
    assert (counts["total"], counts["succeeded"], counts["pending"]) == (2, 2, 0)
    assert counts["status"] == "running"  # open: nothing calls back yet
    assert await worker.claim("default") == []

    r = await api.http.post(f"{API}/batches/{batch['id']}/seal")
    assert r.status_code == 200, r.text
    assert r.json()["sealed"] is True
    await sdk.workflows.kick([batch["id"]])
    callbacks = {c.task: c for c in await worker.claim("default")}
    summary = {"batch_id": batch["id"], "total": 2, "succeeded": 2, "failed": 0}
    assert json.loads(callbacks["mail"].args) == [summary]
    assert json.loads(callbacks["mail"].kwargs) == {"to": "ops@example.com"}
    assert json.loads(callbacks["report"].args or "[]") == []
    await worker.finish("default", list(callbacks.values()), "ok", '"sent"')
    await sdk.workflows.drain("default")
    done = (await api.http.get(f"{API}/batches/{batch['id']}")).json()
    assert done["status"] == "succeeded"
    assert (done["on_success"], done["on_complete"]) == ("succeeded", "succeeded")
    wf = (await api.http.get(f"{API}/workflows/{batch['id']}")).json()
    assert wf["kind"] == "batch"
    assert [s["task_id"] for s in wf["steps"][2:]] == [first_id, second_id]

    r = await api.http.post(tasks_url, json={"tasks": [{"task": "export"}]})
    assert r.status_code == 409
    assert r.json()["code"] == "invalid_state"


async def test_cancel_a_batch(api: Any, worker: Any, sdk: Client) -> None:
    batch_id = (await api.http.post(f"{API}/batches", json={"on_complete": {"task": "c"}})).json()[
        "id"
    ]
    await api.http.post(f"{API}/batches/{batch_id}/tasks", json={"tasks": [{"task": "a"}]})
    r = await api.http.post(f"{API}/batches/{batch_id}/cancel")
    assert r.status_code == 200, r.text
    assert r.json() == {"id": batch_id, "status": "cancelled"}
    assert (await api.http.get(f"{API}/batches/{batch_id}")).json()["on_complete"] == "cancelled"
    assert (await api.http.post(f"{API}/batches/{batch_id}/cancel")).status_code == 409
    actions = [f["action"] for _, f in await sdk.redis.xrange(sdk.keys.audit)]
    assert "batch.cancel" in actions


async def test_bad_batches_and_tasks_are_refused_whole(api: Any, sdk: Client) -> None:
    for body, fragment in [
        ({"on_success": {"chain": [{"task": "a"}, {"task": "b"}]}}, "single steps"),
        ({"on_complete": {"taks": "b"}}, "on_complete"),
        ({"name": ""}, "name"),
        ({"extra": 1}, "extra"),
    ]:
        r = await api.http.post(f"{API}/batches", json=body)
        assert r.status_code == 422, (body, r.text)
        assert fragment in r.text, (fragment, r.text)
    assert await sdk.redis.exists(sdk.keys.workflows) == 0
    batch_id = (await api.http.post(f"{API}/batches", json={})).json()["id"]
    tasks_url = f"{API}/batches/{batch_id}/tasks"
    for body, fragment in [
        ({"tasks": [{"task": "a"}, {"task": "b", "priority": 12}]}, "priority"),
        ({"tasks": [{"task": "a", "on_failure": "ignore"}]}, "on_failure"),
        ({"tasks": []}, "tasks"),
        ({"tasks": [{"group": [{"task": "a"}, {"task": "b"}]}]}, "single steps"),
    ]:
        r = await api.http.post(tasks_url, json=body)
        assert r.status_code == 422, (body, r.text)
        assert fragment in r.text, (fragment, r.text)
    assert (await api.http.get(f"{API}/batches/{batch_id}")).json()["total"] == 0
    for path in (f"{API}/batches/{'0' * 32}", f"{API}/batches/nope"):
        r = await api.http.get(path)
        assert r.status_code == 404
        assert r.json()["code"] == "workflow_not_found"
    r = await api.http.post(f"{API}/batches/{'0' * 32}/tasks", json={"tasks": [{"task": "a"}]})
    assert r.status_code == 404
    assert (await api.http.post(f"{API}/batches/{'0' * 32}/seal")).status_code == 404
