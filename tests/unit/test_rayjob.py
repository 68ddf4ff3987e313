"""KubeRay v1.4.2's RayJob controller and Kueue v0.11.6's RayJob integration, driven pass by pass on
a bare store with a fake clock and a fake dashboard: no Ray, no threads, no sleeping."""

from __future__ import annotations

import re

import pytest

from kfp_ray_sandbox.apiserver import errors
from kfp_ray_sandbox.controllers import rayjob as rj_mod
from kfp_ray_sandbox.controllers.kueue_jobs import RayJobJob, validate_rayjob
from kfp_ray_sandbox.controllers.rayjob import (
    FINALIZER,
    RayJobController,
    check_backoff_limit,
    generate_name,
    k8s_job_command,
    validate_spec,
)
from tests.helpers import FakeClock, raycluster
from tests.unit.test_kueue import cond, cq_usage, make_kueue

NS = "sandbox"
T0 = 1_800_000_000.0


def rayjob(name="job", queue="local-queue-test", **spec) -> dict:
    rc = raycluster(name, workers=1, cpu="1", memory="1Gi", queue=None)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {}},
            "spec": {"entrypoint": "python -c \"import sys; print(1)\"", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": rc["spec"], **spec}}


class FakeDashboard:
    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.submitted: list[dict] = []
        self.stopped: list[str] = []

    def job_info(self, job_id):
        if job_id not in self.jobs:
            raise rj_mod.DashboardError(f"Job {job_id} does not exist on the cluster", not_found=True)
        return self.jobs[job_id]

    def submit(self, rayjob):
        self.submitted.append(rayjob)
        self.jobs[rayjob["status"]["jobId"]] = {"status": "PENDING", "message": "Job has not started yet."}

    def stop(self, job_id):
        self.stopped.append(job_id)


@pytest.fixture
def box():
    """The Kueue controller (with the seed's queues) and a RayJob controller on one store."""
    kueue = make_kueue()
    ctl = RayJobController(kueue.store, kueue.registry, admit=kueue.admission, clock=FakeClock(T0))
    ctl.fake = FakeDashboard()
    ctl._dashboard = lambda rj: ctl.fake
    return kueue, ctl


def settle(*ctls, passes=60):
    store = ctls[0].store
    for _ in range(passes):
        before = store.rv
        for c in ctls:
            c.reconcile()
        if store.rv == before:
            return
    raise AssertionError("did not settle")


def create(kueue, body):
    kueue.admission("CREATE", kueue.rj_t, body, None)
    return kueue.store.create(kueue.rj_t, body)


def get(ctl, name="job"):
    return ctl.store.get(ctl.rj_t, NS, name)


def make_ready(ctl, rc_name, ns=NS):
    """What KubeRay's RayCluster controller does: the head Service, then state ready."""
    svc_t = ctl.rt("", "services")
    if ctl.store.find(svc_t, ns, f"{rc_name}-head-svc") is None:
        ctl.store.create(svc_t, {"metadata": {"name": f"{rc_name}-head-svc", "namespace": ns},
                                 "spec": {"clusterIP": "127.0.1.5", "ports": [{"name": "dashboard", "port": 8265}]}})
    ctl.store.mutate(ctl.rc_t, ns, rc_name, lambda o: o.setdefault("status", {}).update(state="ready"),
                     subresource="status")


def submitter_pods(ctl, name="job"):
    return [p for p in ctl.store.list(ctl.pod_t, NS)[0] if (p["metadata"].get("labels") or {}).get("job-name") == name]


def set_phase(ctl, pod, phase, finished=None):
    def fn(o):
        o.setdefault("status", {})["phase"] = phase
        if finished:
            o["status"]["containerStatuses"] = [{"name": "ray-job-submitter",
                                                 "state": {"terminated": {"finishedAt": finished}}}]
    ctl.store.mutate(ctl.pod_t, NS, pod["metadata"]["name"], fn, subresource="status")


# --- pure parts --------------------------------------------------------------------
def test_names_are_kubernetes_random_suffixes():
    name = generate_name("my-job")
    assert re.fullmatch(r"my-job-[bcdfghjklmnpqrstvwxz2456789]{5}", name)


def test_k8s_job_command_is_kuberays_shell_line():
    body = rayjob(runtimeEnvYAML="pip:\n  - requests\nenv_vars:\n  A: b\n")
    body["status"] = {"dashboardURL": "c-head-svc.sandbox.svc.cluster.local:8265", "jobId": "job-abcde"}
    assert " ".join(k8s_job_command(body)) == (
        "if ! ray job status --address http://c-head-svc.sandbox.svc.cluster.local:8265 job-abcde >/dev/null 2>&1 ; "
        "then ray job submit --address http://c-head-svc.sandbox.svc.cluster.local:8265 --no-wait "
        '--runtime-env-json "{\\"env_vars\\":{\\"A\\":\\"b\\"},\\"pip\\":[\\"requests\\"]}" '
        "--submission-id job-abcde -- python -c \"import sys; print(1)\" ; fi ; "
        "ray job logs --address http://c-head-svc.sandbox.svc.cluster.local:8265 --follow job-abcde")


def test_validate_spec_messages():
    assert validate_spec(rayjob()) is None
    assert validate_spec(rayjob(shutdownAfterJobFinishes=False, suspend=True)) == \
        "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"
    assert validate_spec(rayjob(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=5)) == \
        "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished"
    assert validate_spec(rayjob(activeDeadlineSeconds=0)) == "activeDeadlineSeconds must be a positive integer"
    assert validate_spec(rayjob(deletionPolicy="DeleteCluster")) == \
        "RayJobDeletionPolicy feature gate must be enabled to use the DeletionPolicy feature"


def test_backoff_limit_retries_but_not_past_a_deadline():
    status = {"jobDeploymentStatus": "Failed", "reason": "AppFailed"}
    check_backoff_limit(status, {"backoffLimit": 1})
    assert (status["jobDeploymentStatus"], status["failed"], status["succeeded"]) == ("Retrying", 1, 0)
    status = {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}
    check_backoff_limit(status, {"backoffLimit": 1})
    assert status["jobDeploymentStatus"] == "Failed"
    status = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "failed": 1}
    check_backoff_limit(status, {})
    assert (status["failed"], status["succeeded"]) == (1, 1)


