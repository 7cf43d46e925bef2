"""Print the settings reference: ``python -m dtq_devtools.configdoc > docs/configuration.md``.

One table per settings section, in the order of :class:`dtq_core.infra.settings.Settings`;
``tests`` compare the committed page with :func:`configuration_markdown`, so it cannot drift.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from dtq_core.infra.settings import (
    BOOL_SPELLINGS,
    FIELD_PATHS,
    SECTIONS,
    env_name,
    schema_properties,
)

_INTRO = [
    "# Configuration",
    "",
    "Every setting is an environment variable with the `DTQ_` prefix. Values are validated",
    "at start-up; an invalid one stops the service with a message that names the variable,",
    "the value and the rule. An unknown `DTQ_*` variable is an error too (a typo would",
    "otherwise fall back to the default silently).",
    "",
    "The settings are grouped by concern, one section per heading below; the code reads a",
    "variable as the attribute named in the heading (`DTQ_API_PORT` is `settings.api.port`).",
    "",
    "This page is generated from `dtq_core.infra.settings.Settings` (`just docs`); a test",
    "fails when it drifts.",
]

_OUTRO = [
    "",
    "Cross-field rules: `DTQ_HEARTBEAT_INTERVAL_S` × 3 <= `DTQ_VISIBILITY_TIMEOUT_S`; "
    "`DTQ_RETRY_MAX_DELAY` >= `DTQ_RETRY_BASE_DELAY`; `DTQ_ENV=production` requires "
    "`DTQ_API_KEYS` or `DTQ_API_KEYS_FILE`; `DTQ_API_KEYS` and `DTQ_API_KEYS_FILE` are "
    "exclusive; with `DTQ_REDIS_PASSWORD_FILE`, `DTQ_REDIS_URL` carries no password.",
    "",
    "Secrets come from files (Docker secrets), never from the environment: "
    "`DTQ_REDIS_PASSWORD_FILE` and `DTQ_API_KEYS_FILE` name them (see "
    "[deployment.md](deployment.md) and [security.md](security.md)).",
    "",
]

_TOP_LEVEL = (
    "Deployment",
    "One deployment's identity and reach, beside the sections (`settings.namespace`, "
    "`settings.env`, `settings.allowed_hosts`).",
)


def _row(name: str, prop: dict[str, Any]) -> str:
    """One table row: variable, type, default, rule, meaning."""
    rules = [
        f"{sym} {prop[key]}"
        for key, sym in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        )
        if key in prop
    ]
    if "pattern" in prop:
        rules.append(f"matches `{prop['pattern']}`")
    if prop.get("type") == "boolean":
        rules.append(BOOL_SPELLINGS)
    if "enum" in prop:
        kind = "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
    else:
        kind = {"number": "float", "integer": "int", "boolean": "bool"}.get(
            prop.get("type", ""), "str"
        )
    if name == "worker_id":
        default = "`<hostname>-<pid>`"
    else:
        value = prop.get("default", "")
        if isinstance(value, bool):
            value = str(value).lower()
        default = f"`{value}`" if value != "" else "(empty)"
    return (
        f"| `{env_name(name)}` | {kind} | {default} | {', '.join(rules)} "
        f"| {prop.get('description', '')} |"
    )


def _heading(section: str) -> tuple[str, str]:
    """The title and the sentence under it: the section's ``title`` and docstring."""
    if not section:
        return _TOP_LEVEL
    struct = SECTIONS[section]
    doc = " ".join(inspect.cleandoc(struct.__doc__ or "").split("\n\n", 1)[0].split())
    return struct.title, doc.replace("``", "`")


def configuration_markdown() -> str:
    """The settings reference as Markdown (``docs/configuration.md``)."""
    props = schema_properties()
    lines = list(_INTRO)
    current: str | None = None
    for name, (section, _) in FIELD_PATHS.items():
        if section != current:
            current = section
            title, doc = _heading(section)
            lines += ["", f"## {title}", "", doc, ""]
            lines += ["| variable | type | default | rule | meaning |", "|---|---|---|---|---|"]
        lines.append(_row(name, props[name]))
    lines += _OUTRO
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(configuration_markdown())
