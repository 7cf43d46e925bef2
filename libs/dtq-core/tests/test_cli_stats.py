"""``dtq stats`` run as a subprocess against a real redis-server: the per-minute history of one
queue or every queue as totals and sparklines, JSON, and bad input refused; the sparkline
itself (pure)."""

from __future__ import annotations

import msgspec

from dtq_core.client import Client
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.stats import SPARK, sparkline
from dtq_devtools.testing.lifecycle import claim, finish, make_dead

from .test_cli import dtq


def test_a_sparkline_scales_to_the_largest_and_leaves_empty_minutes_blank() -> None:
    assert sparkline([0, 1, 2, 4]) == "▁▃▅█"
    assert sparkline([None, 3, None, 0], max) == " █ ▁"
    assert sparkline([0, 0]) == SPARK[0] * 2
    # 120 minutes in 60 columns: two minutes a column, added up.
    line = sparkline([1] * 60 + [3] * 60)
    assert len(line) == 60
    assert set(line[:30]) == {"▃"}
    assert set(line[30:]) == {"█"}


async def test_stats_prints_each_figure_over_the_range(client: Client, redis_url: str) -> None:
    await client.enqueue_many([{"task": "t.a", "queue": "emails"}] * 3)
    got = await claim(client, "emails", 3)
    assert await finish(client, "emails", got, "ok") == ["succeeded"] * 3
    await make_dead(client, "reports", 2)
    assert await Admin(client).note_depths() == 2

    shown = await dtq(redis_url, "stats")
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0].startswith("dtq stats: 2 queues, the last 1h per minute, up to ")
    rows = {line.split("  ")[0].strip(): line for line in lines[2:]}
    assert "5" in rows["submitted"].split()
    assert "3" in rows["succeeded"].split()
    assert "2" in rows["failed"].split()
    assert "now 0" in rows["waiting"]

    one = await dtq(redis_url, "stats", "--queue", "reports", "--range", "6h", "--json")
    assert one.code == 0, one.err
    h = msgspec.json.decode(one.out)
    assert (h["queue"], h["range"], len(h["failed"])) == ("reports", "6h", 360)
    assert (sum(h["failed"]), sum(h["succeeded"])) == (2, 0)


async def test_stats_refuses_a_bad_range_and_an_unknown_queue(redis_url: str) -> None:
    bad = await dtq(redis_url, "stats", "--range", "2h")
    assert bad.code == 2
    assert "invalid choice: '2h'" in bad.err
    unknown = await dtq(redis_url, "stats", "--queue", "nobody")
    assert unknown.code == 1
    assert "queue 'nobody' is not known" in unknown.err
