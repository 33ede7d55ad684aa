"""A small JSON Schema checker for tool arguments.

`jsonschema` is not a dependency; tool schemas use only a handful of keywords, and
the messages here are phrased for a model to fix its call. Supported: `type` (a name
or a list), `properties`, `required`, `additionalProperties: false`, `enum`,
`minimum`/`maximum`, `minLength`/`maxLength`, `items`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["validate"]


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "integer":  # JSON has one number type: 3.0 is an integer, True is not
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "null":
        return value is None
    return True  # an unknown type name constrains nothing


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "object", "array", "null"):
        if _is_type(value, name):
            return name
    return type(value).__name__


def validate(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Problems with `value` against `schema`, one readable line each; empty when valid."""
    label = where or "arguments"
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, t) for t in names):
            return [f"{label} must be {' or '.join(names)}, got {_json_type(value)}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        problems.append(f"{label} must be one of {allowed}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{label} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{label} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{label} must have at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{label} must have at most {schema['maxLength']} characters")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{label}[{i}]")
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        prefix = f"{where}." if where else ""
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"missing required argument {prefix}{key!r}")
        if schema.get("additionalProperties") is False:
            extra = sorted(str(k) for k in value if k not in props)
            if extra:
                known = ", ".join(props) or "none"
                problems.append(f"unknown argument(s) {', '.join(extra)} (accepted: {known})")
        for key, sub in props.items():
            if key in value and isinstance(sub, dict):
                problems += validate(value[key], sub, f"{prefix}{key}")
    return problems
