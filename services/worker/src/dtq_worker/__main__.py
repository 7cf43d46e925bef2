"""``dtq-worker --app pkg.module:registry --queues a,b --concurrency N [--processes N|auto]``.

One process runs one :class:`~dtq_worker.worker.Worker`. With ``--processes`` (or
DTQ_WORKER_PROCESSES) above 1 this process becomes the supervisor of that many worker processes
(:mod:`dtq_worker.supervisor`), each started as ``dtq_worker ... --slot-of <group> --slot i``
(options no user needs, left out of ``--help``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import structlog

from dtq_core import tasks
from dtq_core.infra.liveness import Liveness
from dtq_core.infra.metrics import serve_metrics
from dtq_core.infra.runtime import run_service, startup
from dtq_core.infra.settings import Settings, exit_on_settings_error
from dtq_core.infra.tracing import configure_tracing
from dtq_worker.context import Place, consumer_name
from dtq_worker.cpus import usable_cpus
from dtq_worker.handler_pool import HandlerPoolError
from dtq_worker.heartbeat import late_after_s
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.probe import ProbeServer
from dtq_worker.supervisor import CONFIG_ERROR, Slot, run_supervisor
from dtq_worker.worker import Worker

log = structlog.get_logger()

PROGRAM = "dtq-worker"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Run dtq task handlers.")
    parser.add_argument("--app", required=True, help="the task registry, pkg.module:registry")
    parser.add_argument(
        "--queues",
        default="",
        help="comma-separated queues to consume (default: the registry's queues)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="handlers each worker process runs at once; overrides DTQ_WORKER_CONCURRENCY",
    )
    parser.add_argument(
        "--processes",
        default=None,
        metavar="N|auto",
        help="worker processes under one supervisor (auto: one per CPU the worker may use); "
        "overrides DTQ_WORKER_PROCESSES",
    )
    hidden = argparse.SUPPRESS
    parser.add_argument("--slot-of", default=None, help=hidden)
    parser.add_argument("--slot", type=int, default=0, help=hidden)
    parser.add_argument("--restarts", type=int, default=0, help=hidden)
    parser.add_argument("--watch-fd", type=int, default=None, help=hidden)
    parser.add_argument("--probe", default=None, help=hidden)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    registry = tasks.load_registry_or_exit(args.app, PROGRAM)
    queues = [q for q in args.queues.split(",") if q] or registry.queues or ["default"]
    overrides: dict[str, Any] = {}
    if args.concurrency is not None:
        overrides["worker_concurrency"] = args.concurrency
    if args.processes is not None:
        overrides["worker_processes"] = str(args.processes)
    if args.slot_of is not None:
        run_process(args, registry, queues, overrides)
        return
    settings = startup(PROGRAM, **overrides).settings
    count = settings.worker.process_count or usable_cpus()
    if count == 1:
        run_process(args, registry, queues, overrides)
        return
    group = consumer_name(settings.worker.id)

    def command(slot: Slot, watch_fd: int) -> list[str]:
        return process_command(
            args, queues, settings, count=count, group=group, slot=slot, watch_fd=watch_fd
        )

    with exit_on_settings_error(PROGRAM):  # the metrics port in use
        raise SystemExit(run_supervisor(settings, count, group, command))


def process_command(
    args: argparse.Namespace,
    queues: list[str],
    settings: Settings,
    *,
    count: int,
    group: str,
    slot: Slot,
    watch_fd: int,
) -> list[str]:
    """The command line of a supervisor's worker process: the supervisor's own options, made
    explicit, and where the process stands."""
    return [
        sys.executable,
        "-m",
        "dtq_worker",
        "--app",
        args.app,
        "--queues",
        ",".join(queues),
        "--concurrency",
        str(settings.worker.concurrency),
        "--processes",
        str(count),
        "--slot-of",
        group,
        "--slot",
        str(slot.index),
        "--restarts",
        str(slot.restarts),
        "--watch-fd",
        str(watch_fd),
        "--probe",
        str(slot.probe),
    ]


def run_process(
    args: argparse.Namespace,
    registry: tasks.TaskRegistry,
    queues: list[str],
    overrides: dict[str, Any],
) -> None:
    """One worker process: alone (its own metrics port), or one of a supervisor's (its probe
    socket; it drains when the supervisor's pipe closes)."""
    place: Place | None = None
    if args.slot_of is not None:
        place = Place(
            group=args.slot_of,
            slot=args.slot,
            slots=int(args.processes or 1),
            restarts=args.restarts,
            supervisor=os.getppid(),
        )
        structlog.contextvars.bind_contextvars(worker=place.consumer)

    async def service(settings: Settings, stop: asyncio.Event) -> None:
        configure_tracing("dtq-worker", settings.observability.otlp_endpoint)
        metrics = WorkerMetrics()
        metrics.prepare(queues)
        liveness = Liveness("heartbeat", max_age_s=late_after_s(settings.worker))
        probe: ProbeServer | None = None
        if place is not None:
            probe = ProbeServer(Path(args.probe), metrics.registry, liveness)
            probe.start()
            if args.watch_fd is not None:
                watch_supervisor(args.watch_fd, stop)
        else:
            port = serve_metrics(
                settings.worker.metrics_port,
                metrics.registry,
                settings.observability.metrics_host,
                setting="DTQ_WORKER_METRICS_PORT",
                health=liveness,
            )
            if port:
                log.info("metrics_served", host=settings.observability.metrics_host, port=port)
        try:
            worker = Worker(settings, registry, queues, metrics=metrics, place=place)
            liveness.watch(lambda: worker.heartbeat.last_ok)
            async with liveness.ticking():
                await worker.run(stop)
        except HandlerPoolError as exc:
            sys.stderr.write(f"{PROGRAM}: {exc}\n")
            raise SystemExit(CONFIG_ERROR) from None
        finally:
            if probe is not None:
                probe.close()

    run_service(PROGRAM, service, **overrides)


def watch_supervisor(fd: int, stop: asyncio.Event) -> None:
    """Drain when the supervisor is gone: it holds the other end of the pipe at ``fd``, which
    closes with it however it ends (SIGKILL included), so this process never runs on
    unsupervised."""
    loop = asyncio.get_running_loop()

    def readable() -> None:
        if os.read(fd, 1):
            return  # the supervisor writes nothing; ignore it if it ever does
        loop.remove_reader(fd)
        os.close(fd)
        if not stop.is_set():
            log.warning("worker_supervisor_gone", action="draining")
            stop.set()

    loop.add_reader(fd, readable)


if __name__ == "__main__":
    main()
