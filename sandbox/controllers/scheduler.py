"""Where a pod goes, decided as kube-scheduler v1.31 decides it (OpenShift 4.18's).

`place(pod, nodes, bound)` runs the default Filter plugins in their order on every node
(pkg/scheduler/apis/config/v1/default_plugins.go): NodeUnschedulable, TaintToleration,
NodeAffinity, NodeResourcesFit. A node's status is its first failing plugin's
(framework.RunFilterPlugins stops there), and a pod that fits nowhere gets FitError.Error()'s
text (framework/types.go): "0/<n> nodes are available: <histogram>." with DefaultPreemption's
PostFilter message appended, itself a FitError over the nodes preemption could help on
(preemption/preemption.go, "preemption: 0/<n> nodes are available: ...").

- NodeUnschedulable: a cordoned node (spec.unschedulable) unless the pod tolerates
  node.kubernetes.io/unschedulable:NoSchedule: "node(s) were unschedulable".
- TaintToleration: the node's first NoSchedule/NoExecute taint the pod does not tolerate
  (v1helper.FindMatchingUntoleratedTaint): "node(s) had untolerated taint {<key>: <value>}".
- NodeAffinity: spec.nodeSelector and required node affinity (terms ORed, expressions ANDed;
  In, NotIn, Exists, DoesNotExist, Gt, Lt): "node(s) didn't match Pod's node affinity/selector".
- NodeResourcesFit (fit.go fitsRequest): "Too many pods" (allocatable pods), then
  "Insufficient <resource>" for each of cpu, memory, ephemeral-storage and every extended
  resource (nvidia.com/gpu) whose request exceeds allocatable minus what bound pods request.
  A pod's request is max(sum of its containers', largest init container's) (resource helpers
  PodRequests; restartable init containers count with the containers).

The first three are UnschedulableAndUnresolvable, so preemption says "Preemption is not
helpful for scheduling" for those nodes; a node short of resources is one where preemption
could help, and says "No preemption victims found for incoming pod" because the sandbox's
pods carry no lower priority to evict (victims by PriorityClass are not modelled). A pod with
preemptionPolicy Never says "not eligible due to preemptionPolicy=Never.".

Of the nodes that fit, the one with the most free cpu and memory wins (NodeResourcesFit's
LeastAllocated score, the default), ties by name (kube-scheduler picks one at random).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from .. import quantity

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
CORDONED = "node(s) were unschedulable"
STANDARD = ("cpu", "memory", "ephemeral-storage")


@dataclass
class Decision:
    node: str | None  # where the pod goes; None: nowhere
    message: str = ""  # kube-scheduler's FitError text when nowhere


def tolerates(tolerations: list, taint: dict) -> bool:
    """v1 Toleration.ToleratesTaint: effect empty matches any; Exists with no key matches any key."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def pod_requests(pod: dict) -> dict[str, Fraction]:
    """What the pod asks of a node (resource helpers PodRequests, v1.31)."""
    spec = pod.get("spec") or {}

    def requests(c: dict) -> dict[str, Fraction]:
        return {k: quantity.parse(v) for k, v in ((c.get("resources") or {}).get("requests") or {}).items()}

    total: Counter = Counter()
    for c in spec.get("containers") or []:
        total.update(requests(c))
    sidecars: Counter = Counter()
    init_max: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        req = requests(c)
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            total.update(req)
            sidecars.update(req)
            continue
        for k, v in req.items():
            init_max[k] = max(init_max.get(k, Fraction(0)), v + sidecars.get(k, Fraction(0)))
    out = {k: Fraction(v) for k, v in total.items()}
    for k, v in init_max.items():
        out[k] = max(out.get(k, Fraction(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        out[k] = out.get(k, Fraction(0)) + quantity.parse(v)
    return out


def _matches_expression(labels: dict, expr: dict) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_affinity(pod: dict, node: dict) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (nodeaffinity, v1.31)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    return any(
        (t.get("matchExpressions") or t.get("matchFields"))
        and all(_matches_expression(labels, e) for e in t.get("matchExpressions") or [])
        and all(_matches_expression(fields, e) for e in t.get("matchFields") or [])
        for t in terms)


def _insufficient(want: dict[str, Fraction], node: dict, used: dict[str, Fraction], pods_used: int) -> list[str]:
    alloc = {k: quantity.parse(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
    out = []
    if pods_used + 1 > alloc.get("pods", Fraction(0)):
        out.append("Too many pods")
    if not any(want.get(k) for k in want):
        return out
    for k in STANDARD:
        if want.get(k, 0) and want[k] > alloc.get(k, Fraction(0)) - used.get(k, Fraction(0)):
            out.append(f"Insufficient {k}")
    for k in sorted(set(want) - set(STANDARD)):
        if k == "pods" or not want[k]:
            continue
        if want[k] > alloc.get(k, Fraction(0)) - used.get(k, Fraction(0)):
            out.append(f"Insufficient {k}")
    return out


def _filter(pod: dict, node: dict, used: dict[str, Fraction], pods_used: int) -> tuple[list[str], bool]:
    """(reasons, resolvable) of the node's first failing Filter plugin; ([], True) if it fits."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    nspec = node.get("spec") or {}
    if nspec.get("unschedulable") and not tolerates(tolerations, UNSCHEDULABLE_TAINT):
        return [CORDONED], False
    for taint in nspec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"], False
    if not matches_affinity(pod, node):
        return [AFFINITY], False
    return _insufficient(pod_requests(pod), node, used, pods_used), True


def fit_error(n: int, reasons: Counter) -> str:
    """FitError.Error(): the histogram "<count> <reason>" sorted as text, joined by ", "."""
    return f"0/{n} nodes are available: " + ", ".join(sorted(f"{v} {k}" for k, v in reasons.items())) + "."


def place(pod: dict, nodes: list[dict], usage: dict[str, tuple[dict[str, Fraction], int]]) -> Decision:
    """Schedule `pod` on `nodes`, given each node's bound requests and pod count in `usage`."""
    fits: list[tuple[Fraction, str]] = []
    reasons: Counter = Counter()
    preemption: Counter = Counter()
    want = pod_requests(pod)
    for node in nodes:
        name = node["metadata"]["name"]
        used, count = usage.get(name, ({}, 0))
        failed, resolvable = _filter(pod, node, used, count)
        if not failed:
            fits.append((-_free_share(want, node, used), name))
            continue
        reasons.update(failed)
        preemption[NO_VICTIMS if resolvable else NOT_HELPFUL] += 1
    if fits:
        return Decision(min(fits)[1])
    if not nodes:
        return Decision(None, "no nodes available to schedule pods")
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        post = "not eligible due to preemptionPolicy=Never."
    else:
        post = fit_error(len(nodes), preemption)
    return Decision(None, f"{fit_error(len(nodes), reasons)} preemption: {post}")


def _free_share(want: dict[str, Fraction], node: dict, used: dict[str, Fraction]) -> Fraction:
    """LeastAllocated: the mean free share of cpu and memory once the pod is placed."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    shares = []
    for k in ("cpu", "memory"):
        cap = quantity.parse(alloc.get(k, "0"))
        if cap > 0:
            shares.append((cap - used.get(k, Fraction(0)) - want.get(k, Fraction(0))) / cap)
    return sum(shares, Fraction(0)) / len(shares) if shares else Fraction(0)


def node_usage(pods: list[dict]) -> dict[str, tuple[dict[str, Fraction], int]]:
    """Each node's bound requests and pod count: every pod bound to it that has not finished
    (a terminating pod still holds its share until it is gone, as in the scheduler's cache)."""
    out: dict[str, tuple[dict[str, Fraction], int]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        used, count = out.get(node, ({}, 0))
        for k, v in pod_requests(p).items():
            used[k] = used.get(k, Fraction(0)) + v
        out[node] = (used, count + 1)
    return out
