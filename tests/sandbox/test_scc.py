"""OpenShift's SCC admission in the running sandbox, through the real kubernetes client: a
RayCluster whose head asks to run as root never gets a head (KubeRay's FailedToCreateHeadPod
event and ReplicaFailure carry the apiserver's SCC refusal), and kfp-ray's diagnosis names it.
No Ray process starts: the pod is never created."""

from __future__ import annotations

from kubernetes import client as k8s

from kfp_ray.diagnose import replica_failure
from tests.helpers import eventually, raycluster

NS = "sandbox"


def test_a_head_asking_for_root_is_refused_by_the_sccs_and_diagnosed(sbx):
    api = sbx.api_client()
    co = k8s.CustomObjectsApi(api)
    body = raycluster("asroot", workers=0)
    body["spec"]["headGroupSpec"]["template"]["spec"]["securityContext"] = {"runAsUser": 0}
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)
    try:
        def failure():
            rc = co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "asroot")
            cond = next((c for c in (rc.get("status") or {}).get("conditions") or [] if c["type"] == "ReplicaFailure"), None)
            return (rc, cond) if cond else None
        rc, cond = eventually(failure, 60, what="KubeRay's ReplicaFailure condition")
        assert cond["reason"] == "FailedCreateHeadPod"
        assert cond["message"].startswith('FailedCreateHeadPod\npods "asroot-head-" is forbidden: unable to validate '
                                          'against any security context constraint: [provider "anyuid": Forbidden: '
                                          "not usable by user or serviceaccount, provider run-as-ray-user: "
                                          ".containers[0].runAsUser: Invalid value: 0: must be: 1000")
        ns = k8s.CoreV1Api(api).read_namespace(NS).metadata.annotations
        lo = int(ns["openshift.io/sa.scc.uid-range"].split("/")[0])
        assert f"provider restricted-v2: .containers[0].runAsUser: Invalid value: 0: must be in the ranges: [{lo}, " \
               f"{lo + 9999}]" in cond["message"]
        events = k8s.CoreV1Api(api).list_namespaced_event(NS, field_selector="involvedObject.name=asroot").items
        assert any(e.reason == "FailedToCreateHeadPod" and "security context constraint" in e.message for e in events)
        assert k8s.CoreV1Api(api).list_namespaced_pod(NS, label_selector="ray.io/cluster=asroot").items == []
        problem = str(replica_failure(rc))
        assert "OpenShift's security context constraints refuse the pod: the pod asks runAsUser 0, outside this " \
               f"namespace's UID range {lo}-{lo + 9999}" in problem
        assert "oc adm policy add-scc-to-user anyuid -z" in problem
    finally:
        co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "asroot")
