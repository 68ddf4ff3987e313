"""KubeRay's RayJob (v1.4.2) with Kueue's RayJob integration (v0.11.6), on real Ray: queued and
admitted as one Workload, the RayCluster KubeRay makes, the submitter pod, status as KubeRay
writes it, TTL, activeDeadlineSeconds, Kueue's webhook, deletion, HTTPMode."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.helpers import eventually, on_platforms, raycluster

NS = "sandbox"
RAY = ("ray.io", "v1", NS)
KUEUE = ("kueue.x-k8s.io", "v1beta1", NS, "workloads")
QUEUE = "local-queue-test"
# `ray job submit -- <entrypoint>` re-joins its words with list2cmdline, as on RHOAI: code with
# spaces survives, `python -c "print(1)"` would reach sh as `python -c print(1)`.
HELLO = "python -c \"import sys; print('hello from the rayjob')\""


def rayjob(name: str, entrypoint: str = HELLO, **spec) -> dict:
    rc = raycluster(name, workers=0, cpu="1", memory="1Gi")
    body = {"entrypoint": entrypoint, "shutdownAfterJobFinishes": True, "rayClusterSpec": rc["spec"], **spec}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}}, "spec": body}


@pytest.fixture
def apis(sbx):
    """(admin CustomObjectsApi, CoreV1Api, pipeline-runner CustomObjectsApi); deletes the test's RayJobs
    and waits until they, their RayClusters and their pods are gone."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    runner = k8s.CustomObjectsApi(sbx.api_client(as_pipeline_runner=True))
    v1 = k8s.CoreV1Api(sbx.api_client())
    before = {o["metadata"]["name"] for o in co.list_namespaced_custom_object(*RAY, "rayjobs")["items"]}
    yield co, v1, runner
    made = {o["metadata"]["name"] for o in co.list_namespaced_custom_object(*RAY, "rayjobs")["items"]} - before
    for name in made:
        co.delete_namespaced_custom_object(*RAY, "rayjobs", name)
    eventually(lambda: not [o for o in co.list_namespaced_custom_object(*RAY, "rayjobs")["items"]
                            if o["metadata"]["name"] in made], 60, what="the test's RayJobs to be gone")
    eventually(lambda: not [rc for rc in co.list_namespaced_custom_object(*RAY, "rayclusters")["items"]
                            if (rc["metadata"].get("labels") or {}).get("ray.io/originated-from-cr-name") in made],
               60, what="their RayClusters to be gone")


def get(co, name):
    return co.get_namespaced_custom_object(*RAY, "rayjobs", name)


def status(co, name) -> dict:
    return get(co, name).get("status") or {}


def workloads_of(co, kind: str, name: str) -> list[dict]:
    return [w for w in co.list_namespaced_custom_object(*KUEUE)["items"]
            if any(r["kind"] == kind and r["name"] == name for r in w["metadata"].get("ownerReferences") or [])]


def cond(obj, type_):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def cq_usage(co) -> dict:
    cq = co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "cluster-queue")
    return {r["name"]: r["total"] for r in cq["status"]["flavorsUsage"][0]["resources"]}


