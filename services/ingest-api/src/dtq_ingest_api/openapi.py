"""``python -m dtq_ingest_api.openapi`` prints the OpenAPI document of the app
(``docs/openapi.json`` is that output; a test fails when the two differ).

The document does not depend on settings, so the file and every running API agree. What the
document says beyond the routes lives in :mod:`dtq_ingest_api.openapi_config`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from dtq_core.infra.settings import load_settings
from dtq_ingest_api.app import create_app


def document() -> dict[str, Any]:
    """The OpenAPI document of the app, as served at ``/schema/openapi.json``."""
    schema: dict[str, Any] = create_app(load_settings({})).openapi_schema.to_schema()
    return schema


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render(document()))


if __name__ == "__main__":
    main()
