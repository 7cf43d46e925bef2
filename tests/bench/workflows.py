"""Workflows in the benchmark: a chord of 1,000 no-op members (the submit, and the time to the
callback's result), a batch of as many (created, filled in one add, sealed; to its callback)
and a chain of 100 steps (per step, against one plain task waited for the
same way), on one worker process and a scheduler leader (docs/workflows.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from common import finished, start_worker, stop

from dtq_core import Client, TaskRequest, chain, chord, step
from dtq_core.protocol.keys import Keys
from dtq_devtools.testing import wait_until

QUEUE = "bench-w"


def start_scheduler(url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DTQ_REDIS_URL": url, "DTQ_SCHEDULER_METRICS_PORT": "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "dtq_scheduler_leader"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def workflow_bench(url: str, members: int = 1000, steps: int = 100) -> dict[str, Any]:
    client = Client.from_url(url, max_queue_depth=0, reject_unknown_queues=False)
    await client.redis.flushall()
    worker = start_worker(url, QUEUE, concurrency=100)
    scheduler = start_scheduler(url)
    try:
        await wait_until(lambda: client.redis.zcard(Keys().workers), timeout=30)
        await wait_until(lambda: client.redis.exists(Keys().leader), timeout=30)
        # Warm up: routes, the function library, connections.
        await (await client.enqueue("noop", queue=QUEUE)).result(timeout=30)

        t0 = time.perf_counter()
        await client.enqueue_many([TaskRequest(task="noop", queue=QUEUE)] * members)
        plain_submit = time.perf_counter() - t0
        await wait_until(
            lambda: finished(client.redis, Keys().queue(QUEUE).events, members + 1),
            timeout=120,
            interval=0.01,
            message="plain tasks drained",
        )
        plain_all = time.perf_counter() - t0

        wf = chord([step("noop", queue=QUEUE) for _ in range(members)], step("echo", queue=QUEUE))
        t0 = time.perf_counter()
        handle = await client.enqueue_workflow(wf)
        chord_submit = time.perf_counter() - t0
        result = await handle.result(timeout=120)
        chord_done = time.perf_counter() - t0
        assert len(result["args"][0]) == members

        t0 = time.perf_counter()
        batch = await client.batch(on_complete=step("echo", queue=QUEUE))
        await batch.add_many([step("noop", queue=QUEUE) for _ in range(members)])
        batch_add = time.perf_counter() - t0
        await batch.seal()
        done = await batch.wait(timeout=120)
        batch_done = time.perf_counter() - t0
        assert (done.succeeded, done.on_complete) == (members, "succeeded")

        t0 = time.perf_counter()
        for _ in range(steps):
            await (await client.enqueue("echo", queue=QUEUE)).result(timeout=30)
        plain_step = (time.perf_counter() - t0) / steps
        long_chain = chain(*(step("echo", queue=QUEUE) for _ in range(steps)))
        t0 = time.perf_counter()
        await (await client.enqueue_workflow(long_chain)).result(timeout=120)
        chain_step = (time.perf_counter() - t0) / steps
    finally:
        stop(worker)
        stop(scheduler)
        await client.aclose()
    return {
        "members": members,
        "chord_submit_s": chord_submit,
        "chord_to_callback_s": chord_done,
        "batch_add_s": batch_add,
        "batch_to_callback_s": batch_done,
        "plain_submit_s": plain_submit,
        "plain_all_done_s": plain_all,
        "steps": steps,
        "chain_per_step_ms": chain_step * 1000,
        "plain_task_round_trip_ms": plain_step * 1000,
    }
