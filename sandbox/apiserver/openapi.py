"""OpenAPI v2 (/openapi/v2) and v3 (/openapi/v3...) documents for every served type.

Built from the resource registry, so a type added there is published here: built-ins take
kube-apiserver v1.31's definitions (sandbox/data/openapi-core.json), custom resources the CRD's
schema wrapped as apiextensions-apiserver wraps it (definition `io.ray.v1.RayCluster`,
`x-kubernetes-group-version-kind`, `metadata` -> ObjectMeta). Paths carry the operations with
their parameters (kubectl looks for `fieldValidation` on PATCH to send it instead of validating
client side) and PATCH request bodies (kubectl computes a strategic merge patch only where
`application/strategic-merge-patch+json` is accepted: built-ins, not CRDs).

client-go asks /openapi/v2 for protobuf only (application/com.github.proto-openapi.spec.v2@v1.0
+protobuf) and has no JSON fallback; the sandbox cannot encode that, so it answers such a request
406 Not Acceptable (kubectl 1.37 then works from v3: `apply` patches CRDs with a JSON merge
patch, as it does against a real cluster, and validation and `explain` use v3). JSON is served
to whoever asks for it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from functools import lru_cache

from .resources import ALL_VERBS, ResourceType, core_definitions

VERSION = "v1.31.6"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
OBJECT_META = META + "ObjectMeta"
LIST_META = META + "ListMeta"
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
SMP = "application/strategic-merge-patch+json"
_API_VERSION_DOC = ("APIVersion defines the versioned schema of this representation of an object. Servers should "
                    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
                    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources")
_KIND_DOC = ("Kind is a string value representing the REST resource this object represents. Servers may infer this "
             "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
             "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")
_METADATA_DOC = ("Standard object's metadata. More info: "
                 "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")


def _operations() -> dict:
    from .resources import DATA_DIR
    return _load(str(DATA_DIR / "openapi-core.json"))["operations"]


@lru_cache(maxsize=1)
def _load(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


# --- definitions -------------------------------------------------------------------

def _reversed_group(group: str) -> str:
    return ".".join(reversed(group.split(".")))


def _crd_definition(rt: ResourceType) -> dict:
    """The CRD's schema as apiextensions-apiserver publishes it (v2-style refs)."""
    d = copy.deepcopy(rt.schema)
    props = d.setdefault("properties", {})
    props["apiVersion"] = {"description": _API_VERSION_DOC, "type": "string"}
    props["kind"] = {"description": _KIND_DOC, "type": "string"}
    props["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}", "description": _METADATA_DOC}
    d["type"] = "object"
    d["x-kubernetes-group-version-kind"] = [{"group": rt.group, "kind": rt.kind, "version": rt.version}]
    return d


def _crd_list_definition(rt: ResourceType, item: str) -> dict:
    return {
        "description": f"{rt.kind}List is a list of {rt.kind}",
        "properties": {
            "apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
            "items": {"description": f"List of {rt.plural}. More info: "
                      "https://git.k8s.io/community/contributors/devel/api-conventions.md",
                      "items": {"$ref": f"#/definitions/{item}"}, "type": "array"},
            "kind": {"description": _KIND_DOC, "type": "string"},
            "metadata": {"$ref": f"#/definitions/{LIST_META}",
                         "description": "Standard list metadata. More info: "
                         "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"},
        },
        "required": ["items"],
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": rt.group, "kind": rt.kind + "List", "version": rt.version}],
    }


def _type_definitions(rt: ResourceType) -> tuple[str | None, str | None, dict]:
    """(object definition name, list definition name, definitions they bring)."""
    if not rt.builtin:
        name = rt.definition
        list_name = f"{_reversed_group(rt.group)}.{rt.version}.{rt.kind}List"
        return name, list_name, {name: _crd_definition(rt), list_name: _crd_list_definition(rt, name)}
    defs = core_definitions()
    name = rt.definition
    if name is None:
        return None, None, {}
    list_name = name + "List" if name + "List" in defs else None
    out = {name: defs[name]}
    if list_name:
        out[list_name] = defs[list_name]
    return name, list_name, out


def _closure(defs: dict) -> dict:
    """`defs` plus every core definition they reference."""
    core = core_definitions()
    out = dict(defs)
    todo = list(defs.values())
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in out and name in core:
                    out[name] = core[name]
                    todo.append(core[name])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return dict(sorted(out.items()))


