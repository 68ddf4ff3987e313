"""Kueue in the running sandbox: waitForPodsReady eviction and requeue (real Ray at the end), and a
deleted cluster's Workload holding its quota until Kueue drops the finalizer (no Ray)."""

from __future__ import annotations

import re

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from tests.helpers import eventually, raycluster

NS = "sandbox"
KUEUE = ("kueue.x-k8s.io", "v1beta1", NS, "workloads")


def workload_of(co, name):
    return next((w for w in co.list_namespaced_custom_object(*KUEUE)["items"]
                 if w["metadata"]["ownerReferences"][0]["name"] == name), None)


def cond(wl, type_):
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def ray_cluster(co, name):
    return co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", name)


def events_about(v1, name):
    return {(e.type, e.reason, e.message) for e in v1.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items}


@pytest.mark.ray
def test_cluster_not_ready_in_time_is_evicted_requeued_and_ready_on_a_later_try(sbx):
    # Pods stay ContainerCreating 8 s, longer than a 3 s PodsReady timeout.
    # waitForPodsReady on, as 2.x ships it and a 3.x administrator turns it on (gangScheduling ByWorkload)
    sbx.set_faults({"platform": {"pods_ready_timeout_s": 3, "requeue_backoff_base_s": 2, "wait_for_pods_ready": True},
                    "clusters": {"slowpoke": {"slow_start": 8}}})
    api = sbx.api_client()
    co, v1 = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", raycluster("slowpoke", workers=0, memory="2Gi"))
    wl = eventually(lambda: (w := workload_of(co, "slowpoke")) and (c := cond(w, "Requeued")) and c["status"] == "False" and w,
                    30, what="slowpoke's Workload to be evicted and released")
    name = wl["metadata"]["name"]
    message = f"Exceeded the PodsReady timeout {NS}/{name}"
    evicted = cond(wl, "Evicted")
    assert (evicted["status"], evicted["reason"], evicted["message"]) == ("True", "PodsReadyTimeout", message)
    assert (cond(wl, "QuotaReserved")["reason"], cond(wl, "QuotaReserved")["message"]) == ("Pending", message)
    assert cond(wl, "Requeued")["reason"] == "PodsReadyTimeout" and "admission" not in wl["status"]
    assert wl["status"]["requeueState"]["count"] == 1
    assert ("Normal", "EvictedDueToPodsReadyTimeout", message) in events_about(v1, name)
    assert ("Normal", "Stopped", message) in events_about(v1, "slowpoke")
    assert ray_cluster(co, "slowpoke")["spec"]["suspend"] is True
    eventually(lambda: ray_cluster(co, "slowpoke").get("status", {}).get("state") == "suspended"
               and not v1.list_namespaced_pod(NS, label_selector="ray.io/cluster=slowpoke").items, 30,
               what="KubeRay to delete the evicted cluster's pods")

    # A later try whose pods start well within the timeout: readmitted after the backoff, then ready.
    sbx.set_faults({"platform": {"pods_ready_timeout_s": 90, "requeue_backoff_base_s": 2, "wait_for_pods_ready": True},
                    "clusters": {"slowpoke": {"slow_start": 1}}})
    eventually(lambda: ray_cluster(co, "slowpoke").get("status", {}).get("state") == "ready", 120,
               what="slowpoke to be ready on a later try")
    wl = eventually(lambda: (w := workload_of(co, "slowpoke")) and (c := cond(w, "PodsReady")) and c["status"] == "True" and w,
                    20, what="Kueue to mark the Workload's pods ready")
    assert cond(wl, "PodsReady")["reason"] == "Started" and cond(wl, "Admitted")["status"] == "True"
    assert (cond(wl, "Requeued")["status"], cond(wl, "Requeued")["reason"]) == ("True", "BackoffFinished")
    assert cond(wl, "Evicted")["status"] == "False" and cond(wl, "Evicted")["message"] == "Previously: " + message
    assert wl["status"]["requeueState"]["count"] >= 1
    assert ("Normal", "Started", "Admitted by clusterQueue cluster-queue") in events_about(v1, "slowpoke")


def test_deleted_cluster_holds_its_quota_until_kueue_drops_the_workload_finalizer(sbx):
    # slow_start keeps Ray from starting: only Kueue matters here.
    sbx.set_faults({"platform": {"finalizer_delay_s": 1.5}, "clusters": {"hold-*": {"slow_start": 600}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", raycluster("hold-a", cpu="4"))  # 8 of 9 cpu
    first = eventually(lambda: (w := workload_of(co, "hold-a")) and (c := cond(w, "Admitted")) and c["status"] == "True" and w,
                       20, what="hold-a to be admitted")
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", raycluster("hold-b", cpu="1"))
    second = eventually(lambda: (w := workload_of(co, "hold-b")) and (c := cond(w, "QuotaReserved")) and c["status"] == "False"
                        and w, 20, what="hold-b to wait for quota")
    since = co.list_namespaced_custom_object(*KUEUE)["metadata"]["resourceVersion"]
    co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "hold-a")
    eventually(lambda: (c := cond(workload_of(co, "hold-b"), "Admitted")) and c["status"] == "True", 30,
               what="hold-b to be admitted once hold-a's Workload is gone")

    # Replay what happened to the two Workloads since the delete, in the apiserver's order.
    seen = []
    w = watch.Watch()
    for ev in w.stream(co.list_namespaced_custom_object, *KUEUE, resource_version=since, timeout_seconds=5):
        obj = ev["object"]
        seen.append((ev["type"], obj["metadata"]["name"], bool(obj["metadata"].get("deletionTimestamp")),
                     tuple(obj["metadata"].get("finalizers") or ()), (cond(obj, "Admitted") or {}).get("status")))
        if obj["metadata"]["name"] == second["metadata"]["name"] and seen[-1][-1] == "True":
            w.stop()
    a, b = first["metadata"]["name"], second["metadata"]["name"]
    # The CodeFlare operator's finalizer holds the RayCluster (deletionTimestamp set) for a while:
    # Kueue drops its Workload finalizer once the job is being deleted, and the Workload goes (by
    # garbage collection, at once) only when the RayCluster does.
    dropped = seen.index(next(s for s in seen if s[1] == a and s[3] == ()))
    gone = seen.index(next(s for s in seen if s[0] == "DELETED" and s[1] == a))
    admitted_b = seen.index(next(s for s in seen if s[1] == b and s[4] == "True"))
    assert seen[dropped][4] == "True"  # still admitted, still holding its quota
    assert dropped < gone < admitted_b  # the quota came free only when the Workload was gone


def test_provision_keeps_kueues_record_of_the_admission_for_the_usage_ledger(ray_cluster):
    """As admin (who may read Workloads, as pipeline-runner may with deploy/rbac-kfp-ray.yaml):
    the ledger's resources are the Workload's admitted resourceUsage, its start Kueue's Admitted time."""
    from kfp_ray import usage

    got = usage.admitted(ray_cluster.admitted)
    assert got["source"].startswith("Kueue Workload raycluster-shared-ray-")
    assert got["resources"] == {"cpu": 2.0, "memory": 2 * 2**30, "pods": 1.0}  # the fixture's head; pods: the queue counts them
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", got["admitted_at"])
