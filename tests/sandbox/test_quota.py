"""Kueue quota with real clusters: a third cluster waits in the queue until one is deleted."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.helpers import eventually

pytestmark = pytest.mark.ray


def workload_of(co, name):
    for wl in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "workloads")["items"]:
        if wl["metadata"]["ownerReferences"][0]["name"] == name:
            return wl
    return None


def cond(wl, type_):
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def test_third_cluster_is_held_until_quota_frees(box, sbx, sdk_auth):
    from codeflare_sdk import Cluster, ClusterConfiguration
    from codeflare_sdk.ray.cluster.status import CodeFlareClusterStatus

    def config(name):  # 2 pods, 4 CPUs each: two fit the 9-CPU quota, a third does not
        return ClusterConfiguration(name=name, namespace="sandbox", num_workers=1, local_queue="local-queue-test",
                                    head_cpu_requests=2, head_cpu_limits=2, head_memory_requests=2, head_memory_limits=2,
                                    worker_cpu_requests=2, worker_cpu_limits=2, worker_memory_requests=2,
                                    worker_memory_limits=2)

    # Kueue and KubeRay are what is under test, not Ray: the pods are created, their containers not
    # started (a Ray head and worker per cluster: ~8 CPU-s each on this machine)
    sbx.set_faults({"clusters": {"quota-*": {"slow_start": 600}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    clusters = {}
    for name in ("quota-a", "quota-b"):
        clusters[name] = Cluster(config(name))
        clusters[name].up()
        eventually(lambda n=name: (c := cond(workload_of(co, n), "Admitted")) and c["status"] == "True", 20,
                   what=f"{name} to be admitted")
    third = Cluster(config("quota-c"))
    third.up()
    held = eventually(lambda: (c := cond(workload_of(co, "quota-c"), "QuotaReserved")) and c["status"] == "False" and c, 20,
                      what="quota-c's Workload to report why it waits")
    # Kueue reports every short pod set: the head, and the worker group (cpu and, as `pods` is covered, pods)
    message = ("couldn't assign flavors to pod set head: insufficient unused quota for cpu in flavor default-flavor, "
               "1 more needed; couldn't assign flavors to pod set small-group-quota-c: insufficient unused quota for cpu "
               "in flavor default-flavor, 3 more needed, insufficient unused quota for pods in flavor default-flavor, "
               "1 more needed")
    assert (held["reason"], held["message"]) == ("Pending", message)
    v1 = k8s.CoreV1Api(sbx.api_client())
    wl_name = workload_of(co, "quota-c")["metadata"]["name"]
    assert ("Warning", "Pending", message) in {(e.type, e.reason, e.message) for e in v1.list_namespaced_event(
        "sandbox", field_selector=f"involvedObject.name={wl_name}").items}
    rc = eventually(lambda: (r := co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "quota-c"))
                    .get("status", {}).get("state") == "suspended" and r, 10, what="KubeRay to report quota-c suspended")
    assert rc["spec"]["suspend"] is True
    assert third.status(print_to_console=False)[0] == CodeFlareClusterStatus.SUSPENDED
    cq = co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "cluster-queue")["status"]
    assert cq["pendingWorkloads"] == 1 and cq["admittedWorkloads"] == 2
    assert {r["name"]: r["total"] for r in cq["flavorsUsage"][0]["resources"]}["cpu"] == "8"
    assert v1.list_namespaced_pod("sandbox", label_selector="ray.io/cluster=quota-c").items == []

    clusters["quota-a"].down()  # its Workload holds the quota until Kueue drops the finalizer
    eventually(lambda: (c := cond(workload_of(co, "quota-c"), "Admitted")) and c["status"] == "True", 30,
               what="quota-c to be admitted once quota-a is gone")
    # then Kueue's job reconciler starts the admitted cluster
    eventually(lambda: co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "quota-c")["spec"]
               ["suspend"] is False, 10, what="Kueue to unsuspend quota-c")
    eventually(lambda: v1.list_namespaced_pod("sandbox", label_selector="ray.io/cluster=quota-c").items, 20,
               what="quota-c's pods")
