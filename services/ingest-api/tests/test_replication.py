"""503 ``redis_not_replicated``: a submit the replica did not confirm in time
(``DTQ_REDIS_WAIT_REPLICAS``), on a real master with a real replica stopped by SIGSTOP."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from dtq_devtools.testing.topologies import ReplicaSet

TASKS = "/api/v1/tasks"


async def test_an_unconfirmed_submit_is_a_503_and_its_retry_finds_the_task(
    api_factory: Any, replica_set: ReplicaSet
) -> None:
    master = aioredis.Redis(port=replica_set.master.port)
    await master.flushall()
    await master.aclose()
    replica_set.wait_synced()
    api = api_factory(
        open=True,
        redis_url=replica_set.url,
        redis_wait_replicas=1,
        redis_wait_timeout_ms=1500,  # a loaded machine's replica acks well within it
        leader_ttl_s=6.0,  # the wait stays below a third of it
    )
    body = {"task": "t", "queue": "emails", "idempotency_key": "order-9"}
    assert (await api.http.post(TASKS, json={"task": "t", "queue": "emails"})).status_code == 201
    with replica_set.replicas[0].frozen():
        refused = await api.http.post(TASKS, json=body)
    assert refused.status_code == 503, refused.text
    problem = refused.json()
    assert problem["code"] == "redis_not_replicated"
    assert "confirmed by 0 of 1 replicas within 1500 ms" in problem["detail"]
    assert refused.headers["retry-after"] == "2"
    replica_set.wait_synced()
    replayed = await api.http.post(TASKS, json=body)
    assert replayed.status_code == 200, replayed.text  # the idempotent replay: one task
    queue = (await api.http.get("/api/v1/queues/emails")).json()
    assert queue["depth"] == 2


async def test_a_master_short_of_replicas_refuses_with_a_503(
    api_factory: Any, replica_set: ReplicaSet
) -> None:
    """Redis's own guard (``min-replicas-to-write``) answers NOREPLICAS: a 503, not a 500."""
    master = aioredis.Redis(port=replica_set.master.port)
    api = api_factory(open=True, redis_url=replica_set.url)
    assert (await api.http.post(TASKS, json={"task": "t", "queue": "guard"})).status_code == 201
    await master.config_set("min-replicas-to-write", 2)  # one replica is connected
    try:
        refused = await api.http.post(TASKS, json={"task": "t", "queue": "guard"})
    finally:
        await master.config_set("min-replicas-to-write", 0)
        await master.aclose()
    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "redis_unavailable"
    assert "Retry-After" in refused.headers