# --- operations --------------------------------------------------------------------

def _op_group(group: str) -> str:
    """operationId's group part as kube-openapi builds it: "" -> Core, ray.io -> RayIo."""
    if not group:
        return "Core"
    group = group.removesuffix(".k8s.io")
    words = [w for part in group.split(".") for w in part.split("-")]
    return "".join(w[:1].upper() + w[1:] for w in words)


def _params(kind: str, rt: ResourceType) -> list[dict]:
    out = []
    for p in _operations()[kind]["parameters"]:
        p = dict(p)
        if p["name"] == "name" and p["in"] == "path":
            p["description"] = f"name of the {rt.kind}"
        if p["name"] == "namespace" and not rt.namespaced:
            continue
        out.append(p)
    return out


def _paths(rt: ResourceType, obj: str | None, lst: str | None) -> dict[str, dict]:
    """Swagger 2.0 path items for one resource type (converted to v3 below)."""
    base = f"/api/{rt.version}" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    ns = "/namespaces/{namespace}" if rt.namespaced else ""
    coll = f"{base}{ns}/{rt.plural}"
    item = coll + "/{name}"
    # access and token reviews are create-only (kube-apiserver serves only POST for them)
    verbs = set(getattr(rt, "verbs", None) or (["create"] if rt.kind.endswith("Review") else ALL_VERBS))
    gvk = {"group": rt.group, "kind": rt.kind, "version": rt.version}
    builtin = rt.builtin
    scope = "Namespaced" if rt.namespaced else ""
    who = f"{_op_group(rt.group)}{rt.version[:1].upper()}{rt.version[1:]}"
    tag = f"{(rt.group.removesuffix('.k8s.io') or 'core').replace('.', '')}_{rt.version}"
    produces = ["application/json", "application/yaml"] + (["application/vnd.kubernetes.protobuf"] if builtin else [])

    def ref(name):
        return {"$ref": f"#/definitions/{name}"} if name else {"type": "object"}

    def op(kind, action, op_id, desc, response, body=None, codes=("200",), extra_consumes=None):
        o = {"description": desc, "operationId": op_id, "tags": [tag], "schemes": ["https"],
             "consumes": extra_consumes or _operations()[kind]["consumes"], "produces": produces,
             "parameters": ([body] if body else []) + _params(kind, rt),
             "responses": {**{c: {"description": {"200": "OK", "201": "Created", "202": "Accepted"}[c],
                                  "schema": response} for c in codes}, "401": {"description": "Unauthorized"}},
             "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
        return o

    body = {"in": "body", "name": "body", "required": True, "schema": ref(obj)}
    delete_body = {"in": "body", "name": "body", "schema": {"$ref": f"#/definitions/{META}DeleteOptions"}}
    patch_body = {"in": "body", "name": "body", "required": True, "schema": {"$ref": f"#/definitions/{META}Patch"}}
    status = {"$ref": f"#/definitions/{META}Status"}
    paths: dict[str, dict] = {}
    c: dict = {}
    if "list" in verbs:
        c["get"] = op("list", "list", f"list{who}{scope}{rt.kind}", f"list or watch objects of kind {rt.kind}", ref(lst))
        c["get"]["produces"] = produces + ["application/json;stream=watch"]
    if "create" in verbs:
        c["post"] = op("create", "post", f"create{who}{scope}{rt.kind}", f"create a {rt.kind}", ref(obj), body,
                       ("200", "201", "202"))
    if "deletecollection" in verbs:
        c["delete"] = op("deletecollection", "deletecollection", f"delete{who}Collection{scope}{rt.kind}",
                         f"delete collection of {rt.kind}", status, delete_body)
    if c:
        paths[coll] = c
    i: dict = {}
    if "get" in verbs:
        i["get"] = op("read", "get", f"read{who}{scope}{rt.kind}", f"read the specified {rt.kind}", ref(obj))
    if "update" in verbs:
        i["put"] = op("replace", "put", f"replace{who}{scope}{rt.kind}", f"replace the specified {rt.kind}", ref(obj),
                      body, ("200", "201"))
    if "patch" in verbs:
        i["patch"] = op("patch", "patch", f"patch{who}{scope}{rt.kind}", f"partially update the specified {rt.kind}",
                        ref(obj), patch_body, ("200", "201"),
                        PATCH_TYPES[:2] + ([SMP] if builtin else []) + PATCH_TYPES[2:])
    if "delete" in verbs:
        i["delete"] = op("delete", "delete", f"delete{who}{scope}{rt.kind}", f"delete a {rt.kind}",
                         ref(obj) if rt.group or rt.plural in ("pods", "services", "namespaces") else status,
                         delete_body, ("200", "202"))
    if i:
        paths[item] = i
    if rt.namespaced and "list" in verbs:
        paths[f"{base}/{rt.plural}"] = {"get": {
            **op("listall", "list", f"list{who}{rt.kind}ForAllNamespaces", f"list or watch objects of kind {rt.kind}",
                 ref(lst)), "produces": produces + ["application/json;stream=watch"]}}
    for sub in rt.subresources:
        if sub == "log":
            paths[f"{item}/log"] = {"get": {
                **op("log", "get", f"read{who}{scope}{rt.kind}Log", f"read log of the specified {rt.kind}",
                     {"type": "string"}), "produces": ["text/plain", "application/json", "application/yaml"]}}
        elif sub in ("status", "scale"):
            s = {"get": op("read", "get", f"read{who}{scope}{rt.kind}Status", f"read status of the specified {rt.kind}",
                           ref(obj)),
                 "put": op("replace", "put", f"replace{who}{scope}{rt.kind}Status",
                           f"replace status of the specified {rt.kind}", ref(obj), body, ("200", "201")),
                 "patch": op("patch", "patch", f"patch{who}{scope}{rt.kind}Status",
                             f"partially update status of the specified {rt.kind}", ref(obj), patch_body, ("200", "201"),
                             PATCH_TYPES[:2] + ([SMP] if builtin else []) + PATCH_TYPES[2:])}
            if sub == "status":
                paths[f"{item}/status"] = s
    return paths


# --- documents ---------------------------------------------------------------------

@lru_cache(maxsize=8)
def _spec(types: tuple[ResourceType, ...]) -> tuple[dict, dict]:
    """(paths, definitions) of every served type, Swagger 2.0 style."""
    paths: dict[str, dict] = {}
    defs: dict[str, dict] = {}
    for rt in types:
        obj, lst, d = _type_definitions(rt)
        defs.update(d)
        paths.update(_paths(rt, obj, lst))
    for extra in ("Status", "DeleteOptions", "Patch", "WatchEvent"):
        defs.setdefault(META + extra, core_definitions()[META + extra])
    return paths, _closure(defs)


def v2(registry) -> dict:
    """The Swagger 2.0 document (/openapi/v2, JSON)."""
    paths, defs = _spec(tuple(registry.types))
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": VERSION},
            "paths": dict(sorted(paths.items())), "definitions": {n: _v2_schema(d) for n, d in defs.items()},
            "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "in": "header",
                                                    "name": "authorization", "type": "apiKey"}},
            "security": [{"BearerToken": []}]}


