"""The argument schema of a handler (from its annotations) and the check a submit goes
through against it (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import pytest

from dtq_core import TaskContext, TaskRegistry
from dtq_core.protocol.argschema import check_call
from dtq_core.tasks import argument_schema


@dataclass
class Address:
    street: str
    number: int


registry = TaskRegistry()


@registry.task(name="ship")
async def ship(
    ctx: TaskContext,
    to: str,
    count: int = 1,
    *,
    mode: Literal["air", "sea"] = "sea",
    address: Address | None = None,
    tags: list[str] | None = None,
    weight: float = 0.0,
    at: datetime | None = None,
) -> None:
    return None


@registry.task(name="loose")
def loose(ctx: TaskContext, first: Any, *rest: int, **extra: str) -> None:
    return None


@registry.task(name="bare")
async def bare(x, y=2):  # type: ignore[no-untyped-def]
    return None


def schema(name: str) -> dict[str, Any]:
    definition = registry.get(name)
    assert definition is not None
    return argument_schema(definition)


def test_the_schema_names_parameters_without_the_context() -> None:
    s = schema("ship")
    assert s["x-positional"] == ["to", "count"]
    assert s["required"] == ["to"]
    assert s["properties"]["to"] == {"type": "string"}
    assert s["properties"]["mode"] == {"enum": ["air", "sea"]}
    assert s["additionalProperties"] is False
    assert "Address" in s["$defs"]
    assert schema("loose")["x-variadic"] is True
    assert schema("bare")["x-positional"] == ["x", "y"]  # no context: none left out


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "error"),
    [
        ("ship", ["a"], {}, None),
        ("ship", ["a", 3], {"mode": "air", "tags": ["x"], "weight": 2}, None),
        ("ship", ["a"], {"address": {"street": "Main", "number": 4}}, None),
        ("ship", ["a"], {"at": "2026-12-03T10:00:00Z", "count": 2.0}, None),
        ("ship", [1], {}, "to: expected string, got integer"),
        ("ship", [], {}, "to: missing"),
        ("ship", ["a", 2, 3], {}, "takes at most 2 positional arguments, got 3"),
        ("ship", ["a"], {"to": "b"}, "more than one value for 'to'"),
        ("ship", ["a"], {"mode": "rail"}, "mode: 'rail' is not one of"),
        ("ship", ["a"], {"colour": "red"}, "colour: unexpected"),
        ("ship", ["a"], {"tags": ["x", 1]}, "tags[1]: expected string, got integer"),
        ("ship", ["a"], {"address": {"street": "Main"}}, "address.number: missing"),
        ("ship", ["a", True], {}, "count: expected integer, got boolean"),
        ("ship", ["a", 1.5], {}, "count: expected integer, got number"),
        ("loose", [1, 2, 3], {"k": "v"}, None),
        ("loose", [1, "x"], {}, None),  # *rest is not checked item by item
        ("loose", [1], {"k": 2}, "k: expected string, got integer"),
        ("bare", [{"any": "thing"}], {}, None),
        ("bare", [], {}, "x: missing"),
    ],
)
def test_a_call_is_checked_against_the_schema(
    name: str, args: list[Any], kwargs: dict[str, Any], error: str | None
) -> None:
    why = check_call(schema(name), args, kwargs)
    if error is None:
        assert why is None
    else:
        assert why is not None
        assert error in why
