"""Zoned schedules through a real socket: GET /schedules/{name}/next (the scheduler's own tick
function) and the 422s of a bad zone, misfire or jitter."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from dtq_core.client import Client
from dtq_core.ops.schedules import ScheduleStore, next_fires

API = "/api/v1"


def problem(response: Any, field: str | None) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == "validation_error"
    if field is not None:
        assert field in response.text
    return body


async def test_next_lists_the_ticks_the_scheduler_fires_in_the_schedules_zone(
    api: Any, sdk: Client
) -> None:
    body = {
        "task": "reports.build",
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
        "misfire": "skip",
        "jitter_s": 600,
        "allow_unknown_task": True,
    }
    put = await api.http.put(f"{API}/schedules/nightly", json=body)
    assert put.status_code == 201, put.text
    assert (put.json()["timezone"], put.json()["misfire"], put.json()["jitter_s"]) == (
        "Europe/Paris",
        "skip",
        600,
    )
    store = ScheduleStore(sdk.redis, sdk.keys)
    spec = await store.get("nightly")
    assert spec is not None
    before = await store.now_ms() / 1000
    got = await api.http.get(f"{API}/schedules/nightly/next", params={"count": 7})
    after = await store.now_ms() / 1000
    assert got.status_code == 200, got.text
    listing = got.json()
    assert (listing["name"], listing["timezone"], listing["paused"]) == (
        "nightly",
        "Europe/Paris",
        False,
    )
    items = listing["items"]
    assert len(items) == 7
    paris = ZoneInfo("Europe/Paris")
    for item in items:
        local = datetime.fromisoformat(item["local"])
        assert local.astimezone(paris).strftime("%H:%M") == "02:30"
        assert datetime.fromisoformat(item["at"].replace("Z", "+00:00")) == local
        assert 0 <= item["delay_s"] < 600
    expected = {tuple(next_fires(spec, t, 7)) for t in (before, after)}
    ticks = tuple(datetime.fromisoformat(i["local"]).timestamp() for i in items)
    assert ticks in expected
    info = (await api.http.get(f"{API}/schedules/nightly")).json()
    assert datetime.fromisoformat(info["next_fire_at"].replace("Z", "+00:00")).timestamp() in {
        t[0] for t in expected
    }

    default = (await api.http.get(f"{API}/schedules/nightly/next")).json()
    assert len(default["items"]) == 5
    await api.http.post(f"{API}/schedules/nightly/pause")
    assert (await api.http.get(f"{API}/schedules/nightly/next")).json()["paused"] is True
    for count in (0, 101, "x"):
        r = await api.http.get(f"{API}/schedules/nightly/next", params={"count": count})
        assert r.status_code in {400, 422}, r.text
    missing = await api.http.get(f"{API}/schedules/nope/next")
    assert (missing.status_code, missing.json()["code"]) == (404, "schedule_not_found")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "@daily", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "@daily", "timezone": "Not a zone"}, "timezone"),
        ({"every_s": 60, "timezone": "Europe/Paris"}, "timezone"),
        ({"every_s": 60, "misfire": "sometimes"}, "misfire"),
        ({"every_s": 60, "misfire": "all", "misfire_cap": 0}, "misfire_cap"),
        ({"every_s": 60, "misfire_cap": 5000}, "misfire_cap"),
        ({"every_s": 60, "jitter_s": -1}, "jitter_s"),
        ({"every_s": 7200, "jitter_s": 4000}, "jitter_s"),
        ({"every_s": 60, "jitter_s": 90}, "jitter_s"),
        ({"cron": "*/5 * * * *", "jitter_s": 300}, "jitter_s"),
    ],
)
async def test_bad_zones_misfires_and_jitters_are_422_naming_the_field(
    shared_api: Any, fields: dict[str, Any], field: str
) -> None:
    body = {"task": "t.run", "allow_unknown_task": True, **fields}
    problem(await shared_api.http.put(f"{API}/schedules/s", json=body), field)
