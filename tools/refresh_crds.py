"""Regenerate the API definitions the sandbox serves (sandbox/data/) from upstream sources.

    python tools/refresh_crds.py SRC

SRC holds the upstream files, named as below (take them from the tags named, e.g.
`git -C kuberay show v1.4.2:ray-operator/config/crd/bases/ray.io_rayclusters.yaml`). Each part
is refreshed from what SRC holds: the CRD files there are converted (the other files in
sandbox/data/crds are left as they are; delete one the sandbox no longer serves by hand), the
OpenAPI definitions need swagger.json, the protobuf tables the *.proto files and swagger.json.

  ray.io_rayclusters.yaml            ray-project/kuberay v1.4.2, ray-operator/config/crd/bases/
  ray.io_rayjobs.yaml                (both)
  workload.codeflare.dev_appwrappers.yaml   project-codeflare/codeflare-operator config/crd/crd-appwrapper.yml
  datasciencepipelinesapplications.opendatahub.io_datasciencepipelinesapplications.yaml
                                     opendatahub-io/data-science-pipelines-operator config/crd/bases/
  argoproj.io_workflows.yaml         argoproj/argo-workflows v3.6.12 manifests/base/crds/minimal/ (the
                                     minimal CRD, schema-less spec and status, as DSPO installs it)
  kueue.x-k8s.io_<plural>.yaml       kubernetes-sigs/kueue v0.11.6, config/components/crd/bases/
                                     (clusterqueues, localqueues, resourceflavors, workloads,
                                     workloadpriorityclasses;
                                     identical through v0.11.9; v1beta1 is the only version)
  gateway.networking.k8s.io_<plural>.yaml   openshift/cluster-ingress-operator release-4.19 (5b17879),
                                     pkg/manifests/assets/gateway-api/ (httproutes, gateways,
                                     referencegrants): what OpenShift 4.19 installs, Gateway API
                                     v1.2.1 standard channel (bundle-version annotation), copied from
                                     upstream main in Oct 2024, so beside the v1.2.1 tag's schema it
                                     has HTTPRequestMirrorFilter percent/fraction and
                                     allowedRoutes.namespaces.from "None"
  swagger.json                       kubernetes v1.31.0 api/openapi-spec/swagger.json
                                     (kubernetes-client/python v31.0.0 kubernetes/swagger.json.unprocessed)
  openshift-openapi.json             openshift/api release-4.18 openapi/openapi.json (Route)
  *.proto                            generated.proto of k8s.io/api v0.31.x core/v1, authorization/v1,
                                     authentication/v1 and k8s.io/apimachinery v0.31.x
                                     pkg/apis/meta/v1, pkg/runtime, pkg/util/intstr, pkg/api/resource

It writes:
  sandbox/data/crds/<plural>.<group>.json  per CRD: names, scope, and of the served version its
      schema (descriptions kept, for `kubectl explain`), subresources and additionalPrinterColumns
  sandbox/data/openapi-core.json  the OpenAPI v2 definitions of the built-in types the sandbox serves
      (and of those it may serve: nodes, review types), closed over $ref, descriptions kept
  sandbox/data/protobuf-core.json  field tables (number -> name, type) of the protobuf messages of those
      built-in types, for sandbox/apiserver/protobuf.py's wire decoder
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "sandbox" / "data"
sys.path.insert(0, str(ROOT))

from kfp_ray_sandbox.apiserver.resources import served_crd_version  # noqa: E402

SOURCES = {
    "ray.io": "ray-project/kuberay v1.4.2 ray-operator/config/crd/bases",
    "kueue.x-k8s.io": "kubernetes-sigs/kueue v0.11.6 config/components/crd/bases",
    "workload.codeflare.dev": "project-codeflare/codeflare-operator 7fc158c config/crd/crd-appwrapper.yml "
                              "(appwrapper v1.1.2)",
    "datasciencepipelinesapplications.opendatahub.io": "opendatahub-io/data-science-pipelines-operator 5e01e73 "
                                                       "config/crd/bases",
    "gateway.networking.k8s.io": "openshift/cluster-ingress-operator 5b17879 (release-4.19; Gateway API v1.2.1, "
                                 "standard channel) pkg/manifests/assets/gateway-api",
    "argoproj.io": "argoproj/argo-workflows v3.6.12 manifests/base/crds/minimal (what RHOAI's pipelines operator "
                   "installs: data-science-pipelines-operator config/argo/crd.workflows.yaml)",
}

# Built-in kinds whose definitions (and all they reference) are kept: what the sandbox
# serves, what other parts may serve (nodes, access reviews, token reviews), and the
# meta types the OpenAPI paths refer to.
CORE_KINDS = {
    ("", "v1"): ["Namespace", "Pod", "Service", "Secret", "ConfigMap", "Event", "ServiceAccount", "Node",
                 "Binding", "Endpoints", "ResourceQuota", "LimitRange"],
    ("authorization.k8s.io", "v1"): ["SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview",
                                     "LocalSubjectAccessReview"],
    ("authentication.k8s.io", "v1"): ["SelfSubjectReview", "TokenReview", "TokenRequest"],
    ("policy", "v1"): ["Eviction"],
    ("rbac.authorization.k8s.io", "v1"): ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"],
    ("networking.k8s.io", "v1"): ["NetworkPolicy"],
}
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
META_DEFS = ["Status", "DeleteOptions", "WatchEvent", "Patch", "APIResourceList", "APIGroupList", "APIGroup",
             "APIVersions", "Table", "PartialObjectMetadata", "PartialObjectMetadataList"]
ROUTE = "com.github.openshift.api.route.v1."

PROTO_ROOTS = ["k8s.io.api.core.v1." + k for k in CORE_KINDS[("", "v1")]] + \
    ["k8s.io.api.authorization.v1." + k for k in CORE_KINDS[("authorization.k8s.io", "v1")]] + \
    ["k8s.io.api.authentication.v1." + k for k in CORE_KINDS[("authentication.k8s.io", "v1")]] + \
    ["k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions", "k8s.io.apimachinery.pkg.runtime.Unknown"]


def _dump(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")


def crd_document(path: Path) -> tuple[str, dict] | None:
    """One upstream CRD file as the sandbox stores it: (file name, document), or None when the
    file is no CRD or does not serve the version the sandbox serves (served_crd_version)."""
    crd = yaml.safe_load(path.read_text())
    if (crd or {}).get("kind") != "CustomResourceDefinition":
        return None
    spec = crd["spec"]
    want = served_crd_version(spec["group"], spec["names"]["plural"])
    versions = [v for v in spec["versions"] if v["name"] == want and v.get("served", True)]
    if not versions:
        return None
    names = spec["names"]
    doc = {
        "source": f"{SOURCES.get(spec['group'], '?')}/{path.name}",
        "group": spec["group"],
        "kind": names["kind"],
        "listKind": names.get("listKind", names["kind"] + "List"),
        "plural": names["plural"],
        "singular": names.get("singular", names["kind"].lower()),
        "shortNames": names.get("shortNames", []),
        "categories": names.get("categories", []),
        "scope": spec["scope"],
        "versions": [
            {"name": v["name"], "subresources": sorted(v.get("subresources", {})),
             "additionalPrinterColumns": v.get("additionalPrinterColumns", []),
             "schema": v["schema"]["openAPIV3Schema"]}
            for v in versions
        ],
    }
    return f"{names['plural']}.{spec['group']}.json", doc


def refresh_crds(src: Path) -> None:
    out_dir = DATA / "crds"
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("*.yaml")):
        made = crd_document(path)
        if made is not None:
            _dump(out_dir / made[0], made[1])


def _closure(defs: dict, roots: list[str]) -> dict:
    seen: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in seen and name in defs:
                    seen.add(name)
                    walk(defs[name])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for r in roots:
        if r in defs and r not in seen:
            seen.add(r)
            walk(defs[r])
    return {n: defs[n] for n in sorted(seen)}


# Where the apiserver's operations on pods show each kind of operation's query parameters.
OPERATIONS = {
    "list": ("/api/v1/namespaces/{namespace}/pods", "get"),
    "create": ("/api/v1/namespaces/{namespace}/pods", "post"),
    "deletecollection": ("/api/v1/namespaces/{namespace}/pods", "delete"),
    "read": ("/api/v1/namespaces/{namespace}/pods/{name}", "get"),
    "replace": ("/api/v1/namespaces/{namespace}/pods/{name}", "put"),
    "patch": ("/api/v1/namespaces/{namespace}/pods/{name}", "patch"),
    "delete": ("/api/v1/namespaces/{namespace}/pods/{name}", "delete"),
    "log": ("/api/v1/namespaces/{namespace}/pods/{name}/log", "get"),
    "listall": ("/api/v1/pods", "get"),
}


def _operations(swagger: dict) -> dict:
    """Each operation kind's parameters (inlined, body excluded), consumes and produces."""
    shared = swagger["parameters"]

    def inline(params):
        out = []
        for p in params:
            p = shared[p["$ref"].rsplit("/", 1)[-1]] if "$ref" in p else p
            if p["in"] != "body":
                out.append(p)
        return out

    ops = {}
    for key, (path, method) in OPERATIONS.items():
        item = swagger["paths"][path]
        op = item[method]
        ops[key] = {"parameters": inline(item.get("parameters", []) + op.get("parameters", [])),
                    "consumes": op.get("consumes", []), "produces": op.get("produces", [])}
    return ops


