"""Property-based fuzzing of every operation of the served OpenAPI document (docs/testing.md,
reliability catalogue C13): no 5xx, every status documented, every body matching its
documented schema and media type.

Each operation of docs/openapi.json (the drift test keeps it equal to the served document) is a
test of its own. 30 examples per operation keep it within seconds; they are drawn from the
run's seed (printed in the header; ``DTQTEST_SEED=<seed>`` replays a run, docs/testing.md).
The full run of C13 (all phases, more examples) is ``st run`` against a deployed stack.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dtq_core.infra.settings import load_settings
from dtq_devtools.testing import RedisServer, free_port
from dtq_devtools.testing.plugin import FAST

DOCS = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"
OPERATIONS = sorted(
    f"{method.upper()} {path}"
    for path, item in json.loads(DOCS.read_text())["paths"].items()
    for method in item
)
EXAMPLES = 30

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(redis_server: RedisServer, keys: Any, server_thread: Any) -> Iterator[Any]:
    with redis.Redis.from_url(redis_server.url) as sync:
        sync.flushall()
    config = load_settings(
        {}, **FAST, redis_url=redis_server.url, api_port=free_port(), api_keys=keys.entries
    )
    server = server_thread(config).start()
    try:
        yield schemathesis.openapi.from_url(f"{server.url}/schema/openapi.json")
    finally:
        server.stop()


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_operation_conforms_to_the_document(api_schema: Any, keys: Any, label: str) -> None:
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None, f"{label} is in docs/openapi.json but not served"
    statuses: Counter[int] = Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        response = case.call_and_validate(headers=keys.header("admin"), checks=CHECKS)
        statuses[response.status_code] += 1

    run()
    assert statuses, label
    assert max(statuses) < 500, statuses
