"""A handler process: runs the sync handlers registered with ``executor="process"``, one attempt
at a time, for the worker process that started it (``python -m dtq_worker.handler_process``).

It speaks :mod:`dtq_worker.pool_wire` on the stdin and stdout it was given, which it moves out
of the handlers' way first: what a handler prints goes to stderr (the worker's log stream) and
it reads nothing from the worker's channel. It dies with its worker (``PR_SET_PDEATHSIG`` on
Linux): a handler never runs on after the process that holds its lease is gone. The worker
kills it at a timeout or a cancel and starts another; nothing here stops a handler.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import msgspec

from dtq_core.errors import PermanentError, Retry
from dtq_core.infra.log import configure_logging, current_task
from dtq_core.tasks import Task, TaskContext
from dtq_worker import pool_wire as wire
from dtq_worker.pool_wire import Done, Failed, Load, LoadFailed, Progress, ProgressAck, Ready, Run

TRACEBACK_MAX = 16000
"""The end of a traceback sent back (the worker stores the last 4,000 characters)."""
PR_SET_PDEATHSIG = 1

_decode_args = msgspec.json.Decoder(list[Any])
_decode_kwargs = msgspec.json.Decoder(dict[str, Any])
_json = msgspec.json.Encoder()


class Channel:
    """The worker's end: length-prefixed messages on two file descriptors."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd

    def send(self, message: wire.Message) -> None:
        data = memoryview(wire.frame(message))
        while data:
            data = data[os.write(self.write_fd, data) :]

    def receive(self) -> wire.Message | None:
        """The next message; ``None`` when the worker closed the channel (it is gone)."""
        header = self._exactly(wire.HEADER.size)
        if header is None:
            return None
        body = self._exactly(wire.length(header))
        if body is None:
            return None
        return wire.decode(body)

    def _exactly(self, n: int) -> bytes | None:
        chunks: list[bytes] = []
        while n:
            chunk = os.read(self.read_fd, n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


class ProcessTaskContext(TaskContext):
    """The context a handler gets in a handler process: progress goes to the worker over the
    channel (and waits for its answer); children cannot be spawned from here."""

    __slots__ = ("_channel",)

    def __init__(self, channel: Channel, **fields: Any) -> None:
        super().__init__(**fields)
        self._channel = channel

    def progress_threadsafe(self, value: float, message: str | None = None) -> bool:
        if not 0 <= value <= 1:
            raise ValueError(f"progress must be between 0 and 1, got {value!r}")
        self._channel.send(Progress(value=value, message=message))
        answer = self._channel.receive()
        if not isinstance(answer, ProgressAck):
            _exit_quietly()  # the worker is gone (or out of step): nothing to report to
        return answer.kept

    def spawn_threadsafe(self, *children: Any, then: Any = None, on_failure: Any = "fail") -> None:
        raise RuntimeError(
            "a handler run with executor='process' cannot spawn children: spawn them from "
            "an async or thread handler"
        )


Handler = tuple[Callable[..., Any], bool]
"""A handler and whether it takes the context first."""


def load(tasks: list[wire.Target]) -> dict[str, Handler] | LoadFailed:
    """Import every task's handler; the first that fails is the answer."""
    if os.getcwd() not in sys.path:  # as the worker's --app: a module beside it imports
        sys.path.insert(0, os.getcwd())
    handlers: dict[str, Handler] = {}
    for target in tasks:
        try:
            obj: Any = importlib.import_module(target.module)
            for part in target.qualname.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            return LoadFailed(
                task=target.name,
                error=f"cannot import {target.module}.{target.qualname}: "
                f"{type(exc).__name__}: {exc}",
            )
        if isinstance(obj, Task):
            handlers[target.name] = (obj.fn, obj.definition.takes_context)
        elif callable(obj):
            handlers[target.name] = (obj, target.takes_context)
        else:
            return LoadFailed(
                task=target.name, error=f"{target.module}.{target.qualname} is not callable"
            )
    return handlers


def run(channel: Channel, handler: Handler, request: Run) -> Done | Failed:
    """One attempt: the handler's outcome as the worker records it."""
    fn, takes_context = handler
    ctx = ProcessTaskContext(
        channel,
        task_id=request.task_id,
        queue=request.queue,
        task=request.task,
        attempt=request.attempt,
        max_attempts=request.max_attempts,
    )
    token = current_task.set(ctx)
    try:
        args = _decode_args.decode(request.args) if request.args else []
        kwargs = _decode_kwargs.decode(request.kwargs) if request.kwargs else {}
        result = fn(ctx, *args, **kwargs) if takes_context else fn(*args, **kwargs)
    except Retry as exc:
        return Failed(kind="retry", type="Retry", message=exc.reason, delay_s=exc.delay_s)
    except PermanentError as exc:
        return Failed(kind="permanent", type=type(exc).__name__, message=str(exc))
    except (Exception, SystemExit) as exc:  # a handler's sys.exit() ends the attempt only
        tb = "".join(traceback.format_exception(exc))[-TRACEBACK_MAX:]
        return Failed(kind="exception", type=type(exc).__name__, message=str(exc), traceback=tb)
    finally:
        current_task.reset(token)
    if result is None:
        return Done(result=None)
    try:
        return Done(result=_json.encode(result))
    except (TypeError, msgspec.EncodeError) as exc:
        return Failed(
            kind="not_serializable",
            type="ResultNotSerializable",
            message=f"the handler returned a value that is not JSON-encodable: {exc}",
        )


def die_with(parent: int) -> None:
    """Be killed when the worker process ``parent`` dies, however it dies (Linux); elsewhere
    the closed channel ends this process once the running handler returns."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        _exit_quietly()


def _exit_quietly() -> NoReturn:
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dtq_worker.handler_process")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-json", action="store_true")
    ns = parser.parse_args(argv)
    die_with(ns.parent)
    # Ctrl-C in a terminal reaches the whole foreground group: the worker decides when its
    # handler processes stop, never the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The channel gets descriptors of its own; handlers' prints go to stderr, their reads of
    # stdin find nothing.
    channel = Channel(os.dup(0), os.dup(1))
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    configure_logging(ns.log_level, ns.log_json)
    first = channel.receive()
    if not isinstance(first, Load):
        _exit_quietly()
    handlers = load(first.tasks)
    if isinstance(handlers, LoadFailed):
        channel.send(handlers)
        _exit_quietly()
    channel.send(Ready(pid=os.getpid()))
    while True:
        message = channel.receive()
        if message is None:
            return  # the worker closed the channel: it is stopping
        if isinstance(message, Run):
            handler = handlers.get(message.task)
            if handler is None:
                channel.send(Failed(kind="exception", type="UnknownTask", message=message.task))
                continue
            channel.send(run(channel, handler, message))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
