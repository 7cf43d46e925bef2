"""``dtq-worker --processes N``: N worker processes under one small supervisor.

The supervisor does no Redis work and holds no task: each worker process is a whole
:class:`dtq_worker.worker.Worker` with its own registered id (``<group>/<slot>``), leases, pending
entries and heartbeat, so the supervisor's death loses nothing and a process's death is what a
lone worker's is (its attempts are reclaimed after the visibility timeout). The supervisor:

- starts the processes (``python -m dtq_worker ... --slot-of <group> --slot i``: a fresh
  interpreter each, in a session of its own so that a terminal's Ctrl-C reaches them once,
  through the supervisor);
- restarts a process that exits, after a capped exponential backoff (reset once a process
  stayed up :data:`STABLE_S`); a process that keeps crashing is logged as a crash loop, counted,
  and fails ``/health``, but is never restarted in a tight loop. A process that exits with status
  2 (its configuration is refused) ends the supervisor with status 2: a restart cannot help;
- forwards SIGTERM and SIGINT: every process drains (DTQ_DRAIN_TIMEOUT_S; what does not finish
  is handed back at once) and the supervisor exits 0 once all have; a second signal forwards
  again, and each process then exits at once. A process still alive
  :data:`STOP_MARGIN_S` after the drain budget is killed;
- holds the write end of a pipe whose read end each process watches: when the supervisor dies
  (even by SIGKILL) the pipe closes and every process drains and exits instead of running on
  unsupervised;
- serves one ``/metrics`` (the processes' metrics added up: :mod:`dtq_worker.aggregate`) and one
  ``/health`` (each process's liveness: a wedged process fails it) on DTQ_WORKER_METRICS_PORT,
  reading each process over a Unix socket (:mod:`dtq_worker.probe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import structlog
from prometheus_client import Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from dtq_core.errors import SettingsError
from dtq_core.infra.backoff import Backoff
from dtq_core.infra.liveness import START_GRACE_S
from dtq_core.infra.loops import sleep_or_stop
from dtq_core.infra.metrics import serve_metrics, service_registry
from dtq_core.infra.settings import Settings
from dtq_worker import aggregate, probe
from dtq_worker.handler_pool import describe_exit

log = structlog.get_logger()

CONFIG_ERROR = 2
"""A worker process's exit status when its configuration is refused (as every entry point's)."""
STABLE_S = 60.0
"""A process that ran this long before it exited starts its restart backoff from the bottom."""
RESTART_BACKOFF = (1.0, 30.0)
"""The first restart delay and the cap: a process that crashes at once is retried within a
second, then ever more slowly, at most every 30 s."""
CRASH_LOOP = 5
"""Restarts in a row, each of a process that ran less than :data:`STABLE_S`, that make a crash
loop (logged, and ``/health`` fails while it lasts)."""
STOP_MARGIN_S = 15.0
"""How long past DTQ_DRAIN_TIMEOUT_S a stopping process may take (handing back, flushing,
leaving the registry) before it is killed."""
PROBE_TIMEOUT_S = 1.0
"""How long a process may take to answer a scrape or a health check (they are asked side by
side, so a scrape takes about this long at worst)."""
TICK_S = 0.5


@dataclass(slots=True)
class Slot:
    """One of the N places a worker process runs in, and its current process."""

    index: int
    probe: Path
    restarts: int = 0
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    """``time.monotonic()`` at the current process's start."""
    backoff: Backoff = field(default_factory=lambda: Backoff(*RESTART_BACKOFF, jitter=0.2))
    answered: bool = False
    """Whether the current process has answered a health check (before that, it may be
    starting: it gets the start-up grace)."""
    crash_loop: bool = False
    """Set at an exit that makes :data:`CRASH_LOOP` quick exits in a row."""
    last_exit: str | None = None

    def looping(self, now: float) -> bool:
        """In a crash loop now: until a process of the slot runs :data:`STABLE_S`."""
        return self.crash_loop and not (_alive(self) and now - self.started >= STABLE_S)


Command = Callable[[Slot, int], list[str]]
"""The command line of the process of a slot, given the descriptor of its end of the pipe."""


