"""The differential test (docs/testing.md, reliability catalogue E3): the SDK and the REST API
are two doors to one submit. The same generated request, sent through each, must be accepted
or refused alike and store the same task record (apart from what names one submission: ids,
timestamps, the idempotency key's hash)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtq_core import SyncClient
from dtq_core.errors import DtqError
from dtq_core.names import split_task_id
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing.topologies import sync_redis

EXAMPLE = itertools.count()

IDENTITY = {"ct", "eid", "qt", "idem", "exp", "due"}
"""Fields that differ between two submissions of one request by nature."""

json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
)
json_value = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), inner, max_size=3
        )
    ),
    max_leaves=6,
)
requests = st.fixed_dictionaries(
    {"task": st.sampled_from(["diff.a", "diff.b", "other.task"])},
    optional={
        "args": st.lists(json_value, max_size=3),
        "kwargs": st.dictionaries(
            st.from_regex(r"[a-z_]{1,8}", fullmatch=True), json_value, max_size=3
        ),
        "priority": st.integers(0, 9),
        "delay_s": st.sampled_from([0, 0.5, 30, 3600]),
        "max_attempts": st.integers(1, 20),
        "timeout_s": st.sampled_from([0.001, 1, 2.5, 3600]),
        "ttl_s": st.sampled_from([1, 60.5, 86400]),
        "metadata": st.dictionaries(
            st.sampled_from(["team", "tag"]), st.text(max_size=8), max_size=2
        ),
        "idempotency_key": st.from_regex(r"[A-Za-z0-9:_-]{1,20}", fullmatch=True),
    },
)


@pytest.fixture(scope="module")
def doors(shared_server: Any, keys: Any) -> Iterator[tuple[httpx.Client, SyncClient, redis.Redis]]:
    url = shared_server.settings.redis.url
    with (
        httpx.Client(base_url=shared_server.url, headers=keys.header("admin"), timeout=10) as http,
        sync_redis(url) as sync,
    ):
        sdk = SyncClient.from_url(url, reject_unknown_queues=False)
        try:
            yield http, sdk, sync
        finally:
            sdk.close()


def stored(sync: redis.Redis, task_id: str) -> dict[str, str]:
    queue, rand = split_task_id(task_id)
    record: dict[str, str] = sync.hgetall(Keys().queue(queue).task(rand))
    # Absolute times differ; their distance from the creation time must not.
    for field in ("exp", "due"):
        if field in record:
            record[f"{field}-ct"] = str(int(record[field]) - int(record["ct"]))
    record["idem?"] = str("idem" in record)
    return {k: v for k, v in record.items() if k not in IDENTITY}


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(request=requests)
def test_sdk_and_rest_store_the_same_task(
    doors: tuple[httpx.Client, SyncClient, redis.Redis], request: dict[str, Any]
) -> None:
    http, sdk, sync = doors
    n = next(EXAMPLE)  # a fresh idempotency key per example: no replays between examples
    outcomes = {}
    for door in ("sdk", "rest"):
        fields = dict(request, queue=f"diff-{door}")
        if "idempotency_key" in fields:
            fields["idempotency_key"] = f"{door}-{n}-{fields['idempotency_key']}"
        if door == "sdk":
            try:
                handle = sdk.enqueue(fields.pop("task"), **fields)
                outcomes[door] = ("accepted", stored(sync, handle.id))
            except DtqError as exc:
                outcomes[door] = ("refused", exc.code)
        else:
            r = http.post("/api/v1/tasks", json=fields)
            if r.status_code == 201:
                outcomes[door] = ("accepted", stored(sync, r.json()["id"]))
            else:
                body = r.json()
                assert "code" in body, (r.status_code, body)
                outcomes[door] = ("refused", body["code"])
    assert outcomes["sdk"] == outcomes["rest"], request