def _v2_schema(node):
    """What Swagger 2.0 cannot say is dropped, as apiextensions-apiserver drops it for v2."""
    if isinstance(node, dict):
        out = {k: _v2_schema(v) for k, v in node.items() if k not in ("nullable", "anyOf", "oneOf", "allOf", "not")}
        return out
    if isinstance(node, list):
        return [_v2_schema(v) for v in node]
    return node


def _v3_schema(node):
    """v2 `$ref`s as v3 refs; a ref with siblings becomes allOf, as kube-openapi writes it."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            target = {"$ref": "#/components/schemas/" + ref.rsplit("/", 1)[-1]}
            rest = {k: _v3_schema(v) for k, v in node.items() if k != "$ref"}
            return {"allOf": [target], **rest} if rest else target
        return {k: _v3_schema(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_v3_schema(v) for v in node]
    return node


# kube-openapi publishes these in v3 with the JSON types they accept (v2 could only say string)
_V3_ONE_OF = {"io.k8s.apimachinery.pkg.api.resource.Quantity": [{"type": "string"}, {"type": "number"}],
              "io.k8s.apimachinery.pkg.util.intstr.IntOrString": [{"type": "integer"}, {"type": "string"}]}


def _v3_definition(name: str, d: dict) -> dict:
    d = _v3_schema(d)
    if name in _V3_ONE_OF:
        d = {k: v for k, v in d.items() if k != "type"}
        d["oneOf"] = _V3_ONE_OF[name]
    return d


def _v3_param(p: dict) -> dict:
    out = {k: p[k] for k in ("name", "in", "description", "required") if k in p}
    if p["in"] == "path":
        out["required"] = True
    out["schema"] = {k: p[k] for k in ("type", "uniqueItems") if k in p}
    return out


def _v3_operation(op: dict) -> dict:
    out = {k: op[k] for k in ("description", "operationId", "tags", "x-kubernetes-action",
                              "x-kubernetes-group-version-kind") if k in op}
    params = []
    for p in op["parameters"]:
        if p["in"] == "body":
            out["requestBody"] = {"content": {c: {"schema": _v3_schema(p["schema"])} for c in op["consumes"]},
                                  **({"required": True} if p.get("required") else {})}
        else:
            params.append(_v3_param(p))
    if params:
        out["parameters"] = params
    responses = {}
    for code, r in op["responses"].items():
        responses[code] = {"description": r["description"]}
        if "schema" in r:
            responses[code]["content"] = {c: {"schema": _v3_schema(r["schema"])} for c in op["produces"]}
    out["responses"] = responses
    return out


def group_versions(registry) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for t in registry.types:
        if (t.group, t.version) not in seen:
            seen.append((t.group, t.version))
    return seen


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


@lru_cache(maxsize=64)
def _v3_cached(types: tuple[ResourceType, ...], group: str, version: str) -> tuple[dict, str]:
    chosen = tuple(t for t in types if (t.group, t.version) == (group, version))
    paths, defs = _spec(chosen)
    doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION},
           "paths": {p: {m: _v3_operation(o) for m, o in item.items()} for p, item in sorted(paths.items())},
           "components": {"schemas": {n: _v3_definition(n, d) for n, d in defs.items()},
                          "securitySchemes": {"BearerToken": {"description": "Bearer Token authentication",
                                                              "in": "header", "name": "authorization",
                                                              "type": "apiKey"}}}}
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    return doc, hashlib.sha512(data.encode()).hexdigest().upper()


def v3_doc(registry, group: str, version: str) -> dict | None:
    """The OpenAPI 3.0 document of one group/version (/openapi/v3/apis/<group>/<version>)."""
    if (group, version) not in group_versions(registry):
        return None
    return _v3_cached(tuple(registry.types), group, version)[0]


def v3_hash(registry, group: str, version: str) -> str:
    return _v3_cached(tuple(registry.types), group, version)[1]


def v3_index(registry) -> dict:
    """/openapi/v3: where each group/version's document is, with its hash (clients cache by it)."""
    return {"paths": {_prefix(g, v): {"serverRelativeURL": f"/openapi/v3/{_prefix(g, v)}?hash={v3_hash(registry, g, v)}"}
                      for g, v in group_versions(registry)}}


