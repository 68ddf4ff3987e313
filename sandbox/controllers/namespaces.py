"""Namespace lifecycle, as kube-apiserver and kube-controller-manager v1.31 run it.

- Create (pkg/registry/core/namespace/strategy.go PrepareForCreate): status.phase Active,
  spec.finalizers ["kubernetes"], label kubernetes.io/metadata.name.
- DELETE (pkg/registry/core/namespace/storage): the namespace turns Terminating (see
  Store.delete); a second DELETE is refused with 409 while spec.finalizers remain.
- NamespaceLifecycle admission (plugin/pkg/admission/namespace/lifecycle): nothing new may
  be created in a Terminating namespace: 403 "unable to create new content in namespace X
  because it is being terminated" (also for controllers, which go through the store).
- The namespace controller (pkg/controller/namespace/deletion): deletes every namespaced
  object in it (pods gracefully, so the kubelet stops their Ray processes; objects with
  finalizers wait for them), reports what remains in status.conditions, and once nothing is
  left removes the `kubernetes` finalizer, which removes the namespace.
- OpenShift's cluster-policy-controller (openshift/cluster-policy-controller
  pkg/security/controller namespace_scc_allocation_controller.go, OpenShift 4.x defaults
  UIDAllocatorRange 1000000000-1999999999/10000, MCSAllocatorRange s0:/2): every namespace gets
  a block of 10000 UIDs and an SELinux MCS level, as the annotations the SCC admission reads
  (`openshift.io/sa.scc.uid-range` "1000000000/10000", `openshift.io/sa.scc.supplemental-groups`
  the same block, `openshift.io/sa.scc.mcs` "s0:c1,c0"). The controller writes them shortly
  after the namespace is created; the sandbox at its creation (SecurityAllocator).
"""

from __future__ import annotations

from ..apiserver.admission import admission_name, forbidden
from ..apiserver.store import now_rfc3339
from .base import Controller, log

FINALIZER = "kubernetes"
UID_RANGE = "openshift.io/sa.scc.uid-range"
SUPPLEMENTAL_GROUPS = "openshift.io/sa.scc.supplemental-groups"
MCS = "openshift.io/sa.scc.mcs"
UID_BASE, UID_BLOCK = 1_000_000_000, 10_000  # the allocator's range 1000000000-1999999999, blocks of 10000


def mcs_level(index: int) -> str:
    """The MCS level of block `index`: pairs of categories c<i>,c<j> (i > j), enumerated in order,
    two labels per namespace (s0:/2) as library-go's mcs.Range hands them out."""
    i = 1
    while index >= i:
        index -= i
        i += 1
    return f"s0:c{i},c{index}"


class SecurityAllocator:
    """cluster-policy-controller's namespace SCC allocation: the UID block, supplemental groups and
    MCS level annotations of a namespace, the first free block in creation order. Runs in the
    store's validation phase of a namespace create; `ensure` allocates for a namespace that has
    none yet (the SCC admission waits for them on a cluster)."""

    def __init__(self, store, registry):
        self.store = store
        self.ns_t = registry.get("", "namespaces")

    def _free_block(self) -> int:
        items, _ = self.store.list(self.ns_t)
        used = set()
        for ns in items:
            start = ((ns["metadata"].get("annotations") or {}).get(UID_RANGE) or "").split("/")[0]
            if start.isdigit():
                used.add((int(start) - UID_BASE) // UID_BLOCK)
        return next(i for i in range(len(used) + 1) if i not in used)

    def _annotate(self, obj: dict) -> dict:
        ann = obj["metadata"].setdefault("annotations", {})
        if UID_RANGE not in ann or MCS not in ann:
            block = self._free_block()
            ann.setdefault(UID_RANGE, f"{UID_BASE + block * UID_BLOCK}/{UID_BLOCK}")
            ann.setdefault(SUPPLEMENTAL_GROUPS, ann[UID_RANGE])
            ann.setdefault(MCS, mcs_level(block))
        return ann

    def __call__(self, rt, obj: dict) -> None:
        if rt.key == ("", "namespaces"):
            self._annotate(obj)

    def ensure(self, name: str) -> dict | None:
        """The namespace's annotations, allocated now if it has none; None if it does not exist."""
        with self.store.lock:
            ns = self.store.find(self.ns_t, None, name)
            if ns is None:
                return None
            ann = (ns["metadata"].get("annotations") or {})
            if UID_RANGE in ann and MCS in ann:
                return ann
            done = self.store.mutate(self.ns_t, None, name, self._annotate)
            return (done or ns)["metadata"].get("annotations") or {}


def prepare_namespace(rt, obj: dict) -> None:
    """PrepareForCreate of namespaces (runs in the store's validation phase)."""
    if rt.key != ("", "namespaces"):
        return
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    spec = obj.setdefault("spec", {})
    finalizers = list(spec.get("finalizers") or [])
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)
    spec["finalizers"] = finalizers
    obj["status"] = {"phase": "Active"}


