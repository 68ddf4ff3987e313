"""The API resources the sandbox serves, and the discovery documents that list them.

Core resources are declared here; custom resources come from the real CRDs (KubeRay,
Kueue) shipped in sandbox/data/crds as compact JSON, so their schemas validate objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

CRD_DIR = Path(__file__).resolve().parent.parent / "data" / "crds"
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    schema: dict | None = field(default=None, compare=False, hash=False)
    verbs: tuple[str, ...] = tuple(ALL_VERBS)  # ("create",): a review, answered and never stored

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: one store per group and plural, whatever the version."""
        return (self.group, self.plural)


def _core(plural, kind, namespaced=True, subresources=(), short=()):
    return ResourceType("", "v1", plural, kind, namespaced, tuple(subresources), tuple(short))


CORE = [
    _core("namespaces", "Namespace", namespaced=False, subresources=["status"], short=["ns"]),
    _core("pods", "Pod", subresources=["status", "log"], short=["po"]),
    _core("services", "Service", subresources=["status"], short=["svc"]),
    _core("secrets", "Secret"),
    _core("configmaps", "ConfigMap", short=["cm"]),
    _core("events", "Event", short=["ev"]),
    _core("serviceaccounts", "ServiceAccount", short=["sa"]),
    _core("nodes", "Node", namespaced=False, subresources=["status"], short=["no"]),
]

# Reviews: created to ask a question, answered at once, never stored (sandbox/apiserver/reviews.py).
REVIEWS = [
    ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, verbs=("create",)),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, verbs=("create",)),
    ResourceType("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, verbs=("create",)),
]

ROUTE = ResourceType("route.openshift.io", "v1", "routes", "Route", True, ("status",))

# Which version of each CRD group the sandbox serves (the one our stack calls).
SERVED_CRD_VERSIONS = {"ray.io": "v1", "kueue.x-k8s.io": "v1beta1"}


@lru_cache(maxsize=1)
def crd_types() -> tuple[ResourceType, ...]:
    out = []
    for path in sorted(CRD_DIR.glob("*.json")):
        crd = json.loads(path.read_text())
        want = SERVED_CRD_VERSIONS.get(crd["group"])
        for v in crd["versions"]:
            if v["name"] != want:
                continue
            out.append(ResourceType(
                crd["group"], v["name"], crd["plural"], crd["kind"], crd["scope"] == "Namespaced",
                tuple(v.get("subresources", [])), tuple(crd.get("shortNames", [])), v["schema"]))
    return tuple(out)


class Registry:
    """Lookup of served resource types by (group, version, plural)."""

    def __init__(self, openshift: bool = True):
        types = list(CORE) + list(crd_types()) + list(REVIEWS)
        if openshift:
            types.append(ROUTE)
        self.types = types
        self._by_path = {(t.group, t.version, t.plural): t for t in types}
        self._by_kind = {(t.group, t.kind): t for t in types}

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, group: str, kind: str) -> ResourceType:
        return self._by_kind[(group, kind)]

    def get(self, group: str, plural: str) -> ResourceType:
        for t in self.types:
            if t.group == group and t.plural == plural:
                return t
        raise KeyError((group, plural))

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {g: list(vs) for g, vs in EXTRA_GROUPS.items()}
        for t in self.types:
            if t.group and t.version not in out.setdefault(t.group, []):
                out[t.group].append(t.version)
        return out

    # --- discovery documents -------------------------------------------------
    def api_versions(self) -> dict:
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}

    def _group_doc(self, group: str, versions: list[str]) -> dict:
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    def api_group_list(self) -> dict:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group_doc(g, vs) for g, vs in self.groups().items()]}

    def api_group(self, group: str) -> dict | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc(group, versions)}

    def resource_list(self, group: str, version: str) -> dict | None:
        types = [t for t in self.types if t.group == group and t.version == version]
        if not types and version not in EXTRA_GROUPS.get(group, []):
            return None
        resources = []
        for t in types:
            resources.append({"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                              "kind": t.kind, "verbs": list(t.verbs), "shortNames": list(t.short_names)})
            for sub in t.subresources:
                verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
                resources.append({"name": f"{t.plural}/{sub}", "singularName": "", "namespaced": t.namespaced,
                                  "kind": "Pod" if sub == "log" else t.kind, "verbs": verbs})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


# Groups the real cluster has but the sandbox only lists in discovery (authentication
# is what `TokenAuthentication.login()` probes).
EXTRA_GROUPS = {"authentication.k8s.io": ["v1"]}