# --- HTTP --------------------------------------------------------------------------

def serve(registry, path: str, query: dict, accept: str) -> tuple[int, bytes, str, dict] | None:
    """Answer GET /openapi/...: (status, body, content type, headers), or None if not ours."""
    path = path.rstrip("/")
    if path == "/openapi/v2":
        wants = [a.split(";")[0].strip() for a in (accept or "").split(",") if a.strip()]
        if wants and not any(w in ("application/json", "*/*", "application/*") for w in wants):
            return _not_acceptable(PROTOBUF_V2 if PROTOBUF_V2 in wants else accept)
        return 200, json.dumps(v2(registry), separators=(",", ":")).encode(), "application/json", {}
    if path == "/openapi/v3":
        return 200, json.dumps(v3_index(registry)).encode(), "application/json", {}
    if path.startswith("/openapi/v3/"):
        prefix = path[len("/openapi/v3/"):]
        parts = prefix.split("/")
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        doc = v3_doc(registry, group, version)
        if doc is None:
            return None
        etag = v3_hash(registry, group, version)
        asked = (query.get("hash") or [""])[0]
        if asked and asked != etag:
            # kube-openapi's handler3: a stale hash is redirected to the current one
            return 301, b"", "text/plain", {"Location": f"{path}?hash={etag}"}
        headers = {"Etag": f'"{etag}"'}
        headers["Cache-Control"] = "public, immutable" if asked else "no-cache, private"
        return 200, json.dumps(doc, separators=(",", ":")).encode(), "application/json", headers
    return None


def _not_acceptable(what: str) -> tuple[int, bytes, str, dict]:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": f"the sandbox serves /openapi/v2 as application/json only, not {what}",
              "reason": "NotAcceptable", "code": 406}
    return 406, json.dumps(status).encode(), "application/json", {}
