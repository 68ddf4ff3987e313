"""The Node controller and the ServiceAccount controller, one reconcile at a time."""

from __future__ import annotations

from kfp_ray_sandbox import quantity
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers.node import NodeController
from kfp_ray_sandbox.controllers.serviceaccounts import ServiceAccountsController
from kfp_ray_sandbox.nodepool import GPU_TAINT, NodeGroup, flavors


def test_the_pool_is_an_openshift_cluster_whose_nodes_are_registered_and_then_left_alone(tmp_path):
    reg, store = Registry(), Store()
    node_t = reg.get("", "nodes")
    ctrl = NodeController(store, reg, tmp_path)
    ctrl.reconcile()
    nodes = {n["metadata"]["name"]: n for n in store.list(node_t)[0]}
    assert sorted(nodes) == ["gpu-worker-0", "master-0", "master-1", "master-2", "worker-0", "worker-1"]
    master, worker, gpu = nodes["master-0"], nodes["worker-0"], nodes["gpu-worker-0"]
    assert [t["key"] for t in master["spec"]["taints"]] == ["node-role.kubernetes.io/master",
                                                            "node-role.kubernetes.io/control-plane"]
    assert {k: t[k] for t in gpu["spec"]["taints"] for k in ("key", "value", "effect")} == GPU_TAINT
    assert not worker["spec"].get("taints") and "nvidia.com/gpu" not in worker["status"]["capacity"]
    cap, alloc = gpu["status"]["capacity"], gpu["status"]["allocatable"]
    assert cap["nvidia.com/gpu"] == alloc["nvidia.com/gpu"] == "4" and gpu["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    cap, alloc = worker["status"]["capacity"], worker["status"]["allocatable"]
    assert cap["cpu"] == "8" and quantity.parse(alloc["cpu"]) == quantity.parse("7500m")
    assert quantity.parse(alloc["memory"]) == 32 * 2**30 - 2**30 - 100 * 2**20  # systemReserved + eviction threshold
    ready = next(c for c in worker["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert {"type": "InternalIP", "address": "127.0.0.1"} in worker["status"]["addresses"]
    assert worker["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.6"
    assert worker["metadata"]["labels"]["kubernetes.io/hostname"] == "worker-0"
    assert worker["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m6i.2xlarge"

    rv = store.rv
    ctrl.reconcile()
    assert store.rv == rv  # every node there: nothing written
    # a taint someone adds stays (the `taint` fault never touches Nodes: the scheduler sees it per cluster)
    store.mutate(node_t, None, "worker-0", lambda n: n["spec"].update(taints=[dict(GPU_TAINT)]))
    store.delete(node_t, None, "worker-1")
    ctrl.reconcile()
    assert [t["key"] for t in store.get(node_t, None, "worker-0")["spec"]["taints"]] == ["nvidia.com/gpu"]
    assert not store.get(node_t, None, "worker-1")["spec"].get("taints")  # a deleted node is registered again


def test_a_pool_of_ones_own(tmp_path):
    reg, store = Registry(), Store()
    pool = (NodeGroup("big", 1, 64, 256, "m6i.16xlarge", flavor="big", selector={"size": "big"}, labels={"size": "big"}),)
    NodeController(store, reg, tmp_path, pool=pool).reconcile()
    (node,), _ = store.list(reg.get("", "nodes"))
    assert node["metadata"]["name"] == "big-0" and node["status"]["capacity"]["cpu"] == "64"
    assert flavors(pool) == [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                              "metadata": {"name": "big"}, "spec": {"nodeLabels": {"size": "big"}}}]


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
