"""How Kueue counts a Workload's requests and fits them into a ClusterQueue's flavors and quota.

Matched against kubernetes-sigs/kueue v0.11.6 (the same code at v0.12.10):
- pkg/workload/workload.go totalRequestsFromPodSets: a pod's requests are its containers'
  summed, or an init container's if larger (k8s resourcehelpers.PodRequests), limits standing
  in for missing requests (AdjustResources), times the pod set's count. Zero-valued entries stay.
- pkg/scheduler/flavorassigner/flavorassigner.go assignFlavors / findFlavorForPodSetResource /
  fitsResourceQuota / Assignment.Message: `pods` is requested only when a resource group covers
  it; pod sets are assigned in order and their usage accumulates; a resource no group covers, or
  a request above the nominal quota, stops the assignment at that pod set; a request above the
  unused quota is reported and the next pod set is still tried, so every short pod set appears
  in the message ("; "-joined, each pod set's reasons sorted).
- The same findFlavorForPodSetResource, before any quota: a flavor whose spec.nodeTaints
  (NoSchedule/NoExecute) the pod set does not tolerate, with its template's tolerations plus
  the flavor's spec.tolerations (component-helpers FindMatchingUntoleratedTaint), is skipped as
  "untolerated taint {<key> <value> <effect> <nil>} in flavor <name>" (Go's %s of a v1.Taint
  value); one whose nodeLabels the pod set's required nodeSelector / node affinity rejects is
  skipped as "flavor <name> doesn't match node affinity". flavorSelector keeps only the
  selector keys some flavor of the resource group labels (cache/clusterqueue.go
  updateLabelKeys), and a required term left with no expression drops node affinity altogether.
- pkg/cache/clusterqueue.go: a ClusterQueue referencing a missing ResourceFlavor is inactive.
- k8s.io/apimachinery LabelSelectorAsSelector: a nil namespaceSelector selects nothing, {} all.

What an admitted flavor then does to the pods (its nodeLabels and tolerations merged into the
job's templates when Kueue starts it) is kueue_podset.py. The sandbox has no cohorts, borrowing
or preemption (RHOAI's seed ClusterQueue uses none); within a flavor it checks resources in name
order (Kueue walks a Go map, so which reasons accompany a "maximum capacity" one can vary there).
"""

from __future__ import annotations

from fractions import Fraction

from .. import quantity
from .scheduler import matches_affinity, tolerates

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


def missing_flavors(cq: dict, existing) -> list[str]:
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
                   flavors: dict[str, dict]) -> tuple[list[dict] | None, str]:
    """Kueue's flavor assignment. Returns (per pod set {"name", "count", "flavors", "usage"}, "")
    when every pod set fits the unused quota, else (None, Kueue's message). `used` is the
    ClusterQueue's usage per (flavor, resource); `flavors` the ResourceFlavors by name."""
    groups = resource_groups(cq)
    for g in groups:  # updateLabelKeys: every node label key of the group's existing flavors
        g["label_keys"] = {k for name, _ in g["flavors"] if name in flavors
                           for k in ((flavors[name].get("spec") or {}).get("nodeLabels") or {})}
    pending: dict[tuple[str, str], Fraction] = {}  # assignment.Usage.Quota: earlier pod sets of this workload
    assigned: list[dict] = []
    failures: list[tuple[str, list[str]]] = []
    for ps in workload["spec"]["podSets"]:
        requests = pod_set_requests(cq, ps)
        chosen_flavors: dict[str, str] = {}
        reasons: list[str] = []
        stop = False
        pod_spec = (ps.get("template") or {}).get("spec") or {}
        for res in sorted(requests):
            if res in chosen_flavors:
                continue
            group = next((g for g in groups if res in g["covered"]), None)
            if group is None:
                reasons, stop = [f"resource {res} unavailable in ClusterQueue"], True
                break
            chosen, why = _find_flavor(group, pod_spec, requests, pending, used, flavors)
            if chosen is None:  # the pod set's status becomes this group's alone, and assignment stops
                reasons, stop = why, True
                break
            reasons += why
            chosen_flavors.update(chosen)
        if reasons:
            failures.append((ps["name"], reasons))
        if stop:
            break
        for res, flavor in chosen_flavors.items():
            pending[(flavor, res)] = pending.get((flavor, res), Fraction(0)) + requests[res]
        assigned.append({"name": ps["name"], "count": int(ps.get("count", 1)), "flavors": chosen_flavors,
                         "usage": requests})
    if failures:
        return None, "; ".join(f"couldn't assign flavors to pod set {name}: {', '.join(sorted(why))}"
                               for name, why in failures)
    return assigned, ""


def untolerated_taint(flavor: dict, pod_spec: dict) -> dict | None:
    """FindMatchingUntoleratedTaint over the flavor's NoSchedule/NoExecute nodeTaints, with the
    pod's tolerations and then the flavor's."""
    spec = flavor.get("spec") or {}
    tolerations = list(pod_spec.get("tolerations") or []) + list(spec.get("tolerations") or [])
    return next((t for t in spec.get("nodeTaints") or []
                 if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)), None)


def taint_text(taint: dict) -> str:
    """fmt's %s of a v1.Taint value (its String method is on the pointer): {key value effect timeAdded}."""
    return f"{{{taint.get('key', '')} {taint.get('value', '')} {taint.get('effect', '')} {taint.get('timeAdded') or '<nil>'}}}"


def flavor_selector(pod_spec: dict, label_keys: set[str]) -> dict:
    """flavorSelector: the pod's required nodeSelector and node affinity, kept to `label_keys`
    (matchFields and other keys dropped; a term left empty drops the affinity: terms are ORed)."""
    out: dict = {}
    if pod_spec.get("nodeSelector"):
        out["nodeSelector"] = {k: v for k, v in pod_spec["nodeSelector"].items() if k in label_keys}
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") in label_keys]
        if not exprs:
            terms = []
            break
        terms.append({"matchExpressions": exprs})
    if terms:
        out["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return out


def matches_flavor(selector_spec: dict, flavor: dict) -> bool:
    """selector.Match of a node carrying only the flavor's nodeLabels (nodeaffinity.RequiredNodeAffinity)."""
    node = {"metadata": {"name": "", "labels": (flavor.get("spec") or {}).get("nodeLabels") or {}}}
    return matches_affinity({"spec": selector_spec}, node)


def _find_flavor(group, pod_spec, requests, pending, used, flavors):
    """The first flavor of the group the pod set tolerates and may land on where every covered
    request fits; else the best partial one (PREEMPT: only the unused quota is short) with the
    reasons, or None if none can ever fit."""
    wanted = {r: v for r, v in requests.items() if r in group["covered"]}
    reasons: list[str] = []
    best, best_mode = None, NO_FIT
    selector = flavor_selector(pod_spec, group.get("label_keys") or set())
    for name, quotas in group["flavors"]:
        if name not in flavors:
            reasons.append(f"flavor {name} not found")
            continue
        taint = untolerated_taint(flavors[name], pod_spec)
        if taint is not None:
            reasons.append(f"untolerated taint {taint_text(taint)} in flavor {name}")
            continue
        if not matches_flavor(selector, flavors[name]):
            reasons.append(f"flavor {name} doesn't match node affinity")
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
