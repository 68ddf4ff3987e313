"""Kueue preemption in the running sandbox, through the real kubernetes client: a higher-priority
RayCluster or RayJob takes a lower one's quota (ClusterQueue withinClusterQueue: LowerPriority),
KubeRay stops the victim, and it is readmitted when the quota frees. No Ray: the clusters' pods
stay starting (slow_start), which Kueue treats as it treats a running cluster's until KubeRay
reports it stopped (sandbox/controllers/kueue_preemption.py; the running case: tests/unit)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.helpers import eventually, labelled, preempting_queue, raycluster
from tests.sandbox.test_kueue_eviction import cond, events_about, workload_of
from tests.sandbox.test_rayjob import rayjob

NS = "sandbox"
RAY = ("ray.io", "v1", NS)


@pytest.fixture
def preempting(sbx):
    """The sandbox's ClusterQueue with withinClusterQueue LowerPriority and two WorkloadPriorityClasses,
    restored afterwards; the test's clusters never start Ray."""
    api = sbx.api_client()
    co, v1 = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    sbx.set_faults({"clusters": {"pre-*": {"slow_start": 600}}})
    with preempting_queue(co, {"pre-low": 100, "pre-high": 1000}):
        yield co, v1


def test_a_higher_priority_raycluster_preempts_a_lower_one_which_comes_back_when_it_goes(preempting):
    co, v1 = preempting
    co.create_namespaced_custom_object(*RAY, "rayclusters", labelled(raycluster("pre-low", workers=0, cpu="5"), "pre-low"))
    eventually(lambda: (co.get_namespaced_custom_object(*RAY, "rayclusters", "pre-low")["spec"].get("suspend") is False),
               30, what="pre-low to be admitted")
    co.create_namespaced_custom_object(*RAY, "rayclusters", labelled(raycluster("pre-high", workers=0, cpu="5"), "pre-high"))
    high = eventually(lambda: (w := workload_of(co, "pre-high")) and cond(w, "Admitted")
                      and cond(w, "Admitted")["status"] == "True" and w, 30, what="pre-high to be admitted")
    low = workload_of(co, "pre-low")
    msg = (f"Preempted to accommodate a workload (UID: {high['metadata']['uid']}, JobUID: "
           f"{high['metadata']['labels']['kueue.x-k8s.io/job-uid']}) due to prioritization in the ClusterQueue")
    assert (low["spec"]["priority"], high["spec"]["priority"]) == (100, 1000)
    assert (cond(low, "Evicted")["reason"], cond(low, "Evicted")["message"]) == ("Preempted", msg)
    assert (cond(low, "Preempted")["reason"], cond(low, "Requeued")["reason"]) == ("InClusterQueue", "Preempted")
    assert co.get_namespaced_custom_object(*RAY, "rayclusters", "pre-low")["spec"]["suspend"] is True
    assert ("Normal", "Stopped", msg) in events_about(v1, "pre-low")
    assert {("Normal", "Preempted", msg), ("Normal", "EvictedDueToPreempted", msg)} <= events_about(v1, low["metadata"]["name"])  # 3.3: v0.12
    assert any(r == "Pending" and m.endswith(". Pending the preemption of 1 workload(s)")
               for _, r, m in events_about(v1, high["metadata"]["name"]))

    co.delete_namespaced_custom_object(*RAY, "rayclusters", "pre-high")
    low = eventually(lambda: (w := workload_of(co, "pre-low")) and cond(w, "Admitted")["status"] == "True" and w,
                     30, what="pre-low to be readmitted")
    assert (cond(low, "Evicted")["status"], cond(low, "Evicted")["message"]) == ("False", "Previously: " + msg)
    assert co.get_namespaced_custom_object(*RAY, "rayclusters", "pre-low")["spec"]["suspend"] is False


def test_a_preempted_rayjob_is_suspended_and_comes_back_with_a_new_cluster_and_job_id(preempting):
    co, v1 = preempting
    co.create_namespaced_custom_object(*RAY, "rayjobs", labelled(rayjob("pre-low-job"), "pre-low"))
    first = eventually(lambda: (s := co.get_namespaced_custom_object(*RAY, "rayjobs", "pre-low-job").get("status") or {})
                       .get("jobDeploymentStatus") == "Initializing" and s.get("rayClusterName") and s, 30,
                       what="pre-low-job to be admitted and its cluster created")
    big = labelled(raycluster("pre-high", workers=0, cpu="8"), "pre-high")
    co.create_namespaced_custom_object(*RAY, "rayclusters", big)
    eventually(lambda: (s := co.get_namespaced_custom_object(*RAY, "rayjobs", "pre-low-job").get("status") or {})
               .get("jobDeploymentStatus") == "Suspended" and s, 30, what="KubeRay to suspend the preempted RayJob")
    gone = co.get_namespaced_custom_object(*RAY, "rayjobs", "pre-low-job")["status"]
    assert not gone.get("jobId") and not gone.get("rayClusterName")
    eventually(lambda: first["rayClusterName"] not in {rc["metadata"]["name"] for rc in
                                                       co.list_namespaced_custom_object(*RAY, "rayclusters")["items"]},
               30, what="KubeRay to delete the preempted RayJob's cluster")
    eventually(lambda: (w := workload_of(co, "pre-high")) and cond(w, "Admitted")["status"] == "True",
               30, what="pre-high to be admitted")

    co.delete_namespaced_custom_object(*RAY, "rayclusters", "pre-high")
    again = eventually(lambda: (s := co.get_namespaced_custom_object(*RAY, "rayjobs", "pre-low-job").get("status") or {})
                       .get("jobDeploymentStatus") == "Initializing" and s.get("rayClusterName") and s, 30,
                       what="pre-low-job to be readmitted")
    assert again["rayClusterName"] != first["rayClusterName"] and again["jobId"] != first["jobId"]
    assert again["jobId"].startswith("pre-low-job-")
