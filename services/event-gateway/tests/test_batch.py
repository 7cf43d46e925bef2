"""WebSocket batch mode (``?batch=1``): several frames per message, one JSON object a line."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from conftest import Kit


async def test_batch_mode_delivers_every_frame_in_fewer_messages(kit: Kit) -> None:
    run = await kit.gateway()
    plain = await kit.subscribed("ws", run.http)
    batched = await kit.open("ws", run.http, batch="1")
    first = msgspec.json.decode(await asyncio.wait_for(batched.conn.recv(), 5))
    assert first["type"] == "subscribed"

    ids = await kit.publish("bq", 300, batch=50)
    expected = [f["task_id"] for f in await kit.collect(plain, 300)]
    assert expected == ids

    got: list[dict[str, Any]] = []
    messages = 0
    async with asyncio.timeout(10):
        while len(got) < 300:
            text = await batched.conn.recv()
            assert isinstance(text, str)
            messages += 1
            got += [msgspec.json.decode(line) for line in text.split("\n")]
    assert [f["task_id"] for f in got] == ids
    assert all(f["type"] == "task.progress" and f["cursor"] for f in got)
    assert messages < 300  # frames queued together went out together