@pytest.mark.ray
def test_queued_rayjob_runs_reports_and_cleans_up(apis):
    co, v1, runner = apis
    made = runner.create_namespaced_custom_object(*RAY, "rayjobs", rayjob("rj-hello", ttlSecondsAfterFinished=1))
    assert made["spec"]["suspend"] is True  # Kueue's mrayjob.kb.io: queued, not yet admitted
    wl = eventually(lambda: next(iter(workloads_of(co, "RayJob", "rj-hello")), None), 15, what="the RayJob's Workload")
    assert wl["metadata"]["name"].startswith("rayjob-rj-hello-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("head", 1), ("small-group", 0), ("submitter", 1)]
    assert wl["spec"]["podSets"][2]["template"]["spec"]["containers"][0]["name"] == "ray-job-submitter"

    done = eventually(lambda: (s := status(co, "rj-hello")).get("jobDeploymentStatus") in ("Complete", "Failed") and s,
                      180, what="the RayJob to finish")
    assert (done["jobDeploymentStatus"], done["jobStatus"]) == ("Complete", "SUCCEEDED"), done
    cluster = done["rayClusterName"]
    assert cluster.startswith("rj-hello-") and len(cluster) == len("rj-hello-") + 5
    assert done["jobId"].startswith("rj-hello-") and done["jobId"] != cluster
    assert done["dashboardURL"] == f"{cluster}-head-svc.{NS}.svc.cluster.local:8265"
    assert (done["succeeded"], done["failed"]) == (1, 0)
    assert done["startTime"] <= done["endTime"]
    assert done["rayJobInfo"]["startTime"] and done["rayJobInfo"]["endTime"]
    assert done["rayClusterStatus"]["state"] == "ready"
    assert "reason" not in done and "observedGeneration" not in done

    # The submitter: the pod of the Job named as the RayJob, its log the driver's output.
    pods = v1.list_namespaced_pod(NS, label_selector="batch.kubernetes.io/job-name=rj-hello").items
    assert [p.status.phase for p in pods] == ["Succeeded"]
    assert pods[0].metadata.labels["job-name"] == "rj-hello"
    args = pods[0].spec.containers[0].args[0]
    assert args.startswith(f"if ! ray job status --address http://{done['dashboardURL']} {done['jobId']} >/dev/null 2>&1 ;")
    assert "hello from the rayjob" in v1.read_namespaced_pod_log(pods[0].metadata.name, NS)

    # The RayCluster went after the TTL; the Workload is Finished and its quota free.
    eventually(lambda: not co.list_namespaced_custom_object(*RAY, "rayclusters", label_selector="ray.io/originated-from-cr-name=rj-hello")["items"],
               60, what="the RayJob's cluster to be deleted")
    wl = eventually(lambda: (w := workloads_of(co, "RayJob", "rj-hello")) and cond(w[0], "Finished") and w[0], 30,
                    what="the Workload to be Finished")
    assert (cond(wl, "Finished")["status"], cond(wl, "Finished")["reason"]) == ("True", "Succeeded")
    assert "kueue.x-k8s.io/resource-in-use" not in (wl["metadata"].get("finalizers") or [])
    eventually(lambda: cq_usage(co)["cpu"] == "0", 30, what="the ClusterQueue's cpu usage back to 0")
    events = {(e.reason, e.message) for e in v1.list_namespaced_event(NS).items if e.involved_object.name == "rj-hello"}
    assert ("CreatedRayCluster", f"Created RayCluster {NS}/{cluster}") in events
    assert ("CreatedRayJobSubmitter", f"Created Kubernetes Job {NS}/rj-hello") in events
    assert ("DeletedRayCluster", f"Deleted cluster {NS}/{cluster}") in events


@pytest.mark.ray
@on_platforms()
def test_rayjob_cluster_is_not_a_second_workload(box, apis):
    """The RayCluster KubeRay makes for a Kueue-managed RayJob: labelled and owned as KubeRay makes
    it, not suspended by Kueue's RayCluster webhook, no Workload of its own; deleting the RayJob
    stops the Ray job and takes the cluster, the submitter and the Workload with it."""
    co, v1, runner = apis
    runner.create_namespaced_custom_object(*RAY, "rayjobs", rayjob(
        "rj-sleep", entrypoint="python -c \"import time; time.sleep(600)\""))
    running = eventually(lambda: (s := status(co, "rj-sleep")).get("jobStatus") == "RUNNING" and s, 180,
                         what="the Ray job to run")
    rc = co.get_namespaced_custom_object(*RAY, "rayclusters", running["rayClusterName"])
    assert rc["metadata"]["labels"]["ray.io/originated-from-cr-name"] == "rj-sleep"
    assert rc["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    assert rc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    owner = rc["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RayJob", "rj-sleep", True)
    assert not rc["spec"].get("suspend")
    # the platform's webhook saw it (KubeRay's on 3.x, CodeFlare's on 2.x)
    assert {"rhoai-3.3": "odh.ray.io/secure-trusted-network", "rhoai-2.25": "ray.openshift.ai/version"}[box.platform.name] \
        in rc["metadata"]["annotations"]
    assert workloads_of(co, "RayCluster", running["rayClusterName"]) == []
    assert len(workloads_of(co, "RayJob", "rj-sleep")) == 1

    runner.delete_namespaced_custom_object(*RAY, "rayjobs", "rj-sleep")
    eventually(lambda: not [o for o in co.list_namespaced_custom_object(*RAY, "rayjobs")["items"]
                            if o["metadata"]["name"] == "rj-sleep"], 60, what="the RayJob to be gone (finalizer)")
    eventually(lambda: not co.list_namespaced_custom_object(*RAY, "rayclusters", label_selector="ray.io/originated-from-cr-name=rj-sleep")["items"]
               and not v1.list_namespaced_pod(NS, label_selector="job-name=rj-sleep").items
               and not workloads_of(co, "RayJob", "rj-sleep"), 90, what="its cluster, submitter and Workload to go")


@pytest.mark.ray
def test_http_mode_failing_entrypoint_is_app_failed(apis):
    co, v1, runner = apis
    runner.create_namespaced_custom_object(*RAY, "rayjobs", rayjob(
        "rj-fail", entrypoint="python -c \"import sys; sys.exit(3)\"", submissionMode="HTTPMode"))
    wl = eventually(lambda: next(iter(workloads_of(co, "RayJob", "rj-fail")), None), 15, what="the Workload")
    assert [p["name"] for p in wl["spec"]["podSets"]] == ["head", "small-group"]  # no submitter in HTTPMode
    done = eventually(lambda: (s := status(co, "rj-fail")).get("jobDeploymentStatus") in ("Complete", "Failed") and s,
                      180, what="the RayJob to finish")
    assert (done["jobDeploymentStatus"], done["jobStatus"], done["reason"]) == ("Failed", "FAILED", "AppFailed"), done
    assert "exit code 3" in done["message"]
    assert (done["failed"], done["succeeded"]) == (1, 0)
    assert not v1.list_namespaced_pod(NS, label_selector="job-name=rj-fail").items
    wl = eventually(lambda: (w := workloads_of(co, "RayJob", "rj-fail")) and cond(w[0], "Finished") and w[0], 30,
                    what="the Workload to be Finished")
    assert cond(wl, "Finished")["reason"] == "Failed"
    eventually(lambda: not co.list_namespaced_custom_object(*RAY, "rayclusters", label_selector="ray.io/originated-from-cr-name=rj-fail")["items"],
               60, what="the cluster to be deleted (ttlSecondsAfterFinished 0)")


@pytest.mark.ray
def test_active_deadline_fails_the_job_and_deletes_the_cluster(apis, sbx):
    co, _, runner = apis
    sbx.set_faults({"clusters": {"rj-late-*": {"slow_start": 600}}})  # the deadline passes while it initializes
    runner.create_namespaced_custom_object(*RAY, "rayjobs", rayjob(
        "rj-late", entrypoint="python -c \"import time; time.sleep(600)\"", activeDeadlineSeconds=2))
    done = eventually(lambda: (s := status(co, "rj-late")).get("jobDeploymentStatus") == "Failed" and s, 60,
                      what="the RayJob to pass its deadline")
    assert done["reason"] == "DeadlineExceeded"
    assert done["message"].startswith("The RayJob has passed the activeDeadlineSeconds. StartTime: ")
    assert done["message"].endswith(". ActiveDeadlineSeconds: 2")
    eventually(lambda: not co.list_namespaced_custom_object(*RAY, "rayclusters", label_selector="ray.io/originated-from-cr-name=rj-late")["items"],
               60, what="the cluster to be deleted")


@pytest.mark.parametrize("change, message", [
    ({"shutdownAfterJobFinishes": False},
     "spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the cluster after finishing"),
    ({"clusterSelector": {"ray.io/cluster": "elsewhere"}},
     'spec.clusterSelector: Invalid value: map[string]string{"ray.io/cluster":"elsewhere"}: '
     "a kueue managed job should not use an existing cluster"),
    ({"rayClusterSpec": {"enableInTreeAutoscaling": True}},
     "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should not use autoscaling"),
])
def test_kueue_webhook_rejects_what_kueue_rejects(apis, change, message):
    co, _, runner = apis
    body = rayjob("rj-bad")
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(body["spec"].get(key), dict):
            body["spec"][key].update(value)
        else:
            body["spec"][key] = value
    with pytest.raises(ApiException) as exc:
        runner.create_namespaced_custom_object(*RAY, "rayjobs", body)
    assert exc.value.status == 403
    assert json.loads(exc.value.body)["message"] == f'admission webhook "vrayjob.kb.io" denied the request: {message}'
