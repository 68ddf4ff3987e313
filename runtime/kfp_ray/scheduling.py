"""What kube-scheduler says of a pod it cannot place, and whether waiting can help.

A pending pod's PodScheduled condition (status False, reason Unschedulable) carries
kube-scheduler v1.31's FitError.Error() (pkg/scheduler/framework/types.go):

    "0/<all nodes> nodes are available:" + " <PreFilter message>."  (a PreFilter plugin refused the pod)
                                        or " <n> <reason>, <n> <reason>."  (the Filter reasons' histogram)
                                        + " <PostFilter message>"  (if any)

The histogram counts each reason of each rejected node ("%v %v", count then reason),
sorted as text. The PostFilter message is DefaultPreemption's, "preemption: " followed by
a FitError of its own ("preemption: 0/6 nodes are available: 3 No preemption victims found
for incoming pod, 3 Preemption is not helpful for scheduling."). The Filter plugins run in
order and a node's status is its first failing plugin's (framework.RunFilterPlugins returns
at the first rejection; the default order is NodeUnschedulable, NodeName, TaintToleration,
NodeAffinity, NodePorts, NodeResourcesFit, volume plugins, PodTopologySpread,
InterPodAffinity), so the reasons of one node come from one plugin: a node counted under
"Insufficient cpu" tolerated the pod and matched its affinity, and is excluded for capacity
alone.

The reason strings, v1.31 plugins (pkg/scheduler/framework/plugins/...):
- noderesources/fit.go: "Insufficient <resource>" (one per short resource), "Too many pods";
- tainttoleration: "node(s) had untolerated taint {<key>: <value>}" (NoSchedule/NoExecute);
- nodeaffinity: "node(s) didn't match Pod's node affinity/selector";
- nodeunschedulable: "node(s) were unschedulable" (cordoned);
- nodeports: "node(s) didn't have free ports for the requested pod ports";
- volumebinding: PreFilter "pod has unbound immediate PersistentVolumeClaims",
  'persistentvolumeclaim "<name>" not found'; Filter "node(s) had volume node affinity
  conflict", "node(s) didn't find available persistent volumes to bind", ...;
- interpodaffinity, podtopologyspread: "node(s) didn't match pod (anti-)affinity rules",
  "node(s) didn't match pod topology spread constraints".

Fatal only when no node is excluded for capacity alone and every reason is one that no
autoscaler, finishing pod or node coming up changes: a taint the pod does not tolerate
(other than the node-lifecycle taints a node carries while it comes up or goes away), a
claim that does not exist. Anything else (capacity, affinity a new node may match, a reason
not known here) is a wait that startup_timeout and Kueue's waitForPodsReady bound."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEAD = re.compile(r"^0/(\d+) nodes are available:\s*")
_COUNTED = re.compile(r"^(\d+) (.+)$")
_TAINT = re.compile(r"^node\(s\) had untolerated taint \{(.*?): (.*)\}$")
_MISSING_CLAIM = re.compile(r'^persistentvolumeclaim "([^"]+)" not found$')
PREEMPTION = " preemption: "
# Taints a node carries while it comes up, is drained or goes away (node lifecycle controller's
# TaintNodesByCondition, the cloud node controller, cluster-autoscaler's scale-down, Cluster API):
# they clear by themselves, or the node goes and another comes.
PASSING_TAINTS = frozenset({
    "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure", "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/network-unavailable", "node.kubernetes.io/out-of-service",
    "node.cloudprovider.kubernetes.io/uninitialized", "node.cloudprovider.kubernetes.io/shutdown",
    "node.cluster.x-k8s.io/uninitialized", "ToBeDeletedByClusterAutoscaler",
})
# Nodes that take no workloads: tolerating them is not the fix.
CONTROL_PLANE_TAINTS = frozenset({"node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane"})


def is_capacity(reason: str) -> bool:
    """A node that lacks room (NodeResourcesFit, NodePorts): another pod's end or a new node frees it."""
    return (reason.startswith("Insufficient ") or reason == "Too many pods"
            or reason == "node(s) didn't have free ports for the requested pod ports")


