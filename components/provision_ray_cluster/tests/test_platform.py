"""provision_ray_cluster under what OpenShift AI's platform does to a cluster: Kueue's
pods-ready evictions, KubeRay's ReplicaFailure, a broken CodeFlare sidecar, and a cluster
of the same name still being deleted. Against the sandbox, in-process (the task's code
path without kfp.local's start-up), as RHOAI's pipeline-runner unless said otherwise."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.errors import AdmissionTimeout, Evicted, PodsFailing, StartupTimeout
from tests.helpers import FakeClock, eventually, on_platforms, raycluster

SMALL = dict(num_workers=0, head_cpu="500m", head_memory="1Gi", local_queue="local-queue-test")
# Kueue's waitForPodsReady, on as RHOAI 2.x ships it and as a 3.x administrator turns it on (the Kueue
# CR's gangScheduling.policy: ByWorkload), made short: pods not ready within 2 s are evicted,
# requeued after 1 s, 2 s, ...
FAST_EVICTION = {"pods_ready_timeout_s": 2, "requeue_backoff_base_s": 1, "wait_for_pods_ready": True}
HOLD = "test.kfp-ray.io/hold"  # a finalizer only the test removes: deletion stays in progress until then


def rayclusters(sbx):
    co = k8s.CustomObjectsApi(sbx.api_client())
    return {rc["metadata"]["name"]: rc for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]}


def workload_of(sbx, cluster: str) -> dict:
    co = k8s.CustomObjectsApi(sbx.api_client())
    return next((w for w in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "workloads")["items"]
                 if any(r.get("name") == cluster for r in w["metadata"].get("ownerReferences") or [])), {})


def evicted(wl: dict) -> bool:
    return any(c["type"] == "Evicted" and c["status"] == "True" for c in (wl.get("status") or {}).get("conditions") or [])


class Output:
    """The task's log lines while it runs in another thread (capsys, accumulated)."""

    def __init__(self, capsys):
        self.capsys, self.text = capsys, ""

    def __contains__(self, needle: str) -> bool:
        self.text += self.capsys.readouterr().out
        return needle in self.text


# --- Kueue evictions ------------------------------------------------------------------
def test_two_evictions_fail_naming_the_cause_and_the_fix(box, sbx, as_pipeline_runner, capsys):
    """Pods that are never ready in time: Kueue evicts, requeues, evicts again; the task
    gives up at the second eviction with the cause and the fix, and deletes the cluster.
    pipeline-runner cannot read the Workload: it sees the cluster suspended again."""
    sbx.set_faults({"platform": FAST_EVICTION, "clusters": {"evictee": {"slow_start": 300}}})
    with pytest.raises(Evicted) as exc:
        tasks.provision(run_id="r-evict", cluster_name="evictee", admission_timeout=120, startup_timeout=120, **SMALL)
    msg = str(exc.value)
    assert "RayCluster 'evictee' was evicted by Kueue 2 times" in msg
    assert "pods-ready timeout (waitForPodsReady: on by default on OpenShift AI 2.x, 5 minutes; on 3.x where" in msg
    assert "image whose pull takes longer" in msg
    assert "pre-pull the image" in msg and "smaller image" in msg and "raise Kueue's waitForPodsReady.timeout" in msg
    out = capsys.readouterr().out
    assert "suspended again after Kueue had admitted it" in out
    assert "eviction 1 of 2 tolerated" in out and "waiting for admission again" in out
    assert "deleting RayCluster evictee" in out and rayclusters(sbx) == {}


