"""``dtq-scheduler [--app pkg.module:registry]``: run one scheduler replica.

With ``--app``, the registry's code-declared schedules are validated before start-up and
stored in Redis at start (the code's definition wins for those names).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import structlog

from dtq_core import tasks
from dtq_core.errors import ValidationError
from dtq_core.infra.connection import connect
from dtq_core.infra.liveness import Liveness
from dtq_core.infra.loops import retry_until_done
from dtq_core.infra.metrics import serve_metrics
from dtq_core.infra.runtime import run_service
from dtq_core.infra.settings import Settings
from dtq_core.infra.tracing import configure_tracing
from dtq_core.ops.schedules import ScheduleSpec
from dtq_core.tasks import TaskRegistry
from dtq_scheduler_leader.cron import declare_schedules, declared_specs
from dtq_scheduler_leader.leader import retry_backoff
from dtq_scheduler_leader.metrics import SchedulerMetrics
from dtq_scheduler_leader.scheduler import Scheduler

log = structlog.get_logger()

SERVICE = "dtq-scheduler"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=SERVICE,
        description="Scheduler replica: one elected leader promotes due delayed and retrying "
        "tasks, fires cron and interval schedules, and marks stale workers. Configured by "
        "DTQ_* environment variables.",
    )
    parser.add_argument(
        "--app",
        metavar="pkg.module:registry",
        help="a TaskRegistry whose code-declared schedules are stored in Redis at start",
    )
    return parser.parse_args(argv)


def load_registry(path: str) -> TaskRegistry:
    """The ``--app`` registry, or exit with the reason."""
    return tasks.load_registry_or_exit(path, SERVICE)


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    registry: TaskRegistry | None = None,
    declared: Sequence[ScheduleSpec] = (),
) -> None:
    """Run one replica until ``stop`` is set."""
    # Cron-fired tasks start a trace of their own: the submit's PRODUCER span is its root.
    configure_tracing(SERVICE, settings.observability.otlp_endpoint)
    metrics = SchedulerMetrics()
    # Leader or follower, the lease loop reaches Redis at least every third of the TTL.
    liveness = Liveness("redis", max_age_s=settings.scheduler.leader_ttl_s)
    port = serve_metrics(
        settings.scheduler.metrics_port,
        metrics.registry,
        settings.observability.metrics_host,
        setting="DTQ_SCHEDULER_METRICS_PORT",
        health=liveness,
    )
    redis = connect(settings, client_name=SERVICE)
    try:
        scheduler = Scheduler(redis, settings, registry=registry, metrics=metrics)
        liveness.watch(lambda: scheduler.leadership.last_ok)
        async with liveness.ticking():
            if declared:
                try:
                    await retry_until_done(
                        lambda: declare_schedules(scheduler.store, declared),
                        stop=stop,
                        event="schedules_declare_failed",
                        backoff=retry_backoff(),
                    )
                except ValidationError as exc:  # over DTQ_MAX_PAYLOAD_BYTES
                    log.error("schedules_refused", error=exc.message)
                    raise SystemExit(2) from None
            if port:
                log.info("metrics_served", host=settings.observability.metrics_host, port=port)
            await scheduler.run(stop)
    finally:
        await redis.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    registry = load_registry(args.app) if args.app else None
    declared: list[ScheduleSpec] = []
    if registry is not None:
        try:
            # Checked before start-up; the payload cap is checked when they are stored.
            declared = declared_specs(registry.schedules)
        except ValidationError as exc:
            raise SystemExit(f"{SERVICE}: --app {args.app!r}: {exc.message}") from None

    async def service(settings: Settings, stop: asyncio.Event) -> None:
        await serve(settings, stop, registry, declared)

    run_service(SERVICE, service)


if __name__ == "__main__":
    main()
