"""Kueue as RHOAI runs it, for RayClusters: webhooks, Workloads, quota admission, status.

- Only namespaces labelled kueue.openshift.io/managed=true are managed (RHOAI's
  managedJobsNamespaceSelector). There the ODH operator's webhook rejects a RayCluster
  without the queue-name label, and Kueue's webhook creates it suspended.
- One Workload per RayCluster (pod sets: head, then each worker group), owned by it.
- Admission per ClusterQueue in creation order (BestEffortFIFO by default, StrictFIFO
  when asked): a Workload is admitted when all of its pods fit the unused nominal quota,
  summed per resource over the pod sets. Admission un-suspends the RayCluster; deleting
  the RayCluster deletes its Workload and so releases its quota.
- Conditions, events and ClusterQueue/LocalQueue status read like Kueue's (v1beta1).
"""

from __future__ import annotations

import hashlib
from fractions import Fraction

from .. import quantity
from ..apiserver import errors
from .base import Controller, owner_ref, record_event, set_condition

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL = "kueue.openshift.io/managed"
DEFAULT_QUEUE_ANNOTATION = "kueue.x-k8s.io/default-queue"
ODH_WEBHOOK = "kueuelabels-validator.opendatahub.io"


def pod_requests(template: dict) -> dict[str, Fraction]:
    """Requests of one pod, as Kueue counts them: containers summed (limits stand in for
    missing requests), the larger of that and any init container, plus one `pods`."""
    spec = (template or {}).get("spec") or {}

    def of(container):
        res = container.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        return {k: quantity.parse(v) for k, v in merged.items()}

    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Fraction(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Fraction(0)), v)
    total["pods"] = Fraction(1)
    return total


def ray_pod_sets(rc: dict) -> list[dict]:
    spec = rc.get("spec") or {}
    sets = [{"name": "head", "count": 1, "template": (spec.get("headGroupSpec") or {}).get("template") or {}}]
    for group in spec.get("workerGroupSpecs") or []:
        count = group.get("replicas", group.get("minReplicas", 0)) or 0
        sets.append({"name": group.get("groupName", "workers"), "count": int(count),
                     "template": group.get("template") or {}})
    return sets


def workload_name(rc: dict) -> str:
    digest = hashlib.sha1(rc["metadata"]["uid"].encode()).hexdigest()[:5]
    return f"raycluster-{rc['metadata']['name']}-{digest}"[:253]