class NamespaceLifecycle:
    """Admission: refuse creates in a namespace that is being terminated."""

    def __init__(self, store, registry):
        self.store = store
        self.ns_t = registry.get("", "namespaces")

    def __call__(self, rt, obj: dict) -> None:
        ns = (obj.get("metadata") or {}).get("namespace")
        if not rt.namespaced or not ns:
            return
        current = self.store.find(self.ns_t, None, ns)
        if current is None or (current.get("status") or {}).get("phase") != "Terminating":
            return
        raise forbidden(rt, admission_name(obj),
                        f"unable to create new content in namespace {ns} because it is being terminated",
                        [{"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
                          "field": "metadata.namespace"}])


def _condition(type_: str, status: str, reason: str, message: str, old: list) -> dict:
    prev = next((c for c in old if c.get("type") == type_), None)
    when = prev["lastTransitionTime"] if prev and prev.get("status") == status else now_rfc3339()
    return {"type": type_, "status": status, "lastTransitionTime": when, "reason": reason, "message": message}


class NamespaceController(Controller):
    name = "namespace-controller"

    def __init__(self, store, registry):
        super().__init__(store, registry)
        self.ns_t = self.rt("", "namespaces")

    def reconcile(self) -> None:
        namespaces, _ = self.store.list(self.ns_t)
        for ns in namespaces:
            if ns["metadata"].get("deletionTimestamp"):
                try:
                    self._terminate(ns)
                except Exception:  # one namespace never stops the others
                    log.exception("namespace-controller: deleting %s failed", ns["metadata"]["name"])

    def _namespaced_types(self) -> list:
        return [t for t in self.registry.types if t.namespaced]

    def _terminate(self, ns: dict) -> None:
        name = ns["metadata"]["name"]
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for rt in self._namespaced_types():
            items, _ = self.store.list(rt, name)
            for obj in items:
                if not obj["metadata"].get("deletionTimestamp"):
                    try:
                        obj = self.store.delete(rt, name, obj["metadata"]["name"])
                    except Exception:  # noqa: BLE001 - gone meanwhile
                        continue
                if self.store.find(rt, name, obj["metadata"]["name"]) is None:
                    continue
                key = f"{rt.plural}.{rt.group}"
                remaining[key] = remaining.get(key, 0) + 1
                for f in obj["metadata"].get("finalizers") or []:
                    finalizers[f] = finalizers.get(f, 0) + 1
        self._write_conditions(ns, remaining, finalizers)
        if remaining:
            return

        def finalize(obj):
            obj["spec"]["finalizers"] = [f for f in (obj.get("spec") or {}).get("finalizers") or [] if f != FINALIZER]
        self.store.mutate(self.ns_t, None, name, finalize)

    def _write_conditions(self, ns: dict, remaining: dict[str, int], finalizers: dict[str, int]) -> None:
        old = (ns.get("status") or {}).get("conditions") or []
        conds = [
            _condition("NamespaceDeletionDiscoveryFailure", "False", "ResourcesDiscovered",
                       "All resources successfully discovered", old),
            _condition("NamespaceDeletionGroupVersionParsingFailure", "False", "ParsedGroupVersions",
                       "All legacy kube types successfully parsed", old),
            _condition("NamespaceDeletionContentFailure", "False", "ContentDeleted",
                       "All content successfully deleted, may be waiting on finalization", old),
        ]
        if remaining:
            left = ", ".join(f"{k} has {n} resource instances" for k, n in sorted(remaining.items()))
            conds.append(_condition("NamespaceContentRemaining", "True", "SomeResourcesRemain",
                                    f"Some resources are remaining: {left}", old))
        else:
            conds.append(_condition("NamespaceContentRemaining", "False", "ContentRemoved",
                                    "All content successfully removed", old))
        if finalizers:
            left = ", ".join(f"{k} in {n} resource instances" for k, n in sorted(finalizers.items()))
            conds.append(_condition("NamespaceFinalizersRemaining", "True", "SomeFinalizersRemain",
                                    f"Some content in the namespace has finalizers remaining: {left}", old))
        else:
            conds.append(_condition("NamespaceFinalizersRemaining", "False", "ContentHasNoFinalizers",
                                    "All content-preserving finalizers finished", old))
        if conds == old:
            return

        def fn(obj):
            obj.setdefault("status", {})["conditions"] = conds
        self.store.mutate(self.ns_t, None, ns["metadata"]["name"], fn, subresource="status")
