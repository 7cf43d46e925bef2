"""``dtq-worker --app pkg.module:registry --queues a,b --concurrency N``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys

import structlog

from dtq_core.metrics import serve_metrics
from dtq_core.runtime import run_service
from dtq_core.settings import Settings
from dtq_core.tasks import TaskRegistry
from dtq_core.tracing import configure_tracing
from dtq_worker.metrics import WorkerMetrics
from dtq_worker.worker import Worker

log = structlog.get_logger()


def load_registry(spec: str) -> TaskRegistry:
    """Import ``pkg.module:attribute`` and check that it is a :class:`TaskRegistry`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"dtq-worker: --app must look like pkg.module:registry, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"dtq-worker: cannot import {module_name!r}: {exc}") from None
    registry = getattr(module, attr, None)
    if not isinstance(registry, TaskRegistry):
        raise SystemExit(f"dtq-worker: {spec!r} is not a dtq_core.TaskRegistry")
    return registry


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
    if "" not in sys.path:
        sys.path.insert(0, "")
    registry = load_registry(args.app)
    queues = [q for q in args.queues.split(",") if q] or registry.queues or ["default"]
    overrides = {}
    if args.concurrency is not None:
        overrides["worker_concurrency"] = args.concurrency

    async def service(settings: Settings, stop: asyncio.Event) -> None:
        configure_tracing("dtq-worker", settings.otlp_endpoint)
        metrics = WorkerMetrics()
        port = serve_metrics(settings.worker_metrics_port, metrics.registry)
        if port:
            log.info("metrics_served", port=port)
        worker = Worker(settings, registry, queues, metrics=metrics)
        await worker.run(stop)

    run_service("dtq-worker", service, **overrides)


if __name__ == "__main__":
    main()
