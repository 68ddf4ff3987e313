"""The Node controller and the ServiceAccount controller, one reconcile at a time."""

from __future__ import annotations

import os

from kfp_ray_sandbox import quantity
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers.kubelet import GPU_TAINT, NODE
from kfp_ray_sandbox.controllers.node import NodeController
from kfp_ray_sandbox.controllers.serviceaccounts import ServiceAccountsController
from kfp_ray_sandbox.faults import Faults


def _cluster_queue(gpus: str) -> dict:
    return {"metadata": {"name": "cq"}, "spec": {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{"name": "f", "resources": [
            {"name": "cpu", "nominalQuota": 9}, {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}


def test_node_is_the_machine_with_the_queues_gpus_and_fault_taints(tmp_path):
    reg, store, faults = Registry(), Store(), Faults()
    cq_t, node_t = reg.get("kueue.x-k8s.io", "clusterqueues"), reg.get("", "nodes")
    store.create(cq_t, _cluster_queue("5"))
    ctrl = NodeController(store, reg, faults, tmp_path)
    ctrl.reconcile()
    node = store.get(node_t, None, NODE)
    cap, alloc = node["status"]["capacity"], node["status"]["allocatable"]
    assert cap["cpu"] == str(os.cpu_count()) and cap["nvidia.com/gpu"] == "5" and alloc["nvidia.com/gpu"] == "5"
    assert quantity.parse(alloc["memory"]) < quantity.parse(cap["memory"])
    assert quantity.parse(alloc["cpu"]) == quantity.parse(cap["cpu"]) - quantity.parse("500m")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.6"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert not node["spec"].get("taints")

    faults.set({"clusters": {"gpu-*": {"taint": True}}})
    ctrl.reconcile()
    taints = store.get(node_t, None, NODE)["spec"]["taints"]
    assert [{k: t[k] for k in ("key", "value", "effect")} for t in taints] == [GPU_TAINT]
    rv = store.rv
    ctrl.reconcile()
    assert store.rv == rv  # nothing changed, nothing written

    faults.clear()
    store.mutate(cq_t, None, "cq", lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1].update(
        nominalQuota="2"))
    ctrl.reconcile()
    node = store.get(node_t, None, NODE)
    assert not node["spec"].get("taints") and node["status"]["capacity"]["nvidia.com/gpu"] == "2"


def test_every_namespace_gets_a_default_account_and_the_root_ca():
    reg, store = Registry(), Store()
    ns_t, sa_t, cm_t = reg.get("", "namespaces"), reg.get("", "serviceaccounts"), reg.get("", "configmaps")
    store.create(ns_t, {"metadata": {"name": "a"}})
    store.create(ns_t, {"metadata": {"name": "going", "finalizers": ["kubernetes"]}})
    store.delete(ns_t, None, "going")
    ctrl = ServiceAccountsController(store, reg, b"-----BEGIN CERTIFICATE-----\n")
    ctrl.reconcile()
    assert store.find(sa_t, "a", "default") is not None
    assert store.get(cm_t, "a", "kube-root-ca.crt")["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
    assert store.find(sa_t, "going", "default") is None  # a namespace being deleted is left alone
    store.delete(sa_t, "a", "default")
    ctrl.reconcile()
    assert store.find(sa_t, "a", "default") is not None  # recreated, as the controller does
