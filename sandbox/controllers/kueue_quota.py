"""How Kueue counts a Workload's requests and fits them into a ClusterQueue's quota.

Matched against kubernetes-sigs/kueue v0.11.6:
- pkg/workload/workload.go totalRequestsFromPodSets: a pod's requests are its containers'
  summed, or an init container's if larger (k8s resourcehelpers.PodRequests), limits standing
  in for missing requests (AdjustResources), times the pod set's count. Zero-valued entries stay.
- pkg/scheduler/flavorassigner/flavorassigner.go assignFlavors / findFlavorForPodSetResource /
  fitsResourceQuota / Assignment.Message: `pods` is requested only when a resource group covers
  it; pod sets are assigned in order and their usage accumulates; a resource no group covers, or
  a request above the nominal quota, stops the assignment at that pod set; a request above the
  unused quota is reported and the next pod set is still tried, so every short pod set appears
  in the message ("; "-joined, each pod set's reasons sorted).
- pkg/cache/clusterqueue.go: a ClusterQueue referencing a missing ResourceFlavor is inactive.
- k8s.io/apimachinery LabelSelectorAsSelector: a nil namespaceSelector selects nothing, {} all.

The sandbox has no cohorts, borrowing or preemption (RHOAI's seed ClusterQueue uses none), and
its flavors carry no node labels or taints; within a flavor it checks resources in name order
(Kueue walks a Go map, so which reasons accompany a "maximum capacity" one can vary there).
"""

from __future__ import annotations

from fractions import Fraction

from .. import quantity

NO_FIT, PREEMPT, FIT = 0, 1, 2  # flavorassigner's granular modes, as far as the sandbox needs them


def pod_requests(template: dict) -> dict[str, Fraction]:
    """Requests of one pod, as Kueue counts them: containers summed (limits stand in for
    missing requests), the larger of that and any init container. No `pods` entry: that is
    added per ClusterQueue, only where it is covered."""
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
    return total


def resource_groups(cq: dict) -> list[dict]:
    """[{covered: set, flavors: [(flavor name, {resource: nominal quota})]}] of a ClusterQueue."""
    groups = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        flavors = [(f["name"], {r["name"]: quantity.parse(r["nominalQuota"]) for r in f.get("resources") or []})
                   for f in group.get("flavors") or []]
        groups.append({"covered": set(group.get("coveredResources") or []), "flavors": flavors})
    return groups


def covers(cq: dict, resource: str) -> bool:
    return any(resource in g["covered"] for g in resource_groups(cq))


def missing_flavors(cq: dict, existing: set[str]) -> list[str]:
    return [name for g in resource_groups(cq) for name, _ in g["flavors"] if name not in existing]


def pod_set_requests(cq: dict, pod_set: dict) -> dict[str, Fraction]:
    """A pod set's total requests (count x per pod), with `pods` when the ClusterQueue covers it."""
    count = int(pod_set.get("count", 1))
    req = {k: v * count for k, v in pod_requests(pod_set.get("template")).items()}
    if covers(cq, "pods"):
        req["pods"] = Fraction(count)
    return req


def workload_usage(cq: dict, workload: dict) -> dict[str, Fraction]:
    """What an admitted Workload holds of a ClusterQueue, summed over its pod sets."""
    total: dict[str, Fraction] = {}
    for ps in workload["spec"]["podSets"]:
        for k, v in pod_set_requests(cq, ps).items():
            total[k] = total.get(k, Fraction(0)) + v
    return total


def assign_flavors(cq: dict, workload: dict, used: dict[tuple[str, str], Fraction],
                   existing_flavors: set[str]) -> tuple[list[dict] | None, str]:
    """Kueue's flavor assignment. Returns (per pod set {"name", "count", "flavors", "usage"}, "")
    when every pod set fits the unused quota, else (None, Kueue's message). `used` is the
    ClusterQueue's usage per (flavor, resource)."""
    groups = resource_groups(cq)
    pending: dict[tuple[str, str], Fraction] = {}  # assignment.Usage.Quota: earlier pod sets of this workload
    assigned: list[dict] = []
    failures: list[tuple[str, list[str]]] = []
    for ps in workload["spec"]["podSets"]:
        requests = pod_set_requests(cq, ps)
        flavors: dict[str, str] = {}
        reasons: list[str] = []
        stop = False
        for res in sorted(requests):
            if res in flavors:
                continue
            group = next((g for g in groups if res in g["covered"]), None)
            if group is None:
                reasons, stop = [f"resource {res} unavailable in ClusterQueue"], True
                break
            chosen, why = _find_flavor(group, requests, pending, used, existing_flavors)
            if chosen is None:  # the pod set's status becomes this group's alone, and assignment stops
                reasons, stop = why, True
                break
            reasons += why
            flavors.update(chosen)
        if reasons:
            failures.append((ps["name"], reasons))
        if stop:
            break
        for res, flavor in flavors.items():
            pending[(flavor, res)] = pending.get((flavor, res), Fraction(0)) + requests[res]
        assigned.append({"name": ps["name"], "count": int(ps.get("count", 1)), "flavors": flavors,
                         "usage": requests})
    if failures:
        return None, "; ".join(f"couldn't assign flavors to pod set {name}: {', '.join(sorted(why))}"
                               for name, why in failures)
    return assigned, ""


def _find_flavor(group, requests, pending, used, existing):
    """The first flavor of the group where every covered request fits; else the best partial
    one (PREEMPT: only the unused quota is short) with the reasons, or None if none can ever fit."""
    wanted = {r: v for r, v in requests.items() if r in group["covered"]}
    reasons: list[str] = []
    best, best_mode = None, NO_FIT
    for name, quotas in group["flavors"]:
        if name not in existing:
            reasons.append(f"flavor {name} not found")
            continue
        mode, chosen = FIT, {}
        for res in sorted(wanted):
            val = wanted[res] + pending.get((name, res), Fraction(0))
            nominal = quotas.get(res, Fraction(0))
            available = nominal - used.get((name, res), Fraction(0))
            if val > nominal:
                reasons.append(f"insufficient quota for {res} in flavor {name}, request > maximum capacity "
                               f"({quantity.fmt(res, val)} > {quantity.fmt(res, nominal)})")
                mode = NO_FIT
                break
            if val > available:
                reasons.append(f"insufficient unused quota for {res} in flavor {name}, "
                               f"{quantity.fmt(res, val - available)} more needed")
                mode = min(mode, PREEMPT)
            chosen[res] = name
        if mode > best_mode:
            best, best_mode = chosen, mode
            if mode == FIT:
                return best, []
    return best, reasons
