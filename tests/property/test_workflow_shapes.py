"""E2: random workflow shapes against a model of their outcome, on real Redis.

Hypothesis draws nested chains, groups and chords (up to a dozen steps), each step either
succeeding or failing for good, each with a random ``on_failure`` of its own or the workflow's.
The real submit, the real claim and finish functions and the real drain (what the scheduler
leader runs) carry it out, the test playing the worker. A model evaluates the same graph:

- without a failure under ``fail``: every step runs exactly once, receives exactly the values
  the model computes for its inputs (a result, an error value under ``continue``, ``None``
  under ``ignore``), the workflow ends as the model says and its result is the model's;
- with one: the workflow fails, no step runs twice, no step runs before its inputs ended or
  after a step it waits for failed it, and the failed step is one that failed under ``fail``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtq_core import Client, WorkflowStatus, is_error_value
from dtq_core.canvas import Chain, Chord, Expr, Group, Step, compile_workflow
from dtq_core.messages import TaskRequest
from dtq_core.protocol.scripts import Finish, Held
from dtq_core.protocol.workflows import fill, leaves
from dtq_devtools.testing import RedisServer

POLICIES = [None, "fail", "continue", "ignore"]
ERROR = '{"attempt":1,"type":"Broken","message":"this step fails"}'


def _step(draw: Any) -> Step:
    bad = draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else False
    return Step(
        TaskRequest(task="bad" if bad else "ok", queue="default"),
        pass_result=draw(st.integers(0, 5)) > 0,
        on_failure=draw(st.sampled_from(POLICIES)),
    )


@st.composite
def shapes(draw: Any, depth: int = 0) -> Expr:
    kind = draw(
        st.sampled_from(["step", "step", "chain", "group", "chord"] if depth < 3 else ["step"])
    )
    if kind == "step":
        return _step(draw)
    items = draw(st.lists(shapes(depth + 1), min_size=1, max_size=3))
    if kind == "chain":
        return Chain(tuple(items))
    if kind == "group":
        return Group(tuple(items))
    return Chord(Group(tuple(items)), draw(shapes(depth + 1)))


class Run:
    """One workflow carried out by the real functions, the test as its worker."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def __call__(self, expr: Expr, policy: str) -> tuple[Any, dict[int, list[Any]]]:
        client = Client.from_url(self.url, reject_unknown_queues=False)
        try:
            await client.redis.flushall()
            handle = await client.enqueue_workflow(expr, on_failure=policy)  # type: ignore[arg-type]
            record = await handle.get()
            step_of = {s.task_id.split(":")[1]: s.step for s in record.steps if s.task_id}
            received: dict[int, list[Any]] = {}
            qk = client.queue_keys("default")
            for _ in range(200):
                _, got = await client.scripts.claim(
                    qk, consumer="c", count=100, events_maxlen=1000, retention_ms=600_000
                )
                finishes = []
                for c in got:
                    step = step_of.get(c.rand)
                    if step is None:
                        step_of.update(
                            {
                                s.task_id.split(":")[1]: s.step
                                for s in (await handle.get()).steps
                                if s.task_id
                            }
                        )
                        step = step_of[c.rand]
                    received.setdefault(step, []).append(json.loads(c.args))
                    held = Held(c.rand, c.priority, c.entry_id, c.lease)
                    if c.task == "bad":
                        finishes.append(Finish(held, "dead", ERROR, ""))
                    else:
                        finishes.append(Finish(held, "ok", str(step), ""))
                if finishes:
                    await client.scripts.finish(
                        qk,
                        finishes,
                        events_maxlen=1000,
                        result_retention_ms=600_000,
                        retention_ms=600_000,
                        dlq_enabled=True,
                        dlq_maxlen=10_000,
                    )
                drained = await client.workflows.drain("default")
                if not got and not drained:
                    break
            return await handle.get(), received
        finally:
            await client.aclose()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = RedisServer(Path(tmp_path_factory.mktemp("redis")), appendonly=False)
    server.start()
    loop = asyncio.new_event_loop()
    runner = Run(server.url)
    yield lambda expr, policy: loop.run_until_complete(runner(expr, policy))
    loop.close()
    server.stop()


@pytest.mark.timeout(600)
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(expr=shapes(), policy=st.sampled_from(["fail", "continue", "ignore"]))
def test_random_workflow_shapes_end_as_the_model_says(run: Any, expr: Expr, policy: str) -> None:
    nodes, output = compile_workflow(expr)
    record, received = run(expr, policy)
    bad = {n.index for n in nodes if n.definition.request.task == "bad"}
    policy_of = {n.index: n.policy or policy for n in nodes}
    assert all(len(calls) == 1 for calls in received.values()), received  # none ran twice
    fatal = {i for i in bad if policy_of[i] == "fail"}

    # Every step that ran had every input ended first, and none it waits for failed it.
    for node in nodes:
        if node.index in received:
            assert all(dep in received for dep in node.inputs), (node.index, received)
            assert not (set(node.inputs) & fatal), (node.index, fatal)

    if fatal & set(received):
        assert record.status is WorkflowStatus.FAILED
        assert record.failed_step in fatal
        return
    # No step failed the workflow: the model's values, step by step.
    assert set(received) == {n.index for n in nodes}
    values: dict[int, Any] = {}
    for node in nodes:
        i = node.index
        d = node.definition
        expected = [fill(d.input, values)] if d.input is not None and d.pass_result else []
        (got,) = received[i]
        assert _same(got, expected), (i, got, expected)
        if i not in bad:
            values[i] = i
        elif policy_of[i] == "ignore":
            values[i] = None
        else:
            values[i] = "error"
    failed = any(policy_of[i] == "continue" for i in bad)
    assert record.status is (WorkflowStatus.FAILED if failed else WorkflowStatus.SUCCEEDED)
    if not failed:
        assert record.result == (fill(output, values) if output is not None else None)
    assert set(leaves(output)) <= {n.index for n in nodes}


def _same(got: Any, expected: Any) -> bool:
    """``got`` as the model expects it, an error value standing for ``"error"``."""
    if expected == "error":
        return is_error_value(got) and got["dtq_error"]["status"] == "dead"
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_same(g, e) for g, e in zip(got, expected, strict=True))
        )
    return bool(got == expected)
