"""What the OpenAPI document says beyond what the routes declare: its info, security schemes
and tags (:func:`config`), the security every ``/api/v1`` route requires (:data:`SECURITY`),
and the body of ``POST /tasks/batch`` (:class:`BatchOperation`).

The app and the routes import this module; :mod:`dtq_ingest_api.openapi` prints the document
of the app built with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
    Tag,
)

from dtq_ingest_api.schemas import BATCH_MAX

VERSION = "1.0.0"
SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"apiKey": []}]
"""Either scheme carries the same key; routes under /api/v1 require one of them."""

DESCRIPTION = """\
The REST interface of dtq, a distributed task queue on Redis.

Every route under `/api/v1` needs an API key (`Authorization: Bearer <key>` or `X-API-Key`)
with the route's scope: `submit` for submitting, `read` for every GET, `admin` for changes
(cancel, retry, queues, the dead-letter queue, schedules); `admin` implies the others. Errors
are RFC 9457 problem details (`application/problem+json`) with a stable `code`; every response
carries an `X-Request-ID` header. See docs/api.md.
"""


def config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="dtq ingest API",
        version=VERSION,
        description=DESCRIPTION,
        path="/schema",
        render_plugins=[JsonRenderPlugin()],
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(
                    type="http", scheme="bearer", description="`Authorization: Bearer <key>`"
                ),
                "apiKey": SecurityScheme(
                    type="apiKey", name="X-API-Key", security_scheme_in="header"
                ),
            }
        ),
        tags=[
            Tag(name="tasks", description="Submit, inspect, wait for, cancel and retry tasks."),
            Tag(name="queues", description="Queue statistics; pause, resume and purge."),
            Tag(name="dlq", description="The dead-letter queue of each queue."),
            Tag(name="groups", description="The groups of a queue: their turns and limits."),
            Tag(name="workers", description="The worker registry."),
            Tag(
                name="stats",
                description="Per-minute history of throughput, failures, run times and depth.",
            ),
            Tag(name="schedules", description="Cron and interval schedules."),
            Tag(
                name="workflows",
                description="Chains, groups and chords of steps; a task's children.",
            ),
            Tag(
                name="batches",
                description="Tasks added over time, counted, with callbacks when all have ended.",
            ),
            Tag(name="auth", description="The auth mode and the presented key (no key needed)."),
            Tag(name="service", description="Liveness, readiness and metrics (no key needed)."),
        ],
    )


@dataclass
class BatchOperation(Operation):
    """``POST /tasks/batch`` decodes each item on its own (a per-item result for each bad
    one), so its body is not a route parameter; this documents it."""

    def __post_init__(self) -> None:
        tasks = Schema(
            type=OpenAPIType.ARRAY,
            items=Reference(ref="#/components/schemas/SubmitRequest"),
            min_items=1,
            max_items=BATCH_MAX,
        )
        body = Schema(
            type=OpenAPIType.OBJECT,
            required=["tasks"],
            properties={"tasks": tasks},
            additional_properties=False,
            title="BatchRequest",
        )
        self.request_body = RequestBody(
            required=True, content={"application/json": OpenAPIMediaType(schema=body)}
        )
