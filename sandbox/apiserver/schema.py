"""Structural validation of objects against a CRD's openAPIV3Schema.

Covers what the KubeRay and Kueue CRDs use: types, int-or-string, preserve-unknown-fields,
maps (additionalProperties), required, enum, bounds, pattern, lengths and anyOf. CEL rules
(x-kubernetes-validations) are not evaluated. Messages follow the apiserver's wording.
"""

from __future__ import annotations

import json
import re

_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
               float: "number", type(None): "null"}


def _type_of(value) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _show(value) -> str:
    return json.dumps(value) if isinstance(value, (str, int, float, bool)) else f'"{_type_of(value)}"'


def _matches_type(value, typ: str) -> bool:
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def validate(obj, schema: dict, strict: bool = True) -> tuple[list[tuple[str, str]], list[str]]:
    """Return (errors, unknown_field_paths) for `obj` against `schema`.

    Unknown fields are errors when `strict`, else they are returned for pruning/warnings.
    `metadata` below the root is not descended into (the server checks it separately).
    """
    errors: list[tuple[str, str]] = []
    unknown: list[str] = []
    _walk(obj, schema, "", errors, unknown, root=True)
    if strict:
        errors += [(p, f'Invalid value: "{p}": unknown field "{p}"') for p in unknown]
    return errors, unknown


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(value, schema: dict, path: str, errors: list, unknown: list, root: bool = False) -> None:
    if value is None:
        if not schema.get("nullable") and schema.get("type") not in (None,):
            errors.append((path, f"Invalid value: \"null\": {path} in body must be of type {schema.get('type')}: \"null\""))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            errors.append((path, f"Invalid value: {_show(value)}: {path} in body must be of type integer-or-string: {_show(value)}"))
        return
    if "anyOf" in schema and "type" not in schema:
        if not any(_fits(value, s) for s in schema["anyOf"]):
            errors.append((path, f"Invalid value: {_show(value)}: {path} in body must match a schema in anyOf"))
        return
    typ = schema.get("type")
    if typ and not _matches_type(value, typ):
        errors.append((path, f'Invalid value: "{_type_of(value)}": {path} in body must be of type {typ}: "{_type_of(value)}"'))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(json.dumps(v) for v in schema["enum"])
        errors.append((path, f"Unsupported value: {_show(value)}: supported values: {allowed}"))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append((path, f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append((path, f"Invalid value: {_show(value)}: {path} in body should be at least {schema['minLength']} chars long"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append((path, f"Invalid value: {_show(value)}: {path} in body should match '{schema['pattern']}'"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((path, f"Invalid value: {value}: {path} in body should be greater than or equal to {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((path, f"Invalid value: {value}: {path} in body should be less than or equal to {schema['maximum']}"))
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append((path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append((path, f"Invalid value: {len(value)}: {path} in body should have at least {schema['minItems']} items"))
        items = schema.get("items")
        if items:
            for i, v in enumerate(value):
                _walk(v, items, f"{path}[{i}]", errors, unknown)
    if isinstance(value, dict):
        props = schema.get("properties")
        for req in schema.get("required", []):
            if req not in value:
                errors.append((_join(path, req), "Required value"))
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            child = _join(path, k)
            if root and k in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and k in props:
                _walk(v, props[k], child, errors, unknown)
            elif isinstance(extra, dict):
                _walk(v, extra, child, errors, unknown)
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields") and extra is not True:
                unknown.append(child)


def _fits(value, schema: dict) -> bool:
    errs: list = []
    _walk(value, schema, "", errs, [])
    return not errs


def prune(obj: dict, paths: list[str]) -> None:
    """Drop the unknown fields found by `validate` (the apiserver's non-strict behaviour)."""
    for p in sorted(paths, key=len, reverse=True):
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", p)
        node = obj
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node.get(part, {})
        last = parts[-1]
        if isinstance(node, dict):
            node.pop(last, None)
