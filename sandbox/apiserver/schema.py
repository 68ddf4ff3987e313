"""Decoding an object against its schema, as kube-apiserver v1.31 does before it stores it.

One pass does what the apiserver's decoder and validation do, in its order:
  1. unknown fields are pruned and their paths recorded (the caller answers them per the request's
     `fieldValidation`: Ignore drops them silently, Warn (the default) adds a `Warning` per field,
     Strict refuses the request with 400 "strict decoding error: unknown field ..."); nulls in
     fields that are not `nullable` are dropped (apiextensions-apiserver pruning/defaulting);
  2. custom resources get their structural schema's `default`s (apiextensions-apiserver
     structural defaulting: an absent field with a default gets it, then its children theirs);
  3. values are validated.

Custom resources are validated against the CRD's openAPIV3Schema: types, int-or-string,
preserve-unknown-fields, maps, required, enum, bounds, pattern, lengths, anyOf, with the
apiserver's wording (422 Invalid). CEL rules (x-kubernetes-validations) are not evaluated.
Built-in types are checked against their OpenAPI v2 definitions (sandbox/data/openapi-core.json):
a value of the wrong JSON type is what Go's JSON decoder refuses (400 "... cannot be handled as
a Pod: json: cannot unmarshal string into Go struct field ..."), a missing required field is 422.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field

from . import errors

_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
               float: "number", type(None): "null"}
# Go's json names the JSON value it could not store (encoding/json UnmarshalTypeError.Value).
_GO_VALUE = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


@dataclass
class Outcome:
    """What decoding found. The object itself is pruned (and defaulted) in place."""

    unknown: list[str] = field(default_factory=list)        # pruned unknown fields, e.g. "spec.x"
    errors: list[tuple[str, str]] = field(default_factory=list)  # 422 causes: (field, message)
    decode_error: str | None = None                        # built-in: what Go's JSON decoder refuses

    def strict_errors(self, duplicates: list[str] = ()) -> list[str]:
        return [f'duplicate field "{p}"' for p in duplicates] + [f'unknown field "{p}"' for p in self.unknown]


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


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- JSON with duplicate detection -------------------------------------------------

class _Pairs(dict):
    dups: list[str]


def _pairs(items):
    d = _Pairs()
    d.dups = []
    for k, v in items:
        if k in d:
            d.dups.append(k)
        d[k] = v
    return d


def loads(raw: bytes | str) -> tuple[object, list[str]]:
    """Parse JSON; also return the paths of duplicate fields (the last value wins, as in Go)."""
    value = json.loads(raw, object_pairs_hook=_pairs)
    dups: list[str] = []
    return _plain(value, "", dups), dups


def _plain(value, path: str, dups: list[str]):
    if isinstance(value, dict):
        for k in getattr(value, "dups", ()):
            dups.append(_join(path, k))
        return {k: _plain(v, _join(path, k), dups) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{path}[{i}]", dups) for i, v in enumerate(value)]
    return value


# --- schema resolution -------------------------------------------------------------

def _definitions() -> dict:
    from .resources import core_definitions
    return core_definitions()


def _resolve(schema: dict) -> tuple[dict, str | None]:
    """Follow `$ref` (and v3 `allOf: [{$ref}]`) to the definition; returns it and its name."""
    name = None
    while True:
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf") or ()) == 1 and "$ref" in schema["allOf"][0]:
            ref = schema["allOf"][0]["$ref"]
        if ref is None:
            return schema, name
        name = ref.rsplit("/", 1)[-1]
        schema = _definitions()[name]


def _go_type(schema: dict) -> str:
    """The Go type a built-in field decodes into, as encoding/json names it."""
    resolved, name = _resolve(schema)
    if name:
        if name.endswith("resource.Quantity"):
            return "resource.Quantity"
        if name.endswith("intstr.IntOrString"):
            return "intstr.IntOrString"
        pkg, _, kind = name.rpartition(".")
        return f"{pkg.rsplit('.', 1)[-1]}.{kind}"
    typ = resolved.get("type")
    if typ == "array":
        return "[]" + _go_type(resolved.get("items") or {})
    if typ == "object" and isinstance(resolved.get("additionalProperties"), dict):
        return "map[string]" + _go_type(resolved["additionalProperties"])
    if typ == "integer":
        return resolved.get("format") or "int"
    return {"string": "string", "boolean": "bool", "number": "float64"}.get(typ, "interface {}")


def _struct_name(name: str | None) -> str:
    return name.rsplit(".", 1)[-1] if name else ""


# --- the decoding pass ---------------------------------------------------------------

OBJECT_META = {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}


def check(obj: dict, schema: dict, *, builtin: bool = False) -> Outcome:
    """Prune, default and validate `obj` (a whole object) against its type's schema.

    `schema`: a CRD's openAPIV3Schema, or for a built-in type `{"$ref": "#/definitions/<name>"}`.
    `metadata` is checked against ObjectMeta in both cases.
    """
    out = Outcome()
    root, root_name = _resolve(schema)
    _Walker(out, builtin).walk(obj, schema, "", root_name, "", root=True)
    if not builtin:
        out.unknown.sort()  # apiextensions-apiserver reports the pruned paths sorted
    if not builtin and out.decode_error is None:
        apply_defaults(obj, root)
    if out.decode_error is None:
        _Validator(out.errors, builtin).walk(obj, schema, "", root=True)
    return out


class _Walker:
    """Step 1: prune unknown fields and nulls; for built-ins, find what Go's decoder refuses."""

    def __init__(self, out: Outcome, builtin: bool):
        self.out, self.builtin = out, builtin

    def type_error(self, value, schema: dict, gopath: str, struct: str | None) -> None:
        """Go's UnmarshalTypeError: the innermost struct and the struct fields from the root."""
        if self.out.decode_error is None:
            value_kind = _GO_VALUE.get(type(value), "value")
            if isinstance(value, float) and not value.is_integer():
                value_kind = f"number {value}"
            self.out.decode_error = (f"json: cannot unmarshal {value_kind} into Go struct field "
                                     f"{_struct_name(struct)}.{gopath} of type {_go_type(schema)}")

    def walk(self, value, schema: dict, path: str, struct: str | None, gopath: str, root: bool = False) -> None:
        resolved, name = _resolve(schema)
        if name and name.endswith(("resource.Quantity", "intstr.IntOrString")):
            ok = isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))
            if name.endswith("IntOrString") and isinstance(value, float) and not value.is_integer():
                ok = False
            if not ok:
                self.type_error(value, schema, gopath, struct)
            return
        if self.builtin:
            typ = resolved.get("type")
            if typ and not _matches_type(value, typ) and not (typ == "number" and _matches_type(value, "integer")):
                self.type_error(value, schema, gopath, struct)
                return
        if isinstance(value, dict):
            self.walk_object(value, resolved, path, name or struct, gopath, root)
        elif isinstance(value, list) and isinstance(resolved.get("items"), dict):
            for i, item in enumerate(value):
                if item is not None:
                    self.walk(item, resolved["items"], f"{path}[{i}]", struct, gopath)

    def walk_object(self, value: dict, schema: dict, path: str, struct: str | None, gopath: str, root: bool) -> None:
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        # A built-in `type: object` without properties (RawExtension, FieldsV1) is opaque JSON;
        # in a structural CRD schema it is an object whose every field is pruned.
        opaque = props is None and extra in (None, True) and (self.builtin or preserve or extra is True)
        for key in list(value):
            child = value[key]
            cpath = _join(path, key)
            if root and key == "metadata":
                if child is None:
                    del value[key]
                else:  # ObjectMeta is a Go struct for custom resources too
                    _Walker(self.out, True).walk(child, OBJECT_META, cpath, struct, "metadata")
                continue
            child_gopath = gopath
            if props is not None and key in props:
                sub = props[key]
                child_gopath = _join(gopath, key)  # map keys are not in Go's field path
            elif isinstance(extra, dict):
                sub = extra
            elif opaque or preserve:
                continue
            else:
                self.out.unknown.append(cpath)
                del value[key]
                continue
            if child is None:
                if not _resolve(sub)[0].get("nullable"):
                    del value[key]
                continue
            self.walk(child, sub, cpath, struct, child_gopath)


