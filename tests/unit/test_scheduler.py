"""The sandbox's scheduler on OpenShift's node pool: where pods go, and kube-scheduler v1.31's
exact words when they go nowhere, read back by kfp-ray's own parser (kfp_ray.scheduling)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kfp_ray.scheduling import parse
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers import scheduler
from kfp_ray_sandbox.controllers.node import NodeController
from kfp_ray_sandbox.nodepool import GPU_TOLERATION

MASTER = "3 node(s) had untolerated taint {node-role.kubernetes.io/master: }"
GPU = "node(s) had untolerated taint {nvidia.com/gpu: true}"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    reg, store = Registry(), Store()
    NodeController(store, reg, tmp_path_factory.mktemp("node")).reconcile()
    return sorted(store.list(reg.get("", "nodes"))[0], key=lambda n: n["metadata"]["name"])


def pod(cpu="1", memory="1Gi", gpu=0, tolerations=None, node_selector=None, name="p", **spec) -> dict:
    res = {"cpu": cpu, "memory": memory}
    if gpu:
        res["nvidia.com/gpu"] = str(gpu)
    spec = {"containers": [{"name": "ray", "resources": {"requests": res, "limits": dict(res)}}], **spec}
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"name": name, "namespace": "sandbox"}, "spec": spec}


def bound(node: str, **kw) -> dict:
    p = pod(**kw)
    p["spec"]["nodeName"] = node
    return p


def test_a_pod_lands_on_the_least_used_worker_never_a_control_plane_or_the_gpu_node(nodes):
    assert scheduler.place(pod(), nodes, {}).node == "worker-0"
    usage = scheduler.node_usage([bound("worker-0", cpu="4")])
    assert scheduler.place(pod(), nodes, usage).node == "worker-1"


def test_too_big_for_every_worker_waits_for_capacity(nodes):
    decision = scheduler.place(pod(cpu="8"), nodes, {})
    assert decision.node is None
    assert decision.message == (
        f"0/6 nodes are available: 1 {GPU}, 2 Insufficient cpu, {MASTER}. preemption: 0/6 nodes are available: "
        "2 No preemption victims found for incoming pod, 4 Preemption is not helpful for scheduling.")
    parsed = parse(decision.message)
    assert not parsed.fatal and parsed.capacity == {"Insufficient cpu": 2}


def test_bound_pods_take_their_share_and_finished_ones_give_it_back(nodes):
    full = [bound("worker-0", cpu="7", name="a"), bound("worker-1", cpu="7", name="b")]
    decision = scheduler.place(pod(cpu="1"), nodes, scheduler.node_usage(full))
    assert "2 Insufficient cpu" in decision.message
    full[1]["status"] = {"phase": "Succeeded"}
    assert scheduler.place(pod(cpu="1"), nodes, scheduler.node_usage(full)).node == "worker-1"


def test_gpus_only_on_the_gpu_node_and_only_with_its_toleration(nodes):
    assert scheduler.place(pod(gpu=1, tolerations=[GPU_TOLERATION]), nodes, {}).node == "gpu-worker-0"
    decision = scheduler.place(pod(gpu=1), nodes, {})
    assert decision.message.startswith(f"0/6 nodes are available: 1 {GPU}, 2 Insufficient nvidia.com/gpu, {MASTER}.")
    assert "nvidia.com/gpu" in parse(decision.message).waiting_for()  # the taint is named in the progress line
    usage = scheduler.node_usage([bound("gpu-worker-0", gpu=4, tolerations=[GPU_TOLERATION])])
    decision = scheduler.place(pod(gpu=1, tolerations=[GPU_TOLERATION]), nodes, usage)
    assert decision.message.startswith(f"0/6 nodes are available: 3 Insufficient nvidia.com/gpu, {MASTER}.")


def test_only_taints_is_fatal(nodes):
    tainted = [dict(n, spec={"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]})
               if n["metadata"]["name"].startswith("worker") else n for n in nodes]
    decision = scheduler.place(pod(), tainted, {})
    assert decision.message == (f"0/6 nodes are available: {MASTER}, 3 {GPU}. preemption: 0/6 nodes are available: "
                                "6 Preemption is not helpful for scheduling.")
    assert parse(decision.message).fatal


def test_node_selector_affinity_and_cordons(nodes):
    decision = scheduler.place(pod(node_selector={"nvidia.com/gpu.present": "true"}), nodes, {})
    assert decision.message.startswith(f"0/6 nodes are available: 1 {GPU}, 2 node(s) didn't match Pod's node "
                                       f"affinity/selector, {MASTER}.")
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["worker-1"]}]}]}}}
    assert scheduler.place(pod(affinity=affinity), nodes, {}).node == "worker-1"
    cordoned = [dict(n, spec={**n["spec"], "unschedulable": True}) if n["metadata"]["name"] == "worker-1" else n
                for n in nodes]
    decision = scheduler.place(pod(affinity=affinity), cordoned, {})
    assert "1 node(s) were unschedulable" in decision.message and "1 node(s) didn't match" in decision.message


def test_preemption_policy_never_and_no_nodes(nodes):
    decision = scheduler.place(pod(cpu="9", preemptionPolicy="Never"), nodes, {})
    assert decision.message.endswith(". preemption: not eligible due to preemptionPolicy=Never.")
    assert scheduler.place(pod(), [], {}).message == "no nodes available to schedule pods"


def test_a_pods_request_counts_its_largest_init_container_and_sidecars():
    p = pod(cpu="1", initContainers=[{"name": "init", "resources": {"requests": {"cpu": "3"}}},
                                     {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}],
            overhead={"cpu": "100m"})
    assert scheduler.pod_requests(p)["cpu"] == Fraction(3) + Fraction(1, 10)
