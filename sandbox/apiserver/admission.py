"""Built-in admission plugins of kube-apiserver v1.31 that the sandbox needs for pods.

They run in the store (Store.admission / Store.validation), so a controller's create is
refused exactly as a client's is: on a cluster, controllers go through the apiserver too.

- ServiceAccount (plugin/pkg/admission/serviceaccount, mutating): a pod naming a service
  account that does not exist is refused. The per-namespace `default` account is not
  checked while the sandbox has none.
- ResourceQuota (plugin/pkg/admission/resourcequota, validating): the `exceed_quota`
  fault makes a cluster's pod creates exceed a namespace quota.
"""

from __future__ import annotations

from . import errors

QUOTA_NAME = "compute-resources"  # the quota the `exceed_quota` fault stands for (a count/pods quota)


def forbidden(rt, name: str, reason: str, causes: list[dict] | None = None) -> errors.ApiError:
    """admission.NewForbidden: `<resource> "<name>" is forbidden: <reason>`."""
    details = {"name": name, "group": rt.group, "kind": rt.plural}
    if causes:
        details["causes"] = causes
    return errors.ApiError(403, "Forbidden", f'{errors.qualified(rt)} "{name}" is forbidden: {reason}', details)


def admission_name(obj: dict) -> str:
    """The name a mutating plugin reports: generation has not happened yet."""
    meta = obj.get("metadata") or {}
    return meta.get("name") or meta.get("generateName") or "Unknown"


class ServiceAccountAdmission:
    def __init__(self, store, registry):
        self.store = store
        self.sa_t = registry.get("", "serviceaccounts")

    def __call__(self, rt, obj: dict) -> None:
        if rt.key != ("", "pods"):
            return
        sa = (obj.get("spec") or {}).get("serviceAccountName") or (obj.get("spec") or {}).get("serviceAccount")
        ns = obj["metadata"].get("namespace")
        if not sa or sa == "default" or self.store.find(self.sa_t, ns, sa) is not None:
            return
        raise forbidden(rt, admission_name(obj),
                        f'error looking up service account {ns}/{sa}: serviceaccount "{sa}" not found')


class QuotaFaultAdmission:
    """The `exceed_quota` cluster fault: a namespace ResourceQuota (hard `pods` = the pods the
    namespace already runs) refuses each pod of a matching RayCluster, with the quota
    plugin's message: exceeded quota: <name>, requested: pods=1, used: pods=N, limited: pods=N."""

    def __init__(self, store, registry, faults):
        self.store, self.faults = store, faults
        self.pod_t = registry.get("", "pods")

    def __call__(self, rt, obj: dict) -> None:
        if rt.key != ("", "pods"):
            return
        cluster = (obj["metadata"].get("labels") or {}).get("ray.io/cluster")
        fault = self.faults.for_cluster(cluster).get("exceed_quota") if cluster else None
        if not fault:
            return
        quota = fault if isinstance(fault, str) else QUOTA_NAME
        pods, _ = self.store.list(self.pod_t, obj["metadata"].get("namespace"))
        used = sum(1 for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
        raise forbidden(rt, obj["metadata"]["name"],
                        f"exceeded quota: {quota}, requested: pods=1, used: pods={used}, limited: pods={used}")