def test_an_autoscaler_replica_change_is_not_an_eviction(box, sbx, as_pipeline_runner, capsys):
    """Issue 25 item 8: spec writes that are not suspensions (an autoscaler scaling a worker group
    up and down while the pods start) move the generation; no eviction is counted. The pods never
    start (no Ray needed): the wait ends at its startup timeout (a fake clock), not at an
    eviction; the writes land between two of its polls, once it has seen the cluster admitted."""
    from kfp_ray.readiness import wait_ready

    sbx.set_faults({"clusters": {"scaled": {"slow_start": 600}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                       raycluster("scaled", workers=1, cpu="100m", memory="256Mi"))
    eventually(lambda: not rayclusters(sbx)["scaled"]["spec"].get("suspend"), 60, what="Kueue to admit scaled")
    clock, generations = FakeClock(), []

    def sleep(seconds):
        if not generations:  # the first pause of the starting phase: the autoscaler writes twice
            rc = rayclusters(sbx)["scaled"]
            groups = rc["spec"]["workerGroupSpecs"]
            for replicas in (2, 1):
                groups[0]["replicas"] = replicas
                co.patch_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "scaled",
                                                  {"spec": {"workerGroupSpecs": groups}})
            generations.append((rc["metadata"]["generation"], rayclusters(sbx)["scaled"]["metadata"]["generation"]))
        clock.sleep(seconds)

    with pytest.raises(StartupTimeout):
        wait_ready("scaled", "sandbox", "local-queue-test", admission_timeout=600, startup_timeout=60,
                   clock=clock, sleep=sleep)
    [(before, after)] = generations
    assert after >= before + 2  # two spec writes the wait went on polling through
    out = capsys.readouterr().out
    assert "evict" not in out.lower(), out


def test_kueues_eviction_reason_is_logged_where_workloads_are_readable(box, sbx, as_admin, capsys):
    sbx.set_faults({"platform": FAST_EVICTION, "clusters": {"evictee": {"slow_start": 300}}})
    with pytest.raises(Evicted, match="evicted by Kueue 2 times"):
        tasks.provision(run_id="r-evict-admin", cluster_name="evictee", admission_timeout=120, startup_timeout=120,
                        **SMALL)
    out = capsys.readouterr().out
    assert "Kueue evicted it: PodsReadyTimeout: Exceeded the PodsReady timeout sandbox/" in out
    assert "eviction 1 of 2 tolerated: Kueue requeues it" in out


@pytest.mark.ray
def test_after_one_eviction_the_task_keeps_waiting_and_succeeds(box, sbx, as_pipeline_runner, capsys):
    """Evicted once (slow pods), then Kueue's timeout is generous enough: the task waits
    through the requeue within its budgets and returns a ready cluster."""
    # The requeue backoff (8 s) leaves the test ample time to lengthen Kueue's timeout before the re-admission.
    first = {"pods_ready_timeout_s": 2, "requeue_backoff_base_s": 8, "wait_for_pods_ready": True}
    sbx.set_faults({"platform": first, "clusters": {"evict-once": {"slow_start": 6}}})
    outcome = {}

    def provision():
        try:
            outcome["ok"] = tasks.provision(run_id="r-evict-once", cluster_name="evict-once", admission_timeout=120,
                                            startup_timeout=180, **SMALL)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    t = threading.Thread(target=provision)
    t.start()
    eventually(lambda: evicted(workload_of(sbx, "evict-once")), 60, what="Kueue's first eviction")
    sbx.set_faults({"platform": {**first, "pods_ready_timeout_s": 300}, "clusters": {"evict-once": {"slow_start": 6}}})
    t.join(timeout=240)
    assert "error" not in outcome, outcome.get("error")
    out = capsys.readouterr().out
    assert "eviction 1 of 2 tolerated" in out and "is ready; dashboard" in out
    assert outcome["ok"].starting_seconds > 2 and rayclusters(sbx)["evict-once"]["status"]["state"] == "ready"


# --- KubeRay and the CodeFlare operator -----------------------------------------------
def test_replica_failure_fails_at_once_with_kuberays_message(box, sbx, as_pipeline_runner):
    """A namespace ResourceQuota refuses KubeRay's pod creates: ReplicaFailure, at once."""
    sbx.set_faults({"clusters": {"over-quota": {"exceed_quota": True}}})
    with pytest.raises(PodsFailing) as exc:  # not the startup timeout's error: it did not wait 300 s
        tasks.provision(run_id="r-quota", cluster_name="over-quota", startup_timeout=300, **SMALL)
    msg = str(exc.value)
    assert "KubeRay could not create the cluster's pods (FailedCreateHeadPod)" in msg and "exceeded quota" in msg
    assert "ResourceQuota" in msg and "oc describe resourcequota -n sandbox" in msg
    assert rayclusters(sbx) == {}


@on_platforms()
def test_a_broken_auth_sidecar_is_reported_as_the_platforms_problem(box, sbx, as_pipeline_runner):
    """kube-rbac-proxy (KubeRay's, 3.x) or oauth-proxy (the CodeFlare operator's, 2.x)."""
    sidecar = box.platform.head_sidecar
    sbx.set_faults({"clusters": {"sidecar": {"image_pull": sidecar}}})
    with pytest.raises(PodsFailing) as exc:  # not the startup timeout's error: it did not wait 300 s
        tasks.provision(run_id="r-sidecar", cluster_name="sidecar", startup_timeout=300, **SMALL)
    msg = str(exc.value)
    assert f"container {sidecar}: image" in msg and "cannot be pulled (ErrImagePull" in msg and "manifest unknown" in msg
    assert "the platform's problem, not your image's" in msg
    assert ("OpenShift AI's KubeRay" if sidecar == "kube-rbac-proxy" else "CodeFlare operator") in msg
    assert "OpenShift AI administrator" in msg and "container ray-head" not in msg
    assert rayclusters(sbx) == {}


# --- a cluster of the same name being deleted -----------------------------------------
def test_a_cluster_being_deleted_is_never_adopted_the_task_waits_and_creates_anew(box, sbx, as_pipeline_runner,
                                                                                   capsys):
    """This run's earlier attempt was deleted (its finalizers still held): a retried task
    must not adopt the dying cluster but wait until it is gone, then create its own."""
    sbx.set_faults({"clusters": {"phoenix": {"never_admit": True}}})  # no Ray needed
    admin = k8s.CustomObjectsApi(sbx.api_client())
    body = raycluster("phoenix", workers=0, cpu="500m", memory="1Gi")
    body["metadata"]["labels"]["kfp-ray.io/run-id"] = "r-phoenix"
    body["metadata"]["finalizers"] = [HOLD]
    old_uid = admin.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)["metadata"]["uid"]
    admin.delete_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "phoenix")
    assert rayclusters(sbx)["phoenix"]["metadata"].get("deletionTimestamp")
    outcome = {}

    def provision():
        try:
            tasks.provision(run_id="r-phoenix", cluster_name="phoenix", admission_timeout=3, **SMALL)
        except BaseException as exc:  # noqa: BLE001 - the new cluster is never admitted: AdmissionTimeout
            outcome["error"] = exc

    t = threading.Thread(target=provision)
    t.start()
    log = Output(capsys)
    eventually(lambda: "to be gone (it is being deleted" in log, 60, what="the task to wait for the deletion")
    assert "adopting" not in log and rayclusters(sbx)["phoenix"]["metadata"]["uid"] == old_uid
    rc = rayclusters(sbx)["phoenix"]
    admin.patch_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "phoenix",
                                         {"metadata": {"finalizers": [f for f in rc["metadata"]["finalizers"] if f != HOLD]}})
    t.join(timeout=120)
    assert isinstance(outcome.get("error"), AdmissionTimeout)
    assert "RayCluster phoenix created in sandbox" in log and "adopting" not in log
    creates = [e for e in sbx.audit() if e["method"] == "POST" and e["path"].endswith("/rayclusters")
               and e["user"].endswith("pipeline-runner-dspa")]
    assert creates and creates[-1]["code"] == 201
    assert rayclusters(sbx) == {}
