"""A client that stops reading: gap, close, resume without loss; others unaffected (F18, D2)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from dtq_devtools.testing import wait_until

if TYPE_CHECKING:
    from conftest import Kit

TRANSPORTS = ["ws", "sse"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_slow_client_gets_a_gap_and_is_closed_then_resumes_without_loss(
    transport: str, kit: Kit
) -> None:
    await kit.redis.sadd(kit.keys.queues, "busy")
    # 800 events per client: a client that reads keeps far below it (the reader yields every
    # 100 events), while the slow one's 10 MB cannot fit in its queue and socket buffers.
    run = await kit.gateway(client_buffer=800)
    slow = await kit.subscribed(transport, run.http, rcvbuf=4096)
    fast = await kit.subscribed(transport, run.http)
    # The fast client reads from before the first event: the gateway, the publisher and both
    # clients share one loop, and a client that starts reading only after the publish is slow.
    reading = asyncio.create_task(kit.collect(fast, 2500, timeout=30))
    # About 10 MB: far more than the kernel buffers between the gateway and a client that
    # does not read, so the slow client's queue overflows.
    produced = await kit.publish("busy", 2500, pad=4000)

    got = await reading
    assert [f["task_id"] for f in got] == produced  # the reader never waited for the slow one
    await wait_until(
        lambda: run.gaps("slow_consumer") == 1,
        message="the slow client cut",
    )

    # Now the slow client reads: what was handed to its socket, then the gap, then the end.
    # An SSE response ends with the data still in flight; when even the gap did not fit,
    # the stream simply ends and the client resumes from the last id it got (an
    # EventSource does that by itself): never a silent hole either way.
    before: list[dict[str, object]] = []
    resume_from = slow.frames[0]["cursor"]
    try:
        while True:
            frame = await slow.next(timeout=10)
            if frame["type"] == "gap":
                assert frame["reason"] == "slow_consumer"
                assert frame["cursor"] == (before[-1] if before else slow.frames[0])["cursor"]
                break
            before.append(frame)
        resume_from = frame["cursor"]
        with pytest.raises(kit.Closed) as closed:
            await slow.next()
        assert closed.value.code == (1013 if transport == "ws" else None)
    except kit.Closed:
        assert transport == "sse"  # a WebSocket client always gets the gap before 1013
        resume_from = before[-1]["cursor"] if before else resume_from
    assert len(before) < len(produced)

    # It reconnects with that cursor and gets the rest, no loss, no duplicate.
    resumed = await kit.subscribed(transport, run.http, cursor=resume_from)
    rest = await kit.collect(resumed, len(produced) - len(before), timeout=30)
    assert [f["task_id"] for f in before + rest] == produced
    assert run.gaps("slow_consumer") == 1
    await wait_until(lambda: run.gateway.clients == 2, message="the slow connection released")
