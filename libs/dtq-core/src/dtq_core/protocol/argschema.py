"""Task argument schemas (pure): what a worker publishes of each handler's parameters (JSON
Schema, from its annotations: :func:`dtq_core.tasks.argument_schema`), and the check a submit
of the task goes through when one is published (:func:`check_call`).

A schema is a JSON Schema object of the handler's parameters by name (``properties``,
``required``, ``additionalProperties`` false unless it takes ``**kwargs``, ``$defs`` for the
structs and dataclasses its annotations name), plus ``x-positional``: the names positional
arguments bind to, in order, and ``x-variadic``: whether it takes ``*args``. The check knows the
subset of JSON Schema that msgspec writes for Python annotations: ``type``, ``enum``,
``const``, ``anyOf``, ``oneOf``, ``$ref``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``prefixItems``, ``minItems``, ``maxItems``; a keyword it
does not know passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_NULL = {"type": "null"}
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}


def check_call(
    schema: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str | None:
    """Why a call with ``args`` and ``kwargs`` does not fit ``schema`` (``None``: it does)."""
    positional: list[str] = list(schema.get("x-positional", []))
    if len(args) > len(positional) and not schema.get("x-variadic"):
        return f"takes at most {len(positional)} positional arguments, got {len(args)}"
    bound: dict[str, Any] = {}
    for name, value in zip(positional, args, strict=False):
        bound[name] = value
    for name, value in kwargs.items():
        if name in bound:
            return f"got more than one value for {name!r}"
        bound[name] = value
    return _check(schema, bound, "", schema.get("$defs", {}))


def _check(schema: Any, value: Any, path: str, defs: Mapping[str, Any]) -> str | None:  # noqa: C901, PLR0911, PLR0912 - one branch per keyword
    if not isinstance(schema, Mapping):
        return None
    where = path or "the arguments"
    if "$ref" in schema:
        target = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1])
        return _check(target, value, path, defs) if target is not None else None
    for key in ("anyOf", "oneOf"):
        if key in schema:
            errors = [_check(s, value, path, defs) for s in schema[key]]
            if all(e is not None for e in errors):
                # An optional value that is not null: the error of what it is meant to be.
                named = [e for s, e in zip(schema[key], errors, strict=True) if s != _NULL]
                if len(named) == 1:
                    return named[0]
                return f"{where}: {value!r} fits none of its types"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {schema['enum']}"
    if "const" in schema and value != schema["const"]:
        return f"{where}: must be {schema['const']!r}"
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(value, k) for k in names):
            return f"{where}: expected {' or '.join(names)}, got {_kind(value)}"
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items")
            error = _check(sub, item, f"{path}[{i}]", defs)
            if error is not None:
                return error
        if "minItems" in schema and len(value) < schema["minItems"]:
            return f"{where}: needs at least {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{where}: takes at most {schema['maxItems']} items"
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                return f"{_join(path, name)}: missing"
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                error = _check(properties[name], item, _join(path, name), defs)
            elif extra is False:
                return f"{_join(path, name)}: unexpected"
            else:
                error = _check(extra, item, _join(path, name), defs)
            if error is not None:
                return error
    return None


def _is(value: Any, kind: str) -> bool:
    if kind in {"integer", "number"} and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _kind(value: Any) -> str:
    for name in _TYPES:
        if _is(value, name):
            return name
    return type(value).__name__


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
