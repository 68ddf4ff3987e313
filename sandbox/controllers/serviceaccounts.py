"""Every namespace gets a `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap.

As kube-controller-manager's serviceaccount-controller and root-ca-cert-publisher (v1.31)
do: when a namespace appears (or either object is deleted) it is created; namespaces being
deleted are left alone. Since v1.24 no token Secret is made for the account.
"""

from __future__ import annotations

from ..apiserver import errors
from .base import Controller

DEFAULT = "default"
ROOT_CA = "kube-root-ca.crt"


class ServiceAccountsController(Controller):
    name = "serviceaccounts"
    resync = 2.0

    def __init__(self, store, registry, ca_pem: bytes | None = None):
        super().__init__(store, registry)
        self.ca_pem = ca_pem.decode() if isinstance(ca_pem, bytes) else ca_pem
        self.ns_t = self.rt("", "namespaces")
        self.sa_t = self.rt("", "serviceaccounts")
        self.cm_t = self.rt("", "configmaps")

    def reconcile(self) -> None:
        namespaces, _ = self.store.list(self.ns_t)
        for ns in namespaces:
            meta = ns["metadata"]
            if meta.get("deletionTimestamp") or (ns.get("status") or {}).get("phase") == "Terminating":
                continue
            name = meta["name"]
            self._ensure(self.sa_t, {"metadata": {"name": DEFAULT, "namespace": name}})
            if self.ca_pem:
                self._ensure(self.cm_t, {"metadata": {"name": ROOT_CA, "namespace": name,
                                                      "annotations": {"kubernetes.io/description": (
                                                          "Contains a CA bundle that can be used to verify the "
                                                          "kube-apiserver when using internal endpoints such as the "
                                                          "internal service IP or kubernetes.default.svc. No other "
                                                          "usage is guaranteed across distributions of Kubernetes "
                                                          "clusters.")}},
                                         "data": {"ca.crt": self.ca_pem}})

    def _ensure(self, rt, obj: dict) -> None:
        meta = obj["metadata"]
        if self.store.find(rt, meta["namespace"], meta["name"]) is None:
            try:
                self.store.create(rt, obj)
            except errors.ApiError:  # created meanwhile
                pass