def apply_defaults(value, schema: dict) -> None:
    """Structural defaulting: absent fields with a `default` get it, then defaults below."""
    schema, _ = _resolve(schema)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            sub, _ = _resolve(sub)
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            if key in props:
                apply_defaults(child, props[key])
            elif isinstance(extra, dict):
                apply_defaults(child, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


class _Validator:
    """Step 3: the structural schema's constraints, worded as the apiserver words them."""

    def __init__(self, errors: list, builtin: bool):
        self.errors, self.builtin = errors, builtin

    def walk(self, value, schema: dict, path: str, root: bool = False) -> None:
        schema, name = _resolve(schema)
        if self.builtin:
            self.walk_builtin(value, schema, path, root)
            return
        errors = self.errors
        if value is None:
            return  # only nullable fields keep a null
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
                    self.walk(v, items, f"{path}[{i}]")
        if isinstance(value, dict):
            self.walk_fields(value, schema, path, root)

    def walk_fields(self, value: dict, schema: dict, path: str, root: bool) -> None:
        props = schema.get("properties") or {}
        for req in schema.get("required", []):
            if req not in value:
                self.errors.append((_join(path, req), "Required value"))
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if root and k == "metadata":
                continue
            if k in props:
                self.walk(v, props[k], _join(path, k))
            elif isinstance(extra, dict):
                self.walk(v, extra, _join(path, k))

    def walk_builtin(self, value, schema: dict, path: str, root: bool) -> None:
        """Built-ins: types were the decoder's business; here only required fields."""
        if isinstance(value, dict) and "properties" in schema:
            self.walk_fields(value, schema, path, root)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                self.walk(v, schema["items"], f"{path}[{i}]")
        elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
            for k, v in value.items():
                self.walk(v, schema["additionalProperties"], _join(path, k))


def _fits(value, schema: dict) -> bool:
    errs: list = []
    _Validator(errs, False).walk(value, schema, "")
    return not errs


# --- what the server answers ---------------------------------------------------------

def _schema_of(rt) -> dict | None:
    from .resources import builtin_schema
    return rt.schema if rt.schema is not None else builtin_schema(rt.group, rt.version, rt.kind)


def decode_fields(rt, obj: dict, query: dict, duplicates=(), patch: bool = False) -> tuple[list[str], list]:
    """Decode a create/update/patch result of type `rt` as kube-apiserver v1.31: returns (Warning
    texts, 422 causes) or raises the 400 the decoder answers.

    fieldValidation: absent or Warn (the apiserver's default since v1.23) warns per unknown or
    duplicate field, Ignore drops them silently, Strict answers 400 "strict decoding error"
    (for a create or update wrapped as "<Kind> in version ... cannot be handled as a <Kind>: ...",
    as handlers/rest.go transformDecodeError words it; a patch's plainly)."""
    sch = _schema_of(rt)
    if sch is None:
        return [], []
    mode = (query.get("fieldValidation") or [""])[0] or "Warn"
    found = check(obj, sch, builtin=rt.builtin)
    handled = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
    if found.decode_error:
        raise errors.bad_request(handled + found.decode_error)
    strict = found.strict_errors(list(duplicates))
    if strict and mode == "Strict":
        raise errors.bad_request(("" if patch else handled) + "strict decoding error: " + ", ".join(strict))
    return (strict if mode == "Warn" else []), found.errors


def refuse_undeclared(rt, body: dict, name: str, namespace: str | None) -> None:
    """Server-side apply refuses fields the schema lacks, whatever fieldValidation says: the
    apply patch is converted to a typed object first (k8s.io/apimachinery v0.31
    managedfields/internal/structuredmerge.go), and that plain error is a 500 with no reason."""
    sch = _schema_of(rt)
    if sch is None:
        return
    unknown = check(copy.deepcopy(body), sch, builtin=rt.builtin).unknown
    if unknown:
        gvk = f"{rt.api_version if rt.group else '/' + rt.version}, Kind={rt.kind}"
        where = "\n".join(f".{p}: field not declared in schema" for p in unknown)
        raise errors.ApiError(500, "", f"failed to create typed patch object ({namespace or ''}/{name}; {gvk}): {where}")
