"""The service account controller: every namespace has a `default` ServiceAccount.

As kube-controller-manager's serviceaccount-controller (v1.31) does: when a namespace
appears (or its `default` account is deleted) the account is created; namespaces being
deleted are left alone. Since v1.24 no token Secret is made for it.
"""

from __future__ import annotations

from ..apiserver import errors
from .base import Controller

DEFAULT = "default"


class ServiceAccountsController(Controller):
    name = "serviceaccounts"
    resync = 2.0

    def __init__(self, store, registry):
        super().__init__(store, registry)
        self.ns_t = self.rt("", "namespaces")
        self.sa_t = self.rt("", "serviceaccounts")

    def reconcile(self) -> None:
        namespaces, _ = self.store.list(self.ns_t)
        for ns in namespaces:
            meta = ns["metadata"]
            if meta.get("deletionTimestamp") or (ns.get("status") or {}).get("phase") == "Terminating":
                continue
            if self.store.find(self.sa_t, meta["name"], DEFAULT) is None:
                try:
                    self.store.create(self.sa_t, {"metadata": {"name": DEFAULT, "namespace": meta["name"]}})
                except errors.ApiError:  # created meanwhile
                    pass