def test_kueue_pod_sets_and_webhook_messages():
    sets = RayJobJob(rayjob()).pod_sets()
    assert [(s["name"], s["count"]) for s in sets] == [("head", 1), ("small-group", 1), ("submitter", 1)]
    assert sets[2]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
    assert [s["name"] for s in RayJobJob(rayjob(submissionMode="HTTPMode")).pod_sets()] == ["head", "small-group"]
    bad = rayjob(shutdownAfterJobFinishes=False, clusterSelector={"b": "2", "a": "1"})
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] = "head"
    assert validate_rayjob(bad) == [
        "spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the cluster after finishing",
        'spec.clusterSelector: Invalid value: map[string]string{"a":"1", "b":"2"}: '
        "a kueue managed job should not use an existing cluster",
        'spec.rayClusterSpec.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved for the head group']


def test_webhooks_suspend_queued_rayjobs_and_aggregate_errors(box):
    kueue, _ = box
    made = create(kueue, rayjob())
    assert made["spec"]["suspend"] is True
    with pytest.raises(errors.ApiError) as exc:  # the ODH webhook covers rayjobs in a managed namespace
        create(kueue, rayjob("free", queue=None))
    assert exc.value.message == ('admission webhook "ray-kueuelabels-validator.opendatahub.io" denied the request: '
                                 'Kueue label validation failed: missing required label "kueue.x-k8s.io/queue-name"')
    body = rayjob("bad", shutdownAfterJobFinishes=False)
    body["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    with pytest.raises(errors.ApiError) as exc:
        create(kueue, body)
    assert exc.value.message == (
        'admission webhook "vrayjob.kb.io" denied the request: [spec.shutdownAfterJobFinishes: Invalid value: false: '
        "a kueue managed job should delete the cluster after finishing, spec.rayClusterSpec.enableInTreeAutoscaling: "
        "Invalid value: true: a kueue managed job should not use autoscaling]")


# --- the state machine -----------------------------------------------------------------
def test_queued_rayjob_lifecycle(box):
    kueue, ctl = box
    create(kueue, rayjob(ttlSecondsAfterFinished=10))
    settle(kueue, ctl)
    job = get(ctl)
    assert FINALIZER in job["metadata"]["finalizers"]
    wl = next(iter(kueue.store.list(kueue.wl_t, NS)[0]))
    assert wl["metadata"]["name"].startswith("rayjob-job-")
    assert job["spec"]["suspend"] is False  # admitted at once: the queue is empty
    status = job["status"]
    assert status["jobDeploymentStatus"] == "Initializing" and status["jobStatus"] == "" if "jobStatus" in status \
        else status["jobDeploymentStatus"] == "Initializing"
    rc_name = status["rayClusterName"]
    rc = ctl.store.get(ctl.rc_t, NS, rc_name)
    assert rc["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert not rc["spec"].get("suspend")  # Kueue's mraycluster.kb.io leaves a managed job's child alone
    assert [w["metadata"]["ownerReferences"][0]["kind"] for w in kueue.store.list(kueue.wl_t, NS)[0]] == ["RayJob"]

    make_ready(ctl, rc_name)
    settle(kueue, ctl)
    status = get(ctl)["status"]
    assert status["jobDeploymentStatus"] == "Running"
    assert status["dashboardURL"] == f"{rc_name}-head-svc.sandbox.svc.cluster.local:8265"
    pods = submitter_pods(ctl)
    assert len(pods) == 1 and pods[0]["metadata"]["name"].startswith("job-")
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["RAY_JOB_SUBMISSION_ID"] == status["jobId"] and env["PYTHONUNBUFFERED"] == "1"
    assert pods[0]["spec"]["containers"][0]["command"] == ["/bin/bash", "-ce", "--"]

    ctl.fake.jobs[status["jobId"]] = {"status": "RUNNING", "message": "Job is currently running.", "start_time": T0 * 1000}
    ctl.clock.advance(3)
    settle(kueue, ctl)
    status = get(ctl)["status"]
    assert (status["jobStatus"], status["rayClusterStatus"]["state"]) == ("RUNNING", "ready")
    # RHOAI 3.3's Kueue runs without waitForPodsReady: no PodsReady condition (2.25's is True here)
    assert cond(next(iter(kueue.store.list(kueue.wl_t, NS)[0])), "PodsReady") is None

    ctl.fake.jobs[status["jobId"]] = {"status": "SUCCEEDED", "message": "Job finished successfully.",
                                      "start_time": T0 * 1000, "end_time": (T0 + 4) * 1000}
    ctl.clock.advance(3)
    settle(kueue, ctl)
    assert get(ctl)["status"]["jobDeploymentStatus"] == "Running"  # the submitter has not finished yet
    set_phase(ctl, pods[0], "Succeeded")
    settle(kueue, ctl)
    status = get(ctl)["status"]
    assert (status["jobDeploymentStatus"], status["succeeded"], status["failed"]) == ("Complete", 1, 0)
    assert status["endTime"]
    wl = next(iter(kueue.store.list(kueue.wl_t, NS)[0]))
    assert (cond(wl, "Finished")["status"], cond(wl, "Finished")["reason"]) == ("True", "Succeeded")
    assert cq_usage(kueue)["cpu"] == "0"
    assert ctl.store.find(ctl.rc_t, NS, rc_name) is not None  # the TTL has not passed
    ctl.clock.advance(10)
    settle(kueue, ctl)
    assert ctl.store.find(ctl.rc_t, NS, rc_name) is None
    assert len(submitter_pods(ctl)) == 1  # the submitter stays, for its logs


def test_submitter_backoff_limit_fails_submission(box):
    kueue, ctl = box
    create(kueue, rayjob(submitterConfig={"backoffLimit": 0}))
    settle(kueue, ctl)
    make_ready(ctl, get(ctl)["status"]["rayClusterName"])
    settle(kueue, ctl)
    pod = submitter_pods(ctl)[0]
    set_phase(ctl, pod, "Failed", finished=rj_mod._rfc3339(T0))
    settle(kueue, ctl)
    status = get(ctl)["status"]
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "SubmissionFailed")
    assert status["message"] == ("Job submission has failed. Reason: BackoffLimitExceeded. "
                                 "Message: Job has reached the specified backoff limit")


def test_http_mode_submits_and_a_suspend_resets(box):
    kueue, ctl = box
    create(kueue, rayjob(submissionMode="HTTPMode"))
    settle(kueue, ctl)
    rc_name = get(ctl)["status"]["rayClusterName"]
    make_ready(ctl, rc_name)
    settle(kueue, ctl)
    assert [r["status"]["jobId"] for r in ctl.fake.submitted] == [get(ctl)["status"]["jobId"]]
    assert submitter_pods(ctl) == []
    # KubeRay's side of a suspend (Kueue, its Workload still admitted, would start the job again)
    ctl.store.mutate(ctl.rj_t, NS, "job", lambda o: o["spec"].update(suspend=True))
    settle(ctl)
    status = get(ctl)["status"]
    assert status["jobDeploymentStatus"] == "Suspended"
    assert "rayClusterName" not in status and "jobId" not in status and status["rayJobInfo"] == {}
    assert ctl.store.find(ctl.rc_t, NS, rc_name) is None


def test_active_deadline_and_deletion(box):
    kueue, ctl = box
    create(kueue, rayjob(activeDeadlineSeconds=5))
    settle(kueue, ctl)
    rc_name = get(ctl)["status"]["rayClusterName"]
    ctl.clock.advance(5)
    settle(kueue, ctl)
    status = get(ctl)["status"]
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "DeadlineExceeded")
    assert status["message"].endswith("ActiveDeadlineSeconds: 5")
    assert ctl.store.find(ctl.rc_t, NS, rc_name) is None
    ctl.store.delete(ctl.rj_t, NS, "job")
    settle(kueue, ctl)
    assert ctl.store.find(ctl.rj_t, NS, "job") is None


