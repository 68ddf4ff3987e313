"""kube-scheduler's Unschedulable messages (v1.31 FitError.Error, as OpenShift shows them on a
pending Ray pod), and what provisioning makes of each: fatal at once only when no node is
excluded for capacity alone and every reason needs a change to the pod; otherwise a wait,
named in the `starting:` progress line."""

from __future__ import annotations

import pytest
from kubernetes.client import V1ObjectMeta, V1Pod, V1PodCondition, V1PodStatus

from kfp_ray.diagnose import PodTrouble, pod_problem, pod_summary
from kfp_ray.scheduling import parse

MASTER = "node(s) had untolerated taint {node-role.kubernetes.io/master: }"
NO_VICTIMS = ("preemption: 0/6 nodes are available: 3 No preemption victims found for incoming pod, "
              "3 Preemption is not helpful for scheduling.")
NOT_HELPFUL = "preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling."

# (case, message, fatal, what the progress line or the fix must name)
CASES = [
    ("capacity beside tainted control-plane nodes (every OpenShift cluster)",
     f"0/6 nodes are available: 3 Insufficient cpu, 3 {MASTER}. {NO_VICTIMS}",
     False, "waiting for room on a node (3 Insufficient cpu; other nodes: 3 " + MASTER + ")"),
    ("cpu and memory short on the same workers",
     f"0/6 nodes are available: 3 Insufficient cpu, 3 Insufficient memory, 3 {MASTER}. {NO_VICTIMS}",
     False, "3 Insufficient cpu, 3 Insufficient memory"),
    ("no GPU free", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
                    "3 No preemption victims found for incoming pod.",
     False, "waiting for room on a node (3 Insufficient nvidia.com/gpu)"),
    ("GPUs short on workers, the GPU node's taint not tolerated",
     f"0/6 nodes are available: 1 node(s) had untolerated taint {{nvidia.com/gpu: true}}, 2 Insufficient "
     f"nvidia.com/gpu, 3 {MASTER}. preemption: 0/6 nodes are available: 2 No preemption victims found for incoming "
     "pod, 4 Preemption is not helpful for scheduling.",
     False, "2 Insufficient nvidia.com/gpu; other nodes: 1 node(s) had untolerated taint {nvidia.com/gpu: true}"),
    ("pod slots full", f"0/6 nodes are available: 3 Too many pods, 3 {MASTER}. {NO_VICTIMS}",
     False, "room on a node (3 Too many pods"),
    ("taints only: a GPU node the pod does not tolerate",
     f"0/6 nodes are available: 3 {MASTER}, 3 node(s) had untolerated taint {{nvidia.com/gpu: true}}. {NOT_HELPFUL}",
     True, "add a matching toleration for taint nvidia.com/gpu"),
    ("taints only: the sandbox's single tainted node",
     "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: true}. preemption: 0/1 nodes are "
     "available: 1 Preemption is not helpful for scheduling.",
     True, "add a matching toleration for taint nvidia.com/gpu"),
    ("taints only: control-plane nodes and nothing else",
     f"0/3 nodes are available: 3 {MASTER}. preemption: 0/3 nodes are available: 3 Preemption is not helpful "
     "for scheduling.",
     True, "no worker node takes it"),
    ("a node coming up (not-ready) beside tainted ones",
     f"0/7 nodes are available: 1 node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}, 3 {MASTER}, "
     "3 node(s) had untolerated taint {nvidia.com/gpu: true}. preemption: 0/7 nodes are available: 7 Preemption "
     "is not helpful for scheduling.",
     False, "waiting for a node that fits (1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
    ("node selector matches no node yet (a MachineSet scaled from zero)",
     f"0/6 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, 3 {MASTER}. {NOT_HELPFUL}",
     False, "3 node(s) didn't match Pod's node affinity/selector"),
    ("a cordoned worker (drained for an upgrade)",
     f"0/4 nodes are available: 1 node(s) were unschedulable, 3 {MASTER}. preemption: 0/4 nodes are available: "
     "4 Preemption is not helpful for scheduling.",
     False, "1 node(s) were unschedulable"),
    ("anti-affinity and topology spread",
     f"0/6 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 2 node(s) didn't match pod topology "
     f"spread constraints, 3 {MASTER}. {NOT_HELPFUL}",
     False, "1 node(s) didn't match pod anti-affinity rules"),
    ("unbound PersistentVolumeClaims (PreFilter): the provisioner binds them",
     f"0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims. {NOT_HELPFUL}",
     False, "waiting (pod has unbound immediate PersistentVolumeClaims)"),
    ("a claim that does not exist (PreFilter)",
     f'0/6 nodes are available: persistentvolumeclaim "ray-data" not found. {NOT_HELPFUL}',
     True, "create PersistentVolumeClaim ray-data"),
    ("no nodes at all", "no nodes available to schedule pods", False, "no nodes available to schedule pods"),
]


@pytest.mark.parametrize("case,message,fatal,named", CASES, ids=[c[0] for c in CASES])
def test_what_a_scheduler_message_means(case, message, fatal, named):
    verdict = parse(message)
    assert verdict.fatal is fatal
    assert named in (verdict.fix() if fatal else verdict.waiting_for())


def test_the_message_is_read_as_the_scheduler_wrote_it():
    verdict = parse(f"0/6 nodes are available: 3 Insufficient cpu, 3 {MASTER}. {NO_VICTIMS}")
    assert verdict.nodes == 6
    assert verdict.reasons == {"Insufficient cpu": 3, MASTER: 3}  # dots inside a reason are not separators
    assert verdict.capacity == {"Insufficient cpu": 3}
    assert verdict.preemption == NO_VICTIMS  # the PostFilter part is not read as reasons


def _pod(message, role="head", reason="Unschedulable"):
    cond = V1PodCondition(type="PodScheduled", status="False", reason=reason, message=message)
    return V1Pod(metadata=V1ObjectMeta(name=f"c-{role}-x", uid=role, labels={"ray.io/node-type": role}),
                 status=V1PodStatus(phase="Pending", conditions=[cond]))


def test_capacity_beside_tainted_control_plane_is_a_wait_named_in_the_progress_line():
    message = f"0/6 nodes are available: 3 Insufficient cpu, 3 {MASTER}. {NO_VICTIMS}"
    pods = [_pod(message), _pod(message, role="worker")]
    assert pod_problem(pods[0]) is None
    assert PodTrouble().check(pods) is None
    assert pod_summary(pods) == ("head Pending (unschedulable), worker Pending (unschedulable); head, worker not "
                                 "scheduled: waiting for room on a node (3 Insufficient cpu; other nodes: 3 "
                                 f"{MASTER}) until pods end or an autoscaler adds a node")


def test_taints_only_fail_at_once_with_the_fix():
    message = f"0/6 nodes are available: 3 {MASTER}, 3 node(s) had untolerated taint {{nvidia.com/gpu: true}}. {NOT_HELPFUL}"
    problem = PodTrouble().check([_pod(message)])
    assert problem.startswith("pod c-head-x cannot be scheduled") and message in problem
    assert "Fix: add a matching toleration for taint nvidia.com/gpu (`tolerations`)" in problem
    # the scheduler's message as another reason than Unschedulable (an error of its own) is no verdict
    assert pod_problem(_pod(message, reason="SchedulerError")) is None