def refresh_openapi(src: Path) -> None:
    swagger = json.loads((src / "swagger.json").read_text())
    defs = dict(swagger["definitions"])
    roots = []
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            kinds = CORE_KINDS.get((gvk["group"], gvk["version"]), [])
            if gvk["kind"] in kinds or gvk["kind"].removesuffix("List") in kinds:
                roots.append(name)
    roots += [META + n for n in META_DEFS]
    shift = src / "openshift-openapi.json"
    if shift.exists():
        odefs = json.loads(shift.read_text())["definitions"]
        for name, d in odefs.items():
            if name.startswith(ROUTE):
                d = dict(d)
                kind = name.rsplit(".", 1)[-1]
                if kind in ("Route", "RouteList"):
                    d["x-kubernetes-group-version-kind"] = [{"group": "route.openshift.io", "kind": kind,
                                                             "version": "v1"}]
                defs[name] = d
        roots += [ROUTE + "Route", ROUTE + "RouteList"]
    out = _closure(defs, roots)
    _dump(DATA / "openapi-core.json", {
        "source": "kubernetes v1.31.0 api/openapi-spec/swagger.json; openshift/api release-4.18 openapi/openapi.json",
        "operations": _operations(swagger),
        "definitions": out})


_FIELD = re.compile(r"^\s*(optional|repeated|required)?\s*(map<\s*(\w+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)")