def test_pods_ready_timeout_evicts_and_suspends_the_rayjob(box):
    kueue, ctl = box
    kueue.faults.set({"platform": {"wait_for_pods_ready": True}})
    create(kueue, rayjob())
    settle(kueue, ctl)
    rc_name = get(ctl)["status"]["rayClusterName"]
    assert cq_usage(kueue)["cpu"] != "0"
    kueue.clock.advance(kueue.faults.platform("pods_ready_timeout_s"))
    settle(kueue, ctl)
    job = get(ctl)
    assert job["spec"]["suspend"] is True and job["status"]["jobDeploymentStatus"] == "Suspended"
    assert ctl.store.find(ctl.rc_t, NS, rc_name) is None
    wl = next(iter(kueue.store.list(kueue.wl_t, NS)[0]))
    assert (cond(wl, "Evicted")["reason"], cond(wl, "QuotaReserved")["status"]) == ("PodsReadyTimeout", "False")
    assert cq_usage(kueue)["cpu"] == "0"
    events = {(e["reason"], e["message"]) for e in ctl.store.list(ctl.rt("", "events"), NS)[0]
              if e["involvedObject"]["name"] == "job"}
    assert ("Stopped", f"Exceeded the PodsReady timeout {NS}/{wl['metadata']['name']}") in events