def untolerated_taint(reason: str) -> str | None:
    """The key of a taint the pod does not tolerate that will not go away by itself; None otherwise."""
    m = _TAINT.match(reason)
    return m.group(1) if m and m.group(1) not in PASSING_TAINTS else None


def needs_a_change(reason: str) -> bool:
    """No autoscaler, finishing pod or node coming up makes a node take the pod."""
    return untolerated_taint(reason) is not None or bool(_MISSING_CLAIM.match(reason))


@dataclass
class Unschedulable:
    """A parsed FitError message: `reasons` maps each reason to its count (a PreFilter
    message counts for every node); `preemption` is the PostFilter part, kept for the record."""
    message: str
    nodes: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    preemption: str = ""
    prefilter: str = ""  # the PreFilter plugin's message, when one refused the pod on every node

    @property
    def capacity(self) -> dict[str, int]:
        return {r: n for r, n in self.reasons.items() if is_capacity(r)}

    @property
    def fatal(self) -> bool:
        """No node excluded for capacity alone, and every reason needs a change to the pod."""
        return bool(self.reasons) and not self.capacity and all(needs_a_change(r) for r in self.reasons)

    def histogram(self, reasons: dict[str, int] | None = None) -> str:
        return ", ".join(f"{n} {r}" for r, n in (self.reasons if reasons is None else reasons).items())

    def waiting_for(self) -> str:
        """What the pod waits for, in a phrase for the progress line."""
        if not self.reasons:
            return f"waiting ({self.message or 'no reason given yet'})"
        if self.prefilter:
            return f"waiting ({self.prefilter})"
        capacity = self.capacity
        others = {r: n for r, n in self.reasons.items() if r not in capacity}
        rest = f"; other nodes: {self.histogram(others)}" if others else ""
        if capacity:
            return (f"waiting for room on a node ({self.histogram(capacity)}{rest}) until pods end or an "
                    "autoscaler adds a node")
        return f"waiting for a node that fits ({self.histogram()}): one may come up, or an autoscaler add one"

    def fix(self) -> str:
        taints = sorted({t for t in map(untolerated_taint, self.reasons) if t})
        claims = sorted({m.group(1) for m in map(_MISSING_CLAIM.match, self.reasons) if m})
        fixes = []
        workers = [t for t in taints if t not in CONTROL_PLANE_TAINTS]
        if workers:
            fixes.append(f"add a matching toleration for taint {', '.join(workers)} (`tolerations`) or a "
                         "node_selector for nodes it may use")
        elif taints:
            fixes.append("no worker node takes it (the others are control-plane nodes, which run no workloads): "
                         "ask your administrator for worker nodes, or for the ones the queue's flavor should use")
        if claims:
            fixes.append(f"create PersistentVolumeClaim {', '.join(claims)} in the namespace, or do not mount it")
        return "; ".join(fixes)


def parse(message: str) -> Unschedulable:
    """kube-scheduler's Unschedulable message, parsed (see the module's docstring). A message
    not of that form gives no reasons: never fatal."""
    message = (message or "").strip()
    head = _HEAD.match(message)
    if not head:
        return Unschedulable(message)
    body = message[head.end():]
    body, _, preemption = body.partition(PREEMPTION)
    body = body.strip().removesuffix(".")
    nodes = int(head.group(1))
    items = re.split(r", (?=\d+ )", body) if body else []
    counted = [_COUNTED.match(item) for item in items]
    if items and all(counted):
        reasons: dict[str, int] = {}
        for m in counted:
            reasons[m.group(2)] = reasons.get(m.group(2), 0) + int(m.group(1))
        prefilter = ""
    else:  # a PreFilter plugin's message: it stands for every node
        reasons, prefilter = ({body: nodes} if body else {}), body
    return Unschedulable(message, nodes, reasons, ("preemption: " + preemption).strip() if preemption else "",
                         prefilter)
