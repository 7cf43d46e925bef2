"""The handler processes of one worker process: where sync handlers registered with
``executor="process"`` run (:mod:`dtq_worker.handler_process` is the other side).

A thread cannot be stopped, so a sync handler past its timeout keeps its thread until it
returns. A process can: when the running set cancels an attempt run here (its timeout, a user's
cancel, a lost lease, the end of a drain), :meth:`HandlerPool.run` kills the attempt's process,
waits until it is gone, and only then lets the cancellation through, so the outcome the worker
records is never followed by a side effect of that handler. A new process takes the dead one's
place in the background.

The processes are started with ``sys.executable -m dtq_worker.handler_process`` (a fresh
interpreter: no fork of a process that runs threads and an event loop), in a session of their
own (a terminal's Ctrl-C is the worker's to act on), and import the handlers once, at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable

import structlog

from dtq_core.infra.backoff import Backoff
from dtq_core.tasks import TaskDef
from dtq_worker import pool_wire as wire
from dtq_worker.pool_wire import Done, Failed, Load, LoadFailed, Progress, ProgressAck, Ready, Run

log = structlog.get_logger()

START_TIMEOUT_S = 60.0
"""How long a new handler process may take to import its handlers (a big application on a
loaded host takes seconds)."""
CLOSE_GRACE_S = 2.0
"""How long an idle handler process gets to leave when its channel closes, before a kill."""

ProgressSink = Callable[[float, str | None], Awaitable[bool]]
Reason = Callable[[], str | None]
Replaced = Callable[[str], None]


class HandlerPoolError(Exception):
    """The handler processes cannot run a task's handler (it does not import there)."""


def targets_of(definitions: Iterable[TaskDef]) -> list[wire.Target]:
    """What the handler processes import: every task registered with ``executor="process"``.

    Raises:
        HandlerPoolError: a handler that a fresh interpreter cannot import by name.
    """
    out = []
    for d in definitions:
        if d.executor != "process":
            continue
        module = getattr(d.fn, "__module__", None) or ""
        qualname = getattr(d.fn, "__qualname__", None) or ""
        if module == "__main__" or not module or not qualname:
            raise HandlerPoolError(
                f"task {d.name!r} runs with executor='process' but its handler is defined in "
                "a script (__main__): define it in a module the worker imports by name "
                "(--app pkg.module:registry)"
            )
        out.append(
            wire.Target(
                name=d.name, module=module, qualname=qualname, takes_context=d.takes_context
            )
        )
    return out


def describe_exit(code: int) -> str:
    """``exit status 3`` or ``killed by SIGSEGV``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class HandlerProcess:
    """One handler process and its channel."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        if proc.stdin is None or proc.stdout is None:
            raise RuntimeError("a handler process is started with pipes on stdin and stdout")
        self.proc = proc
        self._in = proc.stdin
        self._out = proc.stdout

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def spawn(cls, *, log_level: str, log_json: bool) -> HandlerProcess:
        argv = [
            sys.executable,
            "-m",
            "dtq_worker.handler_process",
            "--parent",
            str(os.getpid()),
            "--log-level",
            log_level,
        ]
        if log_json:
            argv.append("--log-json")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        return cls(proc)

    async def send(self, message: wire.Message) -> None:
        self._in.write(wire.frame(message))
        await self._in.drain()

    async def receive(self) -> wire.Message | None:
        """The next message; ``None`` once the process is gone."""
        try:
            header = await self._out.readexactly(wire.HEADER.size)
            body = await self._out.readexactly(wire.length(header))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return wire.decode(body)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    async def close(self) -> None:
        """Close the channel (an idle process leaves by itself), kill it if it lingers."""
        with contextlib.suppress(ConnectionError):
            self._in.close()
        try:
            await asyncio.wait_for(self.proc.wait(), CLOSE_GRACE_S)
        except TimeoutError:
            self.kill()
            await self.proc.wait()


