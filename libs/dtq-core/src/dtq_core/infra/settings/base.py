"""What every settings section shares: the ``DTQ_`` prefix, the struct options, the value types.

A section is a frozen struct whose fields are encoded under their flat names (the variable name
without ``DTQ_``), so a validation error, the JSON schema and the generated reference all speak
of ``worker_concurrency`` while the code reads ``settings.worker.concurrency``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

PREFIX = "DTQ_"

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
Environment = Literal["development", "production"]

BOOL_SPELLINGS = "true, false, 1, 0 (any case)"
"""What a bool setting accepts (msgspec's lax str -> bool conversion)."""


def env_name(field: str) -> str:
    """The variable of the flat setting name ``field``: ``api_port`` -> ``DTQ_API_PORT``."""
    return PREFIX + field.upper()


class Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of the settings sections: one concern, read by the parts that own it.

    ``title`` heads the section in ``docs/configuration.md``; the class docstring's first
    paragraph is the sentence under the heading.
    """

    title: ClassVar[str] = ""
