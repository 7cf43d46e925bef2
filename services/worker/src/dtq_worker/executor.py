"""Running one handler: arguments, timeout, sync handlers in threads or handler processes, and
the outcome.

The outcome is a :class:`dtq_core.protocol.scripts.Finish` ready for the batched finish script; the
retry decision (attempts left, backoff, ``Retry``, ``PermanentError``) is made here, for a
handler run in a process (:mod:`dtq_worker.handler_pool`) from what its process reported.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import traceback
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec

from dtq_core.errors import PermanentError, Retry, ValidationError
from dtq_core.infra import tracing
from dtq_core.infra.backoff import retry_delay
from dtq_core.infra.log import current_task
from dtq_core.infra.settings import Settings
from dtq_core.messages import StoredError
from dtq_core.protocol.outcomes import FinishOutcome
from dtq_core.protocol.scripts import Claimed, Finish, Held
from dtq_core.tasks import TaskContext, TaskDef
from dtq_worker.handler_pool import HandlerPool
from dtq_worker.pool_wire import Done, Failed, Run

TRACEBACK_MAX = 4000
MESSAGE_MAX = 1000

_json = msgspec.json.Encoder()
_decode_args = msgspec.json.Decoder(list[Any])
_decode_kwargs = msgspec.json.Decoder(dict[str, Any])


@dataclass(slots=True)
class Execution:
    """What the worker keeps about one attempt while it runs."""

    queue: str
    claimed: Claimed
    held: Held
    started: float = 0.0
    deadline_slot: int = 0
    trace_id: str | None = None
    span_id: str | None = None
    cancel_reason: str | None = None
    """Why the worker cancelled the handler: ``cancel`` (user request), ``lease_lost`` or
    ``drain`` (shutdown deadline)."""
    failure: tuple[str, str, BaseException | None] | None = None
    """``(type, message, exception)`` of a failed attempt, for its span."""


class Executor:
    """Runs handlers for one worker process."""

    def __init__(
        self,
        settings: Settings,
        consumer: str,
        concurrency: int,
        processes: HandlerPool | None = None,
    ) -> None:
        """Args:
        processes: where handlers registered with ``executor="process"`` run (without it,
            in threads like the others).
        """
        self.settings = settings
        self.consumer = consumer
        self._threads: ThreadPoolExecutor | None = None
        self._concurrency = concurrency
        self._processes = processes

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(
                max_workers=self._concurrency, thread_name_prefix="dtq-handler"
            )
        return self._threads

    async def close(self) -> None:
        """Stop the handler processes (the worker is done with every attempt)."""
        if self._processes is not None:
            await self._processes.close()

    def shutdown(self) -> None:
        if self._threads is not None:
            # Threads cannot be killed: a sync handler past its timeout keeps its thread
            # until it returns. Do not wait for those at exit.
            self._threads.shutdown(wait=False, cancel_futures=True)

    def run(
        self, ex: Execution, tdef: TaskDef | None, ctx: TaskContext
    ) -> Coroutine[Any, Any, Finish | None]:
        """Run the handler and decide the outcome; ``None`` means "do not finish"
        (the lease was lost, or the worker is handing the task back).

        Handlers' log lines carry the task id, queue and attempt; with tracing on, the
        attempt runs in a CONSUMER span of the task's trace and its lines carry the span's
        ids too. Without tracing, no coroutine is added around the handler's."""
        c = ex.claimed
        current_task.set(ctx)
        if tracing.is_on():
            return self._traced(ex, tdef, ctx)
        if c.headers:
            ex.trace_id = tracing.header_trace_id(c.headers)
        return self._run(ex, tdef, ctx)

    async def _traced(self, ex: Execution, tdef: TaskDef | None, ctx: TaskContext) -> Finish | None:
        c = ex.claimed
        with tracing.process_span(
            c.headers,
            task=c.task,
            queue=ex.queue,
            task_id=ctx.task_id,
            attempt=c.attempt,
            max_attempts=c.max_attempts,
            consumer=self.consumer,
        ) as span:
            ex.trace_id, ex.span_id = tracing.ids(span.span)
            finish = await self._run(ex, tdef, ctx)
            if finish is None:
                span.done("released")
            elif ex.failure is not None:
                span.done(finish.outcome, *ex.failure)
            else:
                span.done(finish.outcome)
        return finish

    async def _run(  # noqa: PLR0911 - one return per way an attempt can end
        self, ex: Execution, tdef: TaskDef | None, ctx: TaskContext
    ) -> Finish | None:
        c = ex.claimed
        if tdef is None:
            return self.failed_outcome(
                ex,
                "UnknownTask",
                f"no handler for task {c.task!r} in this worker",
                reason="unknown_task",
            )
        try:
            if tdef.executor == "process" and (pool := self._processes) is not None:
                reply = await self._in_process(pool, ex, ctx)
                if isinstance(reply, Failed):
                    return self._remote_failure(ex, reply)
                # Already JSON: Raw passes it through the encoder unchanged.
                result = None if reply.result is None else msgspec.Raw(reply.result)
                return self._succeeded(ex, result, ctx)
            args = _decode_args.decode(c.args) if c.args else []
            kwargs = _decode_kwargs.decode(c.kwargs) if c.kwargs else {}
            result = await self._call(tdef, ctx, args, kwargs)
        except asyncio.CancelledError:
            # The worker cancels handlers for a reason it records first; any other
            # cancellation is the worker itself going away.
            if ex.cancel_reason == "cancel":
                return Finish(ex.held, FinishOutcome.CANCEL)
            if ex.cancel_reason == "timeout":
                return self.failed_outcome(
                    ex,
                    "TimeoutError",
                    f"handler exceeded its timeout of {c.timeout_ms / 1000:g} s",
                    reason="timeout",
                )
            if ex.cancel_reason in {"lease_lost", "drain"}:
                return None
            raise
        except Retry as exc:
            return self.failed_outcome(
                ex,
                "Retry",
                exc.reason,
                reason="retry_requested",
                delay_s=exc.delay_s,
                error=exc,
            )
        except PermanentError as exc:
            return self.failed_outcome(
                ex, type(exc).__name__, str(exc), reason="permanent", permanent=True, error=exc
            )
        except Exception as exc:
            return self.failed_outcome(ex, type(exc).__name__, str(exc), error=exc)
        return self._succeeded(ex, result, ctx)

    async def _call(
        self,
        tdef: TaskDef,
        ctx: TaskContext,
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """Call the handler. Timeouts are enforced by the worker's watchdog, which cancels
        the task (one timer heap per worker instead of a timer per task). A sync handler's
        thread cannot be stopped: past its timeout it keeps its thread until it returns."""
        call_args = (ctx, *args) if tdef.takes_context else tuple(args)
        if tdef.is_async:
            return await tdef.fn(*call_args, **kwargs)
        loop = asyncio.get_running_loop()
        # run_in_executor does not carry context variables into the thread: run the handler
        # in a copy of ours, so its log lines and spans belong to this attempt.
        return await loop.run_in_executor(
            self._pool(),
            functools.partial(contextvars.copy_context().run, tdef.fn, *call_args, **kwargs),
        )

    async def _in_process(
        self, pool: HandlerPool, ex: Execution, ctx: TaskContext
    ) -> Done | Failed:
        """Run the attempt in a handler process; a cancellation kills that process."""
        c = ex.claimed
        request = Run(
            task=c.task,
            task_id=ctx.task_id,
            queue=ctx.queue,
            attempt=c.attempt,
            max_attempts=c.max_attempts,
            args=c.args.encode() if c.args else b"",
            kwargs=c.kwargs.encode() if c.kwargs else b"",
        )
        return await pool.run(request, ctx.progress, lambda: ex.cancel_reason)

    def _remote_failure(self, ex: Execution, failed: Failed) -> Finish:
        """The outcome of an attempt whose handler process reported a failure."""
        match failed.kind:
            case "retry":
                return self.failed_outcome(
                    ex, "Retry", failed.message, reason="retry_requested", delay_s=failed.delay_s
                )
            case "permanent" | "not_serializable":
                return self.failed_outcome(
                    ex, failed.type, failed.message, reason="permanent", permanent=True
                )
            case _:
                return self.failed_outcome(ex, failed.type, failed.message, tb=failed.traceback)

    def _succeeded(self, ex: Execution, result: Any, ctx: TaskContext) -> Finish:
        children = ""
        if ctx.children is not None:
            try:
                children = ctx.children.payload()
            except ValidationError as exc:
                return self.failed_outcome(
                    ex, "ChildrenTooLarge", str(exc), reason="permanent", permanent=True
                )
        if result is None:
            return Finish(ex.held, FinishOutcome.OK, "", "", children)
        try:
            payload = _json.encode(result)
        except (TypeError, msgspec.EncodeError) as exc:
            return self.failed_outcome(
                ex,
                "ResultNotSerializable",
                f"the handler returned a value that is not JSON-encodable: {exc}",
                reason="permanent",
                permanent=True,
            )
        limit = self.settings.tasks.result_max_bytes
        if len(payload) > limit:
            preview = payload[:limit].decode("utf-8", "ignore")
            return Finish(ex.held, FinishOutcome.OK, _json.encode(preview).decode(), "1", children)
        return Finish(ex.held, FinishOutcome.OK, payload.decode(), "", children)

    def failed_outcome(
        self,
        ex: Execution,
        etype: str,
        message: str,
        *,
        reason: str = "exception",
        delay_s: float | None = None,
        permanent: bool = False,
        error: BaseException | None = None,
        tb: str | None = None,
    ) -> Finish:
        """The outcome of a failed attempt: retried after a backoff (or ``delay_s``) while
        attempts are left, buried when none is or the failure is ``permanent``. ``tb``: the
        traceback text a handler process sent (``error`` gives it for a local one)."""
        c = ex.claimed
        ex.failure = (etype, message, error)
        if error is not None and reason in {"exception", "permanent"}:
            tb = "".join(traceback.format_exception(error))
        if tb is not None:
            tb = tb[-TRACEBACK_MAX:]
        entry = StoredError(
            attempt=c.attempt,
            type=etype,
            message=message[:MESSAGE_MAX],
            reason=reason,
            traceback=tb,
            worker=self.consumer,
            ts=str(time.time_ns() // 1000),
        )
        payload = _json.encode(entry).decode()
        if permanent or c.attempt >= c.max_attempts:
            return Finish(ex.held, FinishOutcome.DEAD, payload, "")
        if delay_s is None:
            s = self.settings
            delay_s = retry_delay(
                c.attempt,
                base=s.retries.base_delay,
                cap=s.retries.max_delay,
                jitter=s.retries.jitter,
            )
        return Finish(ex.held, FinishOutcome.RETRY, payload, str(max(0, round(delay_s * 1000))))
