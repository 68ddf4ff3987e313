"""What an OpenShift AI release runs around KubeRay for RayClusters: the hooks the RayCluster
controller (kuberay.py) calls each pass. 2.x: the CodeFlare operator (codeflare.py); 3.x: Red
Hat's KubeRay controllers (kuberay_rhoai.py)."""

from __future__ import annotations

import time

from ..apiserver import errors
from .base import log, owner_ref


class RayPlatform:
    def __init__(self, store, registry, faults):
        self.store, self.registry, self.faults = store, registry, faults
        self.rc_t = registry.get("ray.io", "rayclusters")
        # what both releases' controllers write beside the cluster
        self.secret_t = registry.get("", "secrets")
        self.sa_t = registry.get("", "serviceaccounts")
        self.svc_t = registry.get("", "services")
        self._deleting_since: dict[str, float] = {}  # uid -> when the controller first saw the deletionTimestamp

    def admission(self, op: str, rt, obj: dict, old: dict | None) -> None:
        """The release's mutating webhook on RayClusters."""

    def reconcile(self, rc: dict) -> dict | None:
        """One pass for one RayCluster, before KubeRay's; returns it as it is now (None once gone)."""
        return rc

    def pod_gate(self, rc: dict, node_type: str | None) -> str | None:
        """Why KubeRay creates no pod yet (None: it may)."""
        return None

    def mutate_pod(self, rc: dict, spec: dict, node_type: str) -> None:
        """What KubeRay adds to a pod it builds, beyond upstream's."""

    def forget(self, live_uids: set[str]) -> None:
        """Clusters that are gone: drop what was kept about them."""
        for uid in [u for u in self._deleting_since if u not in live_uids]:
            del self._deleting_since[uid]

    def _finalizer_due(self, rc: dict) -> bool:
        """Whether the controller is done with a deleted cluster: finalizer_delay_s after it saw
        the deletion (the operators delete their objects first)."""
        since = self._deleting_since.setdefault(rc["metadata"]["uid"], time.monotonic())
        return time.monotonic() - since >= self.faults.platform("finalizer_delay_s")

    def _drop_finalizer(self, rc: dict, finalizer: str) -> dict | None:
        def drop(o):
            o["metadata"]["finalizers"] = [f for f in o["metadata"].get("finalizers") or [] if f != finalizer]
        self._deleting_since.pop(rc["metadata"]["uid"], None)
        return self.store.mutate(self.rc_t, rc["metadata"]["namespace"], rc["metadata"]["name"], drop)

    def _ensure(self, rt, rc: dict, name: str, body, labels: dict | None = None,
                annotations: dict | None = None) -> None:
        """Create `name` in the cluster's namespace, owned by it, unless it exists; `body()`
        gives the rest of the object (called only to create: a CA key is costly)."""
        ns = rc["metadata"]["namespace"]
        if self.store.find(rt, ns, name) is not None:
            return
        meta = {"name": name, "namespace": ns, "ownerReferences": [owner_ref(rc)]}
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        self._create(rt, {"metadata": meta, **body()})

    def _create(self, rt, obj: dict) -> None:
        try:
            self.store.create(rt, obj)
        except errors.ApiError as exc:
            if exc.code != 409:  # e.g. the namespace is terminating: the controller logs and requeues
                log.info("%s: creating %s %s failed: %s", type(self).__name__, rt.kind, obj["metadata"]["name"], exc.message)