class Supervisor:
    """Runs and watches ``count`` worker processes.

    Args:
        settings: the validated settings (the processes inherit the environment).
        count: N.
        group: the worker's registered id; the processes register under ``<group>/<slot>``.
        command: a process's command line (:func:`dtq_worker.__main__.process_command`).
    """

    def __init__(self, settings: Settings, count: int, group: str, command: Command) -> None:
        self.settings = settings
        self.count = count
        self.group = group
        self.command = command
        self.folder = Path(tempfile.mkdtemp(prefix="dtq-worker-"))  # 0700: the probes
        self.slots = [Slot(i, self.folder / f"{i}.sock") for i in range(count)]
        self.stop = asyncio.Event()
        self.signals = 0
        self.failure: int | None = None
        self.last_tick = time.monotonic()
        self.aggregate = aggregate.Aggregate()
        self.registry = service_registry("dtq-worker", "dtq-worker")
        self.running = Gauge(
            "dtq_worker_processes", "Worker processes running now", registry=self.registry
        )
        self.wanted = Gauge(
            "dtq_worker_process_slots",
            "Worker processes the supervisor runs (--processes)",
            registry=self.registry,
        )
        self.restarts = Counter(
            "dtq_worker_process_restarts_total",
            "Worker processes that exited by themselves and were restarted, by slot",
            ["slot"],
            registry=self.registry,
        )
        self.crash_loops = Gauge(
            "dtq_worker_process_crash_loops",
            "Slots whose process keeps exiting soon after its start",
            registry=self.registry,
        )
        self.wanted.set(count)
        self.running.set_function(lambda: sum(1 for s in self.slots if _alive(s)))
        self.crash_loops.set_function(
            lambda: sum(1 for s in self.slots if s.looping(time.monotonic()))
        )
        for s in self.slots:
            self.restarts.labels(str(s.index))
        self._own = {m.name for m in self.registry.collect()}
        self.registry.register(_Processes(self))
        self._askers = ThreadPoolExecutor(max_workers=min(count, 32), thread_name_prefix="dtq-ask")

    # -- running -----------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until stopped; returns the exit status (0: every process drained)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        ticker = asyncio.create_task(self._tick(), name="dtq-supervisor-tick")
        try:
            statuses = await asyncio.gather(*(self._keep(s) for s in self.slots))
        finally:
            ticker.cancel()
            self._askers.shutdown(wait=False)
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.failure is not None:
            return self.failure
        if self.signals > 1 or any(code != 0 for code in statuses):
            return 1
        log.info("worker_stopped", worker=self.group, processes=self.count)
        return 0

    def serve(self) -> int:
        """Serve ``/metrics`` and ``/health`` on DTQ_WORKER_METRICS_PORT (0: off).

        Raises:
            SettingsError: the port is in use.
        """
        s = self.settings
        return serve_metrics(
            s.worker.metrics_port,
            self.registry,
            s.observability.metrics_host,
            setting="DTQ_WORKER_METRICS_PORT",
            health=self,
        )

    def _on_signal(self, signum: int) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            log.info("service_stopping", service="dtq-worker", signal=name, processes=self.count)
            self.stop.set()
        else:
            log.warning("service_killed", service="dtq-worker", signal=name)
        for slot in self.slots:
            if (proc := _live(slot)) is not None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)

    async def _tick(self) -> None:
        while True:
            self.last_tick = time.monotonic()
            await asyncio.sleep(TICK_S)

    async def _keep(self, slot: Slot) -> int:
        """Run the slot's process until the supervisor stops; restart it when it exits."""
        while True:
            try:
                code = await self._run_once(slot)
            except OSError as exc:  # no process could be made (out of memory, of pids)
                log.error("worker_process_not_started", slot=slot.index, error=str(exc))
                code = 1
            self.aggregate.retire(slot.index)
            if self.stop.is_set():
                return code
            if code == CONFIG_ERROR:
                log.error(
                    "worker_process_refused_to_start",
                    slot=slot.index,
                    hint="its configuration is refused (the line above says why); stopping",
                )
                self.failure = CONFIG_ERROR
                self._stop_all()
                return code
            delay = self._next_delay(slot, code)
            if await sleep_or_stop(self.stop, delay):
                return 0
            slot.restarts += 1

    async def _run_once(self, slot: Slot) -> int:
        read_end, write_end = os.pipe()  # the write end stays here, never inherited
        try:
            slot.proc = await asyncio.create_subprocess_exec(
                *self.command(slot, read_end),
                pass_fds=(read_end,),
                start_new_session=True,
                env=child_environment(self.settings),
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        if self.stop.is_set():  # the signal came while it started: it has not seen it
            slot.proc.terminate()
        slot.started = time.monotonic()
        slot.answered = False
        log.info(
            "worker_process_started", slot=slot.index, pid=slot.proc.pid, restarts=slot.restarts
        )
        try:
            return await self._wait(slot.proc)
        finally:
            os.close(write_end)

    async def _wait(self, proc: asyncio.subprocess.Process) -> int:
        """The process's exit status; once stopping, killed past the drain budget."""
        waiting = asyncio.ensure_future(proc.wait())
        if not self.stop.is_set():
            stopping = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait([waiting, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        if not waiting.done():
            budget = self.settings.worker.drain_timeout_s + STOP_MARGIN_S
            done, _ = await asyncio.wait([waiting], timeout=budget)
            if not done:
                log.error("worker_process_killed", pid=proc.pid, after_s=budget)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        return await waiting

    def _next_delay(self, slot: Slot, code: int) -> float:
        uptime = time.monotonic() - slot.started
        if uptime >= STABLE_S:
            slot.backoff.reset()
        delay = slot.backoff.next()
        slot.crash_loop = slot.backoff.failures >= CRASH_LOOP
        slot.last_exit = describe_exit(code)
        self.restarts.labels(str(slot.index)).inc()
        log.error(
            "worker_process_crash_loop" if slot.crash_loop else "worker_process_exited",
            slot=slot.index,
            pid=slot.proc.pid if slot.proc else None,
            exit=slot.last_exit,
            uptime_s=round(uptime, 1),
            restart_in_s=round(delay, 2),
            restarts=slot.restarts + 1,
        )
        return delay

    def _stop_all(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
            for slot in self.slots:
                if (proc := _live(slot)) is not None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()

    # -- what the port shows (called from the listener's threads) ----------------------------

    def _ask_all(self, request: str) -> dict[int, bytes | None]:
        """Every live process's answer to ``request``, asked side by side."""
        live = [s for s in self.slots if _alive(s)]
        answers = self._askers.map(lambda s: probe.ask(s.probe, request, PROBE_TIMEOUT_S), live)
        return {s.index: a for s, a in zip(live, answers, strict=True)}

    def collect_processes(self) -> list[Metric]:
        answers = self._ask_all("metrics")
        merged = self.aggregate.merge(
            {i: None if a is None else a.decode() for i, a in answers.items()}
        )
        return aggregate.metrics(merged, skip=self._own)

    def report(self) -> SupervisorReport:
        """``/health``: every slot's process answers its own liveness check in time."""
        answers = self._ask_all("health")
        now = time.monotonic()
        processes: dict[str, dict[str, Any]] = {}
        for slot in self.slots:
            processes[str(slot.index)] = _slot_health(slot, answers.get(slot.index), now)
        loop_age = now - self.last_tick
        return SupervisorReport(processes, loop_age)


def _live(slot: Slot) -> asyncio.subprocess.Process | None:
    """The slot's process while it runs."""
    proc = slot.proc
    return proc if proc is not None and proc.returncode is None else None


def _alive(slot: Slot) -> bool:
    return _live(slot) is not None


def _slot_health(slot: Slot, answer: bytes | None, now: float) -> dict[str, Any]:
    out: dict[str, Any] = {"restarts": slot.restarts}
    proc = _live(slot)
    if proc is None:
        # Between a crash and its restart: healthy unless the slot is in a crash loop.
        out.update(ok=not slot.looping(now), state="restarting", last_exit=slot.last_exit)
        return out
    out["pid"] = proc.pid
    if answer is None:
        starting = not slot.answered and now - slot.started <= START_GRACE_S
        out.update(ok=starting, state="starting" if starting else "not answering")
        return out
    slot.answered = True
    try:
        body = msgspec.json.decode(answer)
    except msgspec.DecodeError:
        body = {"status": "unreadable"}
    ok = body.get("status") == "ok" and not slot.looping(now)
    out.update(ok=ok, state="running", checks=body.get("checks"))
    return out


class SupervisorReport:
    """The supervisor's ``/health``: 200 when its loop runs and every process passes, else
    503; the body has a section per process slot."""

    def __init__(self, processes: dict[str, dict[str, Any]], loop_age_s: float) -> None:
        self.processes = processes
        self.loop_age_s = loop_age_s

    @property
    def ok(self) -> bool:
        return self.loop_ok and all(p["ok"] for p in self.processes.values())

    @property
    def loop_ok(self) -> bool:
        return self.loop_age_s <= max(4 * TICK_S, 2.0)

    def body(self) -> bytes:
        failed = [f"process {i}" for i, p in self.processes.items() if not p["ok"]]
        if not self.loop_ok:
            failed.insert(0, "supervisor")
        out: dict[str, Any] = {"status": "ok" if self.ok else "unhealthy"}
        if failed:
            out["failed"] = failed
        out["supervisor"] = {"ok": self.loop_ok, "loop_age_s": round(self.loop_age_s, 3)}
        out["processes"] = self.processes
        return msgspec.json.encode(out)


class _Processes(Collector):
    """The processes' metrics, read when scraped."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def collect(self) -> list[Metric]:
        return self._supervisor.collect_processes()

    def describe(self) -> list[Metric]:
        return []  # the registry would otherwise ask the processes at registration


def run_supervisor(settings: Settings, count: int, group: str, command: Command) -> int:
    """Start the supervisor on its own event loop; returns its exit status."""

    async def main() -> int:
        supervisor = Supervisor(settings, count, group, command)
        try:
            port = supervisor.serve()
        except SettingsError:
            shutil.rmtree(supervisor.folder, ignore_errors=True)
            raise
        if port:
            log.info("metrics_served", host=settings.observability.metrics_host, port=port)
        log.info("worker_supervisor_started", worker=group, processes=count, pid=os.getpid())
        return await supervisor.run()

    return asyncio.run(main())


def child_environment(settings: Settings) -> dict[str, str]:
    """What a worker process inherits on top of this environment: the supervisor's worker id,
    so every process's record names the same ``DTQ_WORKER_ID``."""
    return {**os.environ, "DTQ_WORKER_ID": settings.worker.id}