def deployment_states(store, rt, name, since=0) -> list[str]:
    """Every jobDeploymentStatus a watcher of the RayJob sees, repeats collapsed."""
    seen = []
    for e in store.events_since(since, key=rt.key):
        if e.obj["metadata"]["name"] == name and e.type != "DELETED":
            state = (e.obj.get("status") or {}).get("jobDeploymentStatus", "")
            if not seen or seen[-1] != state:
                seen.append(state)
    return seen


def run(kueue, passes=60):
    """The sandbox's thread for both: Kueue's pass, then KubeRay's RayJob controller (core.py)."""
    for _ in range(passes):
        before = kueue.store.rv
        kueue.run_pass()
        if kueue.store.rv == before:
            return
    raise AssertionError("did not settle")


def test_watch_order_with_free_quota(box):
    """kueue.py ORDER: with free quota Kueue starts the RayJob before KubeRay's first step, so no
    Suspending/Suspended is seen; with no quota KubeRay walks it to Suspended, and back through
    New once Kueue admits it."""
    kueue, ctl = box
    ctl.follow(kueue)
    since = kueue.store.rv
    create(kueue, rayjob("free"))
    run(kueue)
    make_ready(ctl, get(ctl, "free")["status"]["rayClusterName"])
    run(kueue)
    assert deployment_states(kueue.store, ctl.rj_t, "free", since) == ["", "Initializing", "Running"]