def _parse_proto(text: str) -> tuple[str, dict]:
    """Messages of one generated.proto: {full name: {number: [name, type, label]}}."""
    package = re.search(r"^package\s+([\w.]+);", text, re.M).group(1)
    messages: dict[str, dict] = {}
    stack: list[str] = []
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"message\s+(\w+)\s*\{", line)
        if m:
            stack.append(m.group(1))
            messages[".".join([package] + stack)] = {}
            continue
        if line.startswith("}") and stack:
            stack.pop()
            continue
        f = _FIELD.match(line)
        if f and stack:
            label, typ, key_t, val_t, name, num = f.groups()
            label = "map" if key_t else (label or "optional")
            typ = val_t if key_t else typ
            messages[".".join([package] + stack)][num] = [name, typ, label]
    return package, messages


SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float", "sint32", "sint64",
           "fixed32", "fixed64"}


def _swagger_name(proto_name: str) -> str:
    """k8s.io.api.core.v1.Pod -> io.k8s.api.core.v1.Pod (and the same for apimachinery)."""
    return "io.k8s." + proto_name.removeprefix("k8s.io.")


def refresh_protobuf(src: Path) -> None:
    messages: dict[str, dict] = {}
    for path in sorted(src.glob("*.proto")):
        package, msgs = _parse_proto(path.read_text())
        for full, fields in msgs.items():
            for spec in fields.values():  # qualify local type names
                typ = spec[1] = spec[1].lstrip(".")
                if typ not in SCALARS and "." not in typ:
                    spec[1] = f"{package}.{typ}"
            messages[full] = fields
    keep: dict[str, dict] = {}

    def walk(name: str) -> None:
        if name in keep or name not in messages:
            return
        keep[name] = messages[name]
        for _, typ, _ in messages[name].values():
            if typ not in SCALARS:
                walk(typ)

    for root in PROTO_ROOTS:
        walk(root)
    missing = [r for r in PROTO_ROOTS if r not in keep]
    if missing:
        raise SystemExit(f"proto messages not found in {src}: {missing}")
    # Embedded Go structs (`json:",inline"`, e.g. Probe.ProbeHandler, Volume.VolumeSource) are one
    # field in protobuf but their fields sit in the outer JSON object: label them "inline".
    defs = json.loads((src / "swagger.json").read_text())["definitions"]
    for name, fields in keep.items():
        props = defs.get(_swagger_name(name), {}).get("properties")
        if not props:
            continue
        for spec in fields.values():
            if spec[0] not in props and spec[1] not in SCALARS and spec[2] == "optional":
                spec[2] = "inline"
    _dump(DATA / "protobuf-core.json", {
        "source": "generated.proto of k8s.io/api v0.31.9 (core/v1, authorization/v1, authentication/v1) and "
                  "k8s.io/apimachinery v0.31.9 (meta/v1, runtime, intstr, resource)",
        "messages": keep})


def main(src: str) -> None:
    path = Path(src)
    refresh_crds(path)
    if (path / "swagger.json").exists():
        refresh_openapi(path)
        if any(path.glob("*.proto")):
            refresh_protobuf(path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