class KueueController(Controller):
    name = "kueue"

    def __init__(self, store, registry, faults):
        super().__init__(store, registry)
        self.faults = faults
        self.rc_t = self.rt("ray.io", "rayclusters")
        self.wl_t = self.rt("kueue.x-k8s.io", "workloads")
        self.lq_t = self.rt("kueue.x-k8s.io", "localqueues")
        self.cq_t = self.rt("kueue.x-k8s.io", "clusterqueues")
        self.ns_t = self.rt("", "namespaces")

    # --- webhooks --------------------------------------------------------------
    def managed(self, namespace: str) -> bool:
        ns = self.store.find(self.ns_t, None, namespace)
        return bool(ns) and (ns["metadata"].get("labels") or {}).get(MANAGED_LABEL) == "true"

    def admission(self, op: str, rt, obj: dict, old: dict | None) -> None:
        if rt.key != self.rc_t.key or not self.managed(obj["metadata"].get("namespace")):
            return
        labels = obj["metadata"].get("labels") or {}
        if QUEUE_LABEL not in labels:
            raise errors.webhook_denied(
                ODH_WEBHOOK, f'Kueue label validation failed: missing required label "{QUEUE_LABEL}"')
        if op == "CREATE":
            obj.setdefault("spec", {})["suspend"] = True
        elif old is not None and (old["metadata"].get("labels") or {}).get(QUEUE_LABEL) != labels.get(QUEUE_LABEL) \
                and not (old.get("spec") or {}).get("suspend"):
            raise errors.invalid(rt, obj["metadata"]["name"], [(
                f"metadata.labels[{QUEUE_LABEL}]", "Invalid value: field is immutable while the workload is admitted")])

    # --- reconcile -------------------------------------------------------------
    def reconcile(self) -> None:
        clusters, _ = self.store.list(self.rc_t)
        workloads, _ = self.store.list(self.wl_t)
        owned = {ref["uid"] for wl in workloads for ref in wl["metadata"].get("ownerReferences") or []}
        for rc in clusters:
            labels = rc["metadata"].get("labels") or {}
            if QUEUE_LABEL in labels and self.managed(rc["metadata"]["namespace"]) \
                    and rc["metadata"]["uid"] not in owned and not rc["metadata"].get("deletionTimestamp"):
                self._create_workload(rc)
        self._admit()

    def _create_workload(self, rc: dict) -> None:
        wl = {
            "metadata": {"name": workload_name(rc), "namespace": rc["metadata"]["namespace"],
                         "labels": {"kueue.x-k8s.io/job-uid": rc["metadata"]["uid"]},
                         "ownerReferences": [owner_ref(rc)]},
            "spec": {"queueName": rc["metadata"]["labels"][QUEUE_LABEL], "podSets": ray_pod_sets(rc),
                     "priority": 0, "active": True},
        }
        try:
            created = self.store.create(self.wl_t, wl)
        except errors.ApiError:
            return
        record_event(self.store, self.registry, rc, "Normal", "CreatedWorkload",
                     f"Created Workload: {created['metadata']['namespace']}/{created['metadata']['name']}",
                     "kueue-controller-manager")

    def _admit(self) -> None:
        workloads, _ = self.store.list(self.wl_t)
        queues = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in self.store.list(self.lq_t)[0]}
        cqs = {q["metadata"]["name"]: q for q in self.store.list(self.cq_t)[0]}
        usage: dict[str, dict[str, Fraction]] = {name: {} for name in cqs}
        pending: dict[str, list[dict]] = {name: [] for name in cqs}
        for wl in workloads:
            admission = (wl.get("status") or {}).get("admission")
            if admission:
                cq = admission["clusterQueue"]
                for k, v in self._usage(wl).items():
                    usage.setdefault(cq, {})[k] = usage.setdefault(cq, {}).get(k, Fraction(0)) + v
                continue
            lq = queues.get((wl["metadata"]["namespace"], wl["spec"]["queueName"]))
            if lq is None:
                self._pending(wl, "Inadmissible", f"LocalQueue {wl['spec']['queueName']} doesn't exist")
                continue
            cq_name = (lq.get("spec") or {}).get("clusterQueue")
            if cq_name not in cqs:
                self._pending(wl, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
                continue
            pending[cq_name].append(wl)
        for cq_name, cq in cqs.items():
            strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            for wl in sorted(pending[cq_name], key=lambda w: (-(w["spec"].get("priority") or 0),
                                                              w["metadata"]["creationTimestamp"],
                                                              int(w["metadata"]["resourceVersion"]))):
                owner = (wl["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
                if self.faults.for_cluster(owner).get("never_admit"):
                    self._pending(wl, "Pending", "couldn't assign flavors to pod set head: the sandbox holds this "
                                                 "workload in the queue (fault never_admit)")
                    if strict:
                        break
                    continue
                flavors, message = self._fit(cq, wl, usage[cq_name])
                if flavors is None:
                    self._pending(wl, "Pending", message)
                    if strict:
                        break
                    continue
                for k, v in self._usage(wl).items():
                    usage[cq_name][k] = usage[cq_name].get(k, Fraction(0)) + v
                self._admit_one(wl, cq_name, flavors)
        # Status from one fresh listing, after this pass's admissions.
        fresh, _ = self.store.list(self.wl_t)
        for cq_name, cq in cqs.items():
            self._cq_status(cq, usage[cq_name], fresh, queues)
        for lq in queues.values():
            self._lq_status(lq, cqs.get((lq.get("spec") or {}).get("clusterQueue")), fresh)

    def _usage(self, wl: dict) -> dict[str, Fraction]:
        total: dict[str, Fraction] = {}
        for ps in wl["spec"]["podSets"]:
            for k, v in pod_requests(ps.get("template")).items():
                total[k] = total.get(k, Fraction(0)) + v * ps.get("count", 1)
        return total

    def _fit(self, cq: dict, wl: dict, used: dict[str, Fraction]) -> tuple[dict | None, str]:
        """Assign the first flavor whose unused quota covers each resource, pod set by
        pod set (usage accumulates across pod sets, as Kueue's assigner does)."""
        quotas: dict[str, list[tuple[str, Fraction]]] = {}
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    quotas.setdefault(res["name"], []).append((flavor["name"], quantity.parse(res["nominalQuota"])))
        assumed: dict[str, Fraction] = {}
        flavors: dict[str, str] = {}
        for ps in wl["spec"]["podSets"]:
            if ps.get("count", 1) == 0:
                continue
            req = {k: v * ps.get("count", 1) for k, v in pod_requests(ps.get("template")).items() if v}
            reasons = []
            for res, val in req.items():
                if res not in quotas:
                    reasons.append(f"resource {res} unavailable in ClusterQueue")
                    continue
                flavor, nominal = quotas[res][0]
                total = assumed.get(res, Fraction(0)) + val
                available = nominal - used.get(res, Fraction(0))
                if total > nominal:
                    reasons.append(f"insufficient quota for {res} in flavor {flavor}, request > maximum capacity "
                                   f"({quantity.fmt(res, total)} > {quantity.fmt(res, nominal)})")
                elif total > available:
                    reasons.append(f"insufficient unused quota for {res} in flavor {flavor}, "
                                   f"{quantity.fmt(res, total - available)} more needed")
                else:
                    flavors[res] = flavor
            if reasons:
                return None, f"couldn't assign flavors to pod set {ps['name']}: {', '.join(reasons)}"
            for res, val in req.items():
                assumed[res] = assumed.get(res, Fraction(0)) + val
        return flavors, ""

    def _pending(self, wl: dict, reason: str, message: str) -> None:
        conds = (wl.get("status") or {}).get("conditions") or []
        current = next((c for c in conds if c["type"] == "QuotaReserved"), None)
        if current and current["status"] == "False" and current["message"] == message:
            return

        def fn(obj):
            status = obj.setdefault("status", {})
            status["conditions"] = set_condition(status.get("conditions"), "QuotaReserved", "False", reason, message)
        self.store.mutate(self.wl_t, wl["metadata"]["namespace"], wl["metadata"]["name"], fn, subresource="status")
        record_event(self.store, self.registry, wl, "Normal" if reason == "Pending" else "Warning", reason, message,
                     "kueue-admission")

    def _admit_one(self, wl: dict, cq_name: str, flavors: dict) -> None:
        ns, name = wl["metadata"]["namespace"], wl["metadata"]["name"]

        def fn(obj):
            status = obj.setdefault("status", {})
            status["admission"] = {"clusterQueue": cq_name, "podSetAssignments": [
                {"name": ps["name"], "count": ps.get("count", 1),
                 "flavors": dict(flavors),
                 "resourceUsage": {k: quantity.fmt(k, v * ps.get("count", 1))
                                   for k, v in pod_requests(ps.get("template")).items()}}
                for ps in obj["spec"]["podSets"]]}
            conds = set_condition(status.get("conditions"), "QuotaReserved", "True", "QuotaReserved",
                                  f"Quota reserved in ClusterQueue {cq_name}")
            status["conditions"] = set_condition(conds, "Admitted", "True", "Admitted", "The workload is admitted")
        admitted = self.store.mutate(self.wl_t, ns, name, fn, subresource="status")
        if admitted is None:
            return
        record_event(self.store, self.registry, admitted, "Normal", "QuotaReserved",
                     f"Quota reserved in ClusterQueue {cq_name}", "kueue-admission")
        record_event(self.store, self.registry, admitted, "Normal", "Admitted",
                     f"Admitted by ClusterQueue {cq_name}", "kueue-admission")
        owner = (wl["metadata"].get("ownerReferences") or [{}])[0].get("name")
        if owner:
            self.store.mutate(self.rc_t, ns, owner, lambda rc: rc.setdefault("spec", {}).update(suspend=False))

    @staticmethod
    def _flavor_usage(cq: dict | None, used: dict[str, Fraction], borrowed: bool) -> list[dict]:
        """Per flavor and covered resource, the quantity in use, as Kueue reports it."""
        flavors = []
        for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                flavors.append({"name": flavor["name"], "resources": [
                    {"name": r["name"], "total": quantity.fmt(r["name"], used.get(r["name"], Fraction(0))),
                     **({"borrowed": "0"} if borrowed else {})}
                    for r in flavor.get("resources") or []]})
        return flavors

    def _cq_status(self, cq: dict, used: dict[str, Fraction], workloads: list[dict], queues: dict) -> None:
        name = cq["metadata"]["name"]
        admitted = [w for w in workloads if ((w.get("status") or {}).get("admission") or {}).get("clusterQueue") == name]
        pending = sum(1 for w in workloads if not (w.get("status") or {}).get("admission")
                      and ((queues.get((w["metadata"]["namespace"], w["spec"]["queueName"])) or {}).get("spec") or {})
                      .get("clusterQueue") == name)
        flavors = self._flavor_usage(cq, used, borrowed=True)
        status = {"flavorsReservation": flavors, "flavorsUsage": flavors, "pendingWorkloads": pending,
                  "reservingWorkloads": len(admitted), "admittedWorkloads": len(admitted),
                  "conditions": set_condition((cq.get("status") or {}).get("conditions"), "Active", "True", "Ready",
                                              "Can admit new workloads")}
        if cq.get("status") != status:
            self.store.mutate(self.cq_t, None, name, lambda o: o.update(status=status), subresource="status")

    def _lq_status(self, lq: dict, cq: dict | None, workloads: list[dict]) -> None:
        ns, name = lq["metadata"]["namespace"], lq["metadata"]["name"]
        wls = [w for w in workloads if w["metadata"]["namespace"] == ns and w["spec"]["queueName"] == name]
        admitted = [w for w in wls if (w.get("status") or {}).get("admission")]
        used: dict[str, Fraction] = {}
        for w in admitted:
            for k, v in self._usage(w).items():
                used[k] = used.get(k, Fraction(0)) + v
        flavors = self._flavor_usage(cq, used, borrowed=False)
        active = cq is not None
        status = {"pendingWorkloads": len(wls) - len(admitted), "reservingWorkloads": len(admitted),
                  "admittedWorkloads": len(admitted), "flavorsReservation": flavors, "flavorUsage": flavors,
                  "flavors": [{"name": f["name"], "resources": [r["name"] for r in f["resources"]]} for f in flavors],
                  "conditions": set_condition((lq.get("status") or {}).get("conditions"), "Active",
                                              "True" if active else "False", "Ready" if active else "ClusterQueueDoesNotExist",
                                              "Can submit new workloads to localQueue" if active
                                              else "Can't submit new workloads to clusterQueue")}
        if lq.get("status") != status:
            self.store.mutate(self.lq_t, ns, name, lambda o: o.update(status=status), subresource="status")