def test_watch_order_with_a_full_queue(box):
    kueue, ctl = box
    ctl.follow(kueue)
    kueue.faults.set({"clusters": {"full": {"never_admit": True}}})
    since = kueue.store.rv
    create(kueue, rayjob("full"))
    run(kueue)
    assert deployment_states(kueue.store, ctl.rj_t, "full", since) == ["", "Initializing", "Suspending", "Suspended"]
    kueue.faults.set({})
    run(kueue)
    make_ready(ctl, get(ctl, "full")["status"]["rayClusterName"])
    run(kueue)
    assert deployment_states(kueue.store, ctl.rj_t, "full", since) == [
        "", "Initializing", "Suspending", "Suspended", "", "Initializing", "Running"]


def test_a_rayjob_kueue_has_not_seen_waits(box):
    """One created between Kueue's pass and KubeRay's is left for the next pass (seen_rv)."""
    kueue, ctl = box
    ctl.follow(kueue)
    kueue.reconcile()
    create(kueue, rayjob("late"))
    ctl.reconcile()
    assert "status" not in get(ctl, "late")
    run(kueue)
    assert get(ctl, "late")["spec"]["suspend"] is False


def test_cluster_selector_submitter_runs_the_clusters_image(box):
    """common.GetDefaultSubmitterTemplate takes the head image of the RayCluster the job runs on: a
    clusterSelector job (no rayClusterSpec) gets the selected cluster's, here the SDK's py312 image."""
    from codeflare_sdk.common.utils.constants import CUDA_PY312_RUNTIME_IMAGE

    kueue, ctl = box
    ns = "default"  # not kueue-managed: there RHOAI's webhooks refuse a clusterSelector job either way
    rc = raycluster("existing", workers=0, cpu="1", memory="1Gi", queue=None)
    rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = CUDA_PY312_RUNTIME_IMAGE
    ctl.store.create(ctl.rc_t, {**rc, "metadata": {**rc["metadata"], "namespace": ns}})
    make_ready(ctl, "existing", ns)
    body = rayjob("sel", queue=None, clusterSelector={"ray.io/cluster": "existing"}, shutdownAfterJobFinishes=False)
    del body["spec"]["rayClusterSpec"]
    body["metadata"]["namespace"] = ns
    create(kueue, body)
    settle(kueue, ctl)
    assert ctl.store.get(ctl.rj_t, ns, "sel")["status"]["jobDeploymentStatus"] == "Running"
    [pod] = [p for p in ctl.store.list(ctl.pod_t, ns)[0] if p["metadata"]["labels"].get("job-name") == "sel"]
    assert [c["image"] for c in pod["spec"]["containers"]] == [CUDA_PY312_RUNTIME_IMAGE]
