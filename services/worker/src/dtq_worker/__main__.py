"""``dtq-worker --app pkg.module:registry --queues a,b --concurrency N``."""

from __future__ import annotations

import argparse
import asyncio

import structlog

from dtq_core import tasks
from dtq_core.infra.liveness import Liveness
from dtq_core.infra.metrics import serve_metrics
from dtq_core.infra.runtime import run_service
from dtq_core.infra.settings import Settings
from dtq_core.infra.tracing import configure_tracing
from dtq_worker.heartbeat import late_after_s
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.worker import Worker

log = structlog.get_logger()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dtq-worker", description="Run dtq task handlers.")
    parser.add_argument("--app", required=True, help="the task registry, pkg.module:registry")
    parser.add_argument(
        "--queues",
        default="",
        help="comma-separated queues to consume (default: the registry's queues)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="overrides DTQ_WORKER_CONCURRENCY"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    registry = tasks.load_registry_or_exit(args.app, "dtq-worker")
    queues = [q for q in args.queues.split(",") if q] or registry.queues or ["default"]
    overrides = {}
    if args.concurrency is not None:
        overrides["worker_concurrency"] = args.concurrency

    async def service(settings: Settings, stop: asyncio.Event) -> None:
        configure_tracing("dtq-worker", settings.observability.otlp_endpoint)
        metrics = WorkerMetrics()
        metrics.prepare(queues)
        liveness = Liveness("heartbeat", max_age_s=late_after_s(settings.worker))
        port = serve_metrics(
            settings.worker.metrics_port,
            metrics.registry,
            settings.observability.metrics_host,
            setting="DTQ_WORKER_METRICS_PORT",
            health=liveness,
        )
        if port:
            log.info("metrics_served", host=settings.observability.metrics_host, port=port)
        worker = Worker(settings, registry, queues, metrics=metrics)
        liveness.watch(lambda: worker.heartbeat.last_ok)
        async with liveness.ticking():
            await worker.run(stop)

    run_service("dtq-worker", service, **overrides)


if __name__ == "__main__":
    main()