class HandlerPool:
    """``size`` handler processes, each running one attempt at a time.

    Args:
        size: the processes (DTQ_WORKER_PROCESS_POOL, or the worker's share of the CPUs).
        targets: the handlers they import (:func:`targets_of`).
        replaced: called with the reason each time a process is replaced (``timeout``,
            ``cancel``, ``lease_lost``, ``drain``, ``died``).
    """

    def __init__(
        self,
        size: int,
        targets: list[wire.Target],
        *,
        log_level: str = "INFO",
        log_json: bool = False,
        replaced: Replaced | None = None,
    ) -> None:
        self.size = size
        self.targets = targets
        self._log_level = log_level
        self._log_json = log_json
        self._replaced = replaced or (lambda _reason: None)
        self._idle: asyncio.Queue[HandlerProcess] = asyncio.Queue()
        self._live: set[HandlerProcess] = set()
        self._respawns: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """The handler processes alive now."""
        return sorted(p.pid for p in self._live)

    async def start(self) -> None:
        """Start every process and wait until each has imported the handlers.

        Raises:
            HandlerPoolError: a handler does not import in a handler process.
        """
        started = await asyncio.gather(
            *(self._start_one() for _ in range(self.size)), return_exceptions=True
        )
        failures = [r for r in started if isinstance(r, BaseException)]
        if failures:
            await self.close()
            raise failures[0]

    async def _start_one(self) -> None:
        proc = await HandlerProcess.spawn(log_level=self._log_level, log_json=self._log_json)
        self._live.add(proc)
        try:
            await proc.send(Load(tasks=self.targets))
            answer = await asyncio.wait_for(proc.receive(), START_TIMEOUT_S)
        except (TimeoutError, ConnectionError) as exc:
            answer = LoadFailed(task="", error=f"the handler process did not start: {exc!r}")
        if isinstance(answer, Ready):
            self._idle.put_nowait(proc)
            return
        self._live.discard(proc)
        proc.kill()
        code = await proc.proc.wait()
        if isinstance(answer, LoadFailed):
            raise HandlerPoolError(f"task {answer.task!r}: {answer.error}")
        raise HandlerPoolError(
            f"a handler process ended before it was ready ({describe_exit(code)}); its "
            "output above says why"
        )

    async def run(self, request: Run, progress: ProgressSink, reason: Reason) -> Done | Failed:
        """Run one attempt in an idle process (waiting for one when all are busy).

        A cancellation kills the process, waits for its end, starts a replacement (counted
        under ``reason()``), then propagates.
        """
        proc = await self._ready()
        try:
            await proc.send(request)
            while True:
                message = await proc.receive()
                if isinstance(message, Progress):
                    await proc.send(ProgressAck(kept=await self._progress(progress, message)))
                    continue
                if isinstance(message, Done | Failed):
                    self._idle.put_nowait(proc)
                    return message
                return await self._lost(proc, message)
        except asyncio.CancelledError:
            proc.kill()
            exited = asyncio.ensure_future(proc.proc.wait())
            self._replace(proc, reason() or "cancelled", exited)
            # The outcome is recorded after this returns: the handler is gone by then.
            await asyncio.shield(exited)
            raise
        except (ConnectionError, ValueError) as exc:  # the channel broke or went out of step
            proc.kill()
            return await self._lost(proc, None, str(exc))

    async def _ready(self) -> HandlerProcess:
        """An idle process that has not died while it waited (the OOM killer, say: it is
        replaced and the next one taken)."""
        while True:
            proc = await self._idle.get()
            if proc.proc.returncode is None:
                return proc
            self._replace(proc, "died", None)

    async def _progress(self, progress: ProgressSink, message: Progress) -> bool:
        try:
            return await progress(message.value, message.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis away: the handler goes on, as a thread's would
            log.warning("progress_failed", error=str(exc))
            return True

    async def _lost(
        self, proc: HandlerProcess, message: wire.Message | None, why: str = ""
    ) -> Failed:
        """The process died mid-attempt (a crash, the OOM killer, ``os._exit``) or answered
        out of step: the attempt failed; a new process takes its place."""
        proc.kill()
        code = await proc.proc.wait()
        self._replace(proc, "died", None)
        detail = why or (f"unexpected {type(message).__name__}" if message else "")
        text = f"the handler's process ended while it ran the task ({describe_exit(code)})"
        log.warning("handler_process_died", pid=proc.pid, exit=describe_exit(code))
        return Failed(
            kind="exception",
            type="HandlerProcessDied",
            message=f"{text}: {detail}" if detail else text,
        )

    def _replace(
        self, proc: HandlerProcess, reason: str, exited: asyncio.Future[int] | None
    ) -> None:
        self._live.discard(proc)
        self._replaced(reason)
        if self._closed:
            return
        task = asyncio.create_task(self._respawn(exited), name="dtq-handler-process-start")
        self._respawns.add(task)
        task.add_done_callback(self._respawns.discard)

    async def _respawn(self, exited: asyncio.Future[int] | None) -> None:
        if exited is not None:
            await exited
        backoff = Backoff(base=0.5, cap=30.0)
        while not self._closed:
            try:
                await self._start_one()
            except (HandlerPoolError, OSError) as exc:
                delay = backoff.next()
                log.error("handler_process_start_failed", error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
            else:
                return

    async def close(self) -> None:
        """Stop every process (the worker is stopping; none runs an attempt any more)."""
        self._closed = True
        for task in list(self._respawns):
            task.cancel()
        if self._respawns:
            await asyncio.wait(list(self._respawns))
        procs = list(self._live)
        self._live.clear()
        await asyncio.gather(*(p.close() for p in procs), return_exceptions=True)
