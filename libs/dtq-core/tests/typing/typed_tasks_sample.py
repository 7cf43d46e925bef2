"""What a type checker makes of typed tasks: each line marked ``# E: <code>`` must be an error
of that code under ``mypy --strict``, and no other line may be (test_typed_tasks.py)."""

from __future__ import annotations

from dtq_core import Client, TaskContext, TaskRegistry

registry = TaskRegistry()


@registry.task(name="send", queue="emails")
async def send(ctx: TaskContext, to: str, subject: str = "") -> dict[str, str]:
    return {"sent_to": to, "subject": subject}


@registry.task(name="total")
def total(ctx: TaskContext, values: list[int]) -> int:
    return sum(values)


@registry.task(name="shout")
async def shout(text: str) -> str:
    return text.upper()


async def correct(client: Client, ctx: TaskContext) -> None:
    handle = await send.enqueue(client, "a@b.c", subject="hi")
    sent: dict[str, str] | None = (await handle.result(timeout=5)).result
    later = await total.with_options(priority=7, delay_s=10).enqueue(client, [1, 2])
    summed: int | None = (await later.result()).result
    loud: str | None = (await (await shout.enqueue(client, "hey")).result()).result
    print(sent, summed, loud, send.step("x@y.z"), total.with_options(queue="q").step([1]))
    await client.enqueue("send", ["a@b.c"])  # a name still works
    print(await send(ctx, "direct@b.c"))  # the handler itself


async def wrong(client: Client) -> None:
    await send.enqueue(client, 42)  # E: arg-type
    await send.enqueue(client, "a@b.c", subjet="hi")  # E: call-arg
    await total.enqueue(client, ["x"])  # E: list-item
    await shout.enqueue(client)  # E: call-arg
    await send.with_options(priority="high").enqueue(client, "a@b.c")  # E: arg-type
    text: str | None = (await (await total.enqueue(client, [1])).result()).result  # E: assignment
    print(text, send.step(1))  # E: arg-type
