"""Example tasks that `just up` runs: ``dtq-worker --app examples.tasks:registry``."""

from __future__ import annotations

import asyncio
import random
import time

from dtq_core import PermanentError, Retry, TaskContext, TaskRegistry, step

registry = TaskRegistry()


@registry.task(name="examples.add", queue="default")
async def add(ctx: TaskContext, a: float, b: float) -> float:
    """Adds two numbers."""
    return a + b


@registry.task(name="examples.sleep", queue="default", timeout_s=120)
async def sleep(ctx: TaskContext, seconds: float = 1.0) -> float:
    """Sleeps, reporting progress every tenth of the way."""
    for tenth in range(10):
        await asyncio.sleep(seconds / 10)
        await ctx.progress((tenth + 1) / 10, f"slept {seconds * (tenth + 1) / 10:.1f} s")
    return seconds


@registry.task(name="examples.flaky", queue="default", max_attempts=5)
async def flaky(ctx: TaskContext, failure_rate: float = 0.5) -> str:
    """Fails at random, to show retries with backoff and the dead-letter queue."""
    if random.random() < failure_rate:  # noqa: S311 - a demo, not cryptography
        raise RuntimeError(f"flaked on attempt {ctx.attempt}")
    return f"succeeded on attempt {ctx.attempt}"


@registry.task(name="examples.fetch", queue="default")
async def fetch(ctx: TaskContext, url: str) -> str:
    """Asks to be retried later instead of failing (a rate-limited upstream, say)."""
    if ctx.attempt < 2:
        raise Retry(delay_s=2, reason="upstream asked us to come back in 2 s")
    return f"fetched {url}"


@registry.task(name="examples.validate", queue="default")
async def validate(ctx: TaskContext, value: int) -> int:
    """A failure no retry can fix goes straight to the DLQ."""
    if value < 0:
        raise PermanentError(f"value must be >= 0, got {value}")
    return value


@registry.task(name="examples.cpu", queue="default")
def cpu(ctx: TaskContext, n: int = 200_000) -> int:
    """A synchronous handler: it runs in a worker thread, not on the event loop."""
    started = time.perf_counter()
    total = sum(i * i for i in range(n))
    ctx.progress_threadsafe(1.0, f"{time.perf_counter() - started:.3f} s")
    return total


@registry.task(name="emails.send", queue="emails", max_attempts=5, timeout_s=30)
async def send_email(ctx: TaskContext, to: str, subject: str = "") -> dict[str, str]:
    """The task docs/api.md's examples submit, so that they run against `just up`; an address
    without ``@`` can never be sent to, which fills the DLQ the examples browse."""
    if "@" not in to:
        raise PermanentError(f"{to!r} is not an email address")
    await ctx.progress(0.5, "rendered")
    return {"sent_to": to}


@registry.task(name="reports.build", queue="reports")
async def build_report(ctx: TaskContext, kind: str = "daily") -> str:
    """A task of a second queue, for docs/api.md's schedule examples."""
    return f"{kind} report built"


@registry.task(name="etl.extract", queue="default")
async def extract(ctx: TaskContext, day: str) -> list[dict[str, object]]:
    """The first step of docs/workflows.md's ETL chain: the day's rows."""
    return [{"day": day, "order": n, "cents": 250 * n} for n in range(1, 4)]


@registry.task(name="etl.transform", queue="default")
async def transform(ctx: TaskContext, rows: list[dict[str, object]]) -> dict[str, object]:
    """Its second step: it receives the rows extract returned."""
    total = sum(int(str(r["cents"])) for r in rows)
    return {"day": rows[0]["day"] if rows else None, "orders": len(rows), "cents": total}


@registry.task(name="etl.load", queue="default")
async def load(ctx: TaskContext, summary: dict[str, object], table: str) -> str:
    """Its last step: the summary first, then its own argument."""
    return f"loaded {summary['orders']} orders into {table}"


@registry.task(name="render.page", queue="default")
async def render_page(ctx: TaskContext, page: int) -> int:
    """One member of docs/workflows.md's chord: the rendered page's size."""
    return 1000 + page


@registry.task(name="render.merge", queue="default")
async def merge(ctx: TaskContext, sizes: list[int]) -> dict[str, int]:
    """The chord's callback: every page's result, in page order."""
    return {"pages": len(sizes), "bytes": sum(sizes)}


@registry.task(name="render.book", queue="default")
async def render_book(ctx: TaskContext, pages: int) -> int:
    """docs/workflows.md's parent task: one child per page, continued by render.merge once
    they have all ended (no slot is held while they run)."""
    await ctx.spawn_many([step("render.page", args=[n]) for n in range(1, pages + 1)])
    await ctx.wait_children(then=step("render.merge"))
    return pages


@registry.task(name="reports.batch", queue="default")
async def batch_report(ctx: TaskContext, summary: dict[str, object], to: str) -> str:
    """docs/workflows.md's batch callback: the batch's counts first, then its own argument
    (a real one would email them)."""
    return (
        f"emailed {to}: {summary['succeeded']} of {summary['total']} days extracted, "
        f"{summary['failed']} failed"
    )


registry.schedule("examples.heartbeat", task="examples.add", every_s=60, args=[1, 1])
