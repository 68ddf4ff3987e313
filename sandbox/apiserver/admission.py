"""Built-in admission plugins of kube-apiserver v1.31 that the sandbox needs for pods.

They run in the store (Store.admission / Store.validation), so a controller's create is
refused exactly as a client's is: on a cluster, controllers go through the apiserver too.

- ServiceAccount (plugin/pkg/admission/serviceaccount, mutating): a pod naming a service
  account that does not exist is refused. The per-namespace `default` account is not
  checked while the sandbox has none.
- ResourceQuota (plugin/pkg/admission/resourcequota, validating): the namespace's
  ResourceQuotas (pods and compute: requests.*, limits.*), and the `exceed_quota` fault, which
  makes a cluster's pod creates exceed a namespace quota.
- LimitRanger (plugin/pkg/admission/limitranger): a Container LimitRange's defaults, min, max.
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


# --- LimitRanger and ResourceQuota over the namespace's own objects -------------------------------
# kube-apiserver v1.31: plugin/pkg/admission/limitranger/admission.go (mutating, then validating)
# and plugin/pkg/admission/resourcequota with pkg/quota/v1/evaluator/core/pods.go (validating).
COMPUTE = ("cpu", "memory")
_QUOTA_KEYS = {"pods", "cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}


def _containers(pod: dict) -> list[dict]:
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


class LimitRanger:
    """A Container LimitRange's `default` (limits) and `defaultRequest` (requests) fill what a
    container leaves out; then its `min` and `max` are enforced: "maximum cpu usage per
    Container is 1, but limit is 2" (several: "[a, b]", utilerrors.NewAggregate)."""

    def __init__(self, store, registry):
        self.store = store
        self.lr_t = registry.get("", "limitranges")

    def __call__(self, rt, obj: dict) -> None:
        if rt.key != ("", "pods"):
            return
        ranges, _ = self.store.list(self.lr_t, obj["metadata"].get("namespace"))
        limits = [item for lr in ranges for item in (lr.get("spec") or {}).get("limits") or []
                  if item.get("type") == "Container"]
        if not limits:
            return
        from .. import quantity

        problems = []
        for c in _containers(obj):
            res = c.setdefault("resources", {})
            for item in limits:
                for k, v in (item.get("default") or {}).items():
                    res.setdefault("limits", {}).setdefault(k, v)
                for k, v in (item.get("defaultRequest") or {}).items():
                    res.setdefault("requests", {}).setdefault(k, v)
            for k, v in (res.get("limits") or {}).items():  # apiserver defaulting: requests default to limits
                res.setdefault("requests", {}).setdefault(k, v)
            for item in limits:
                for k, bound in (item.get("max") or {}).items():
                    lim = (res.get("limits") or {}).get(k)
                    if lim is None:
                        problems.append(f"maximum {k} usage per Container is {bound}.  No limit is specified")
                    elif quantity.parse(lim) > quantity.parse(bound):
                        problems.append(f"maximum {k} usage per Container is {bound}, but limit is {lim}")
                for k, bound in (item.get("min") or {}).items():
                    req = (res.get("requests") or {}).get(k)
                    if req is None:
                        problems.append(f"minimum {k} usage per Container is {bound}.  No request is specified")
                    elif quantity.parse(req) < quantity.parse(bound):
                        problems.append(f"minimum {k} usage per Container is {bound}, but request is {req}")
        if problems:
            raise forbidden(rt, admission_name(obj), problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]")


def pod_usage(pod: dict) -> dict:
    """What a pod counts against a quota (evaluator/core/pods.go PodUsageFunc): its containers'
    requests and limits summed (init containers: the largest), and one pod."""
    from fractions import Fraction

    from .. import quantity

    spec = pod.get("spec") or {}

    def total(containers, kind, resource):
        return sum((quantity.parse(((c.get("resources") or {}).get(kind) or {}).get(resource, 0)) for c in containers),
                   Fraction(0))

    usage = {"pods": Fraction(1)}
    for r in COMPUTE:
        for kind in ("requests", "limits"):
            main = total(spec.get("containers") or [], kind, r)
            init = max((total([c], kind, r) for c in spec.get("initContainers") or []), default=Fraction(0))
            usage[f"{kind}.{r}"] = max(main, init)
        usage[r] = usage[f"requests.{r}"]
    return usage


class ResourceQuotaAdmission:
    """Each ResourceQuota of the namespace: a pod that would take a tracked resource past `hard`
    is refused ("exceeded quota: <name>, requested: ..., used: ..., limited: ..."), and one whose
    containers do not all state a compute resource the quota tracks ("failed quota: <name>:
    must specify limits.cpu for: main"). Pods that have ended count no more."""

    def __init__(self, store, registry):
        self.store = store
        self.rq_t = registry.get("", "resourcequotas")
        self.pod_t = registry.get("", "pods")

    def __call__(self, rt, obj: dict) -> None:
        if rt.key != ("", "pods"):
            return
        ns = obj["metadata"].get("namespace")
        quotas, _ = self.store.list(self.rq_t, ns)
        if not quotas:
            return
        from .. import quantity

        pods, _ = self.store.list(self.pod_t, ns)
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        used: dict = {}
        for p in live:
            for k, v in pod_usage(p).items():
                used[k] = used.get(k, 0) + v
        wanted = pod_usage(obj)
        for q in sorted(quotas, key=lambda q: q["metadata"]["name"]):
            name = q["metadata"]["name"]
            hard = {k: quantity.parse(v) for k, v in ((q.get("spec") or {}).get("hard") or {}).items() if k in _QUOTA_KEYS}
            missing: dict[str, list[str]] = {}
            for key in sorted(set(hard) - {"pods"}):
                kind, _, resource = key.rpartition(".")
                for c in _containers(obj):
                    if resource not in ((c.get("resources") or {}).get(kind or "requests") or {}):
                        missing.setdefault(key, []).append(c.get("name", ""))
            if missing:
                what = "; ".join(f"{k} for: {','.join(sorted(v))}" for k, v in sorted(missing.items()))
                raise forbidden(rt, admission_name(obj), f"failed quota: {name}: must specify {what}")
            over = sorted(k for k, limit in hard.items() if used.get(k, 0) + wanted.get(k, 0) > limit)
            if over:
                requested, in_use, limited = (_pretty(over, values) for values in (wanted, used, hard))
                raise forbidden(rt, admission_name(obj), f"exceeded quota: {name}, requested: {requested}, "
                                                         f"used: {in_use}, limited: {limited}")


def _pretty(keys: list[str], values: dict) -> str:
    """resourcequota's prettyPrint: `k=v` sorted, comma-joined."""
    from .. import quantity

    return ",".join(f"{k}={quantity.fmt(k.rpartition('.')[2], values.get(k, 0))}" for k in keys)
