"""provision_ray_cluster: its runtime against the sandbox, and the component under kfp.local,
as RHOAI's pipeline-runner service account."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.errors import InputError
from tests.helpers import FakeClock, eventually, kube_identity, raycluster

COMPONENT = "kfp_ray.components.provision_ray_cluster.component:provision_ray_cluster"
SMALL = dict(num_workers=0, head_cpu="500m", head_memory="1Gi")
TASK = dict(task_name="provision-ray-cluster", task_id="7")  # what KFP gives for the placeholders


def rayclusters(sbx):
    co = k8s.CustomObjectsApi(sbx.api_client())
    return {rc["metadata"]["name"]: rc for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]}


def quota_reserved(sbx, cluster: str) -> str:
    """The message of the cluster's Workload's QuotaReserved condition (read as admin)."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    for wl in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "workloads")["items"]:
        if any(r.get("name") == cluster for r in wl["metadata"].get("ownerReferences") or []):
            cond = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == "QuotaReserved"), {})
            return cond.get("message", "")
    return ""


def creates(sbx):
    return [e for e in sbx.audit() if e["method"] in ("POST", "PATCH") and e["path"].endswith("/rayclusters") or
            (e["method"] == "PATCH" and "/rayclusters/" in e["path"])]


@pytest.mark.parametrize("inputs,field", [
    ({"cluster_name": "Not_Valid"}, "cluster_name"),
    ({"head_cpu": "0"}, "head_cpu"),
    ({"worker_memory": "4GB"}, "worker_memory"),
    ({"data_connection": "aws-connection-missing"}, "data_connection"),
    ({"admission_timeout": 0}, "admission_timeout"),
    ({"head_cpu": "1", "head_cpu_limit": "500m"}, "head_cpu_limit"),
    ({"num_workers": 1, "worker_memory": "2Gi", "worker_memory_limit": "1Gi"}, "worker_memory_limit"),
    ({"image": "quay.io/modh/Ray:latest"}, "image"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "60"}]},
     "tolerations[0].tolerationSeconds"),
    ({"task_id": ""}, "task_id"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_inputs_fail_before_anything_is_created(box, sbx, as_pipeline_runner, inputs, field):
    before = len(creates(sbx))
    with pytest.raises(InputError) as exc:
        tasks.provision(run_id="bad-inputs", **{**SMALL, **TASK, "local_queue": "local-queue-test", **inputs})
    assert exc.value.field == field and "Fix:" in str(exc.value)
    assert len(creates(sbx)) == before and rayclusters(sbx) == {}


def test_a_request_beyond_the_cluster_queues_quota_fails_with_the_numbers_where_readable(box, sbx, as_admin):
    """The seed ClusterQueue has cpu 9, memory 36Gi, pods 5: this asks for 10 CPUs."""
    with pytest.raises(InputError) as exc:
        tasks.provision(run_id="too-big", **{**TASK, "local_queue": "local-queue-test", "num_workers": 3,
                                             "head_cpu": "1", "worker_cpu": "3", "head_memory": "1Gi",
                                             "worker_memory": "1Gi"})
    text = str(exc.value)
    assert exc.value.field == "head_cpu/worker_cpu/num_workers"
    assert "requests 10 cpu in total (head 1 CPU / 1Gi, 3 worker(s) x 3 CPU / 1Gi)" in text
    assert "ClusterQueue 'cluster-queue' (behind LocalQueue 'local-queue-test') has a nominal quota of 9 cpu" in text
    assert rayclusters(sbx) == {}
    with pytest.raises(InputError, match="requests 40Gi memory in total.*nominal quota of 36Gi memory"):
        tasks.provision(run_id="too-big", **{**TASK, **SMALL, "local_queue": "local-queue-test", "head_memory": "40Gi"})
    with pytest.raises(InputError, match="requests 6 pods in total"):
        tasks.provision(run_id="too-big", **{**TASK, **SMALL, "local_queue": "local-queue-test", "num_workers": 5,
                                             "worker_cpu": "100m", "worker_memory": "256Mi"})


def test_the_quota_is_not_checked_where_kueue_is_not_readable(box, sbx, as_pipeline_runner, capsys):
    """RHOAI's pipeline-runner may read no Kueue object: the cluster waits, admission_timeout ends it."""
    from kfp_ray.errors import AdmissionTimeout

    with pytest.raises(AdmissionTimeout, match="not admitted by Kueue within 2s"):
        tasks.provision(run_id="too-big-runner", **{**TASK, **SMALL, "local_queue": "local-queue-test",
                                                    "head_cpu": "10", "admission_timeout": 2})
    assert "the request is not checked against the quota of LocalQueue 'local-queue-test'" in capsys.readouterr().out
    eventually(lambda: rayclusters(sbx) == {}, 30, what="the cluster to be deleted")


def test_unknown_queue_fails_before_creating_where_queues_are_readable(box, sbx, as_admin):
    """A LocalQueue can only be checked by an identity that may read LocalQueues (RHOAI's
    pipeline-runner may not: then the cluster waits and admission_timeout ends it)."""
    with pytest.raises(InputError, match="LocalQueue 'no-such-queue' does not exist") as exc:
        tasks.provision(run_id="bad-queue", local_queue="no-such-queue", **SMALL, **TASK)
    assert exc.value.field == "local_queue" and rayclusters(sbx) == {}


def test_default_queue_is_found_where_queues_are_readable(box, sbx, as_admin):
    from kfp_ray.cluster import ClusterSpec, resolve_queue

    assert resolve_queue(ClusterSpec(name="x", namespace="sandbox", run_id="r")) == "local-queue-test"


def test_bad_input_message_reaches_the_task_log(sbx, run_local):
    result, log = run_local(COMPONENT, {"run_id": "r-bad", "worker_memory": "4GB", "local_queue": "local-queue-test"})
    assert result["status"] == "FAILURE"
    assert "worker_memory: '4GB' is not a memory quantity" in log and "Fix: use Kubernetes units" in log
    assert rayclusters(sbx) == {}


def test_admission_timeout_fails_fast_and_deletes_the_cluster(sbx, run_local):
    sbx.set_faults({"clusters": {"held": {"never_admit": True}}})
    result, log = run_local(COMPONENT, {"run_id": "r-adm", "cluster_name": "held", "local_queue": "local-queue-test",
                                        "admission_timeout": 4, **SMALL})
    assert result["status"] == "FAILURE"
    assert "RayCluster 'held' was not admitted by Kueue within 4s (LocalQueue 'local-queue-test')" in log
    assert "queued: waiting for Kueue admission in LocalQueue local-queue-test" in log
    assert "deleting RayCluster held" in log and rayclusters(sbx) == {}


def test_startup_timeout_fails_with_its_own_message_and_deletes(sbx, run_local):
    sbx.set_faults({"clusters": {"slow": {"slow_start": 60}}})
    result, log = run_local(COMPONENT, {"run_id": "r-slow", "cluster_name": "slow", "local_queue": "local-queue-test",
                                        "startup_timeout": 3, **SMALL})
    assert result["status"] == "FAILURE"
    assert "RayCluster 'slow' was admitted but its pods were not ready within 3s" in log
    assert "ContainerCreating" in log and rayclusters(sbx) == {}
    assert sbx.processes() == []


def test_image_pull_failure_fails_at_once_and_deletes(sbx, run_local):
    sbx.set_faults({"clusters": {"badimg": {"image_pull": True}}})
    result, log = run_local(COMPONENT, {"run_id": "r-img", "cluster_name": "badimg", "local_queue": "local-queue-test",
                                        "image": "quay.io/nowhere/ray:none", "startup_timeout": 300, **SMALL})
    assert result["status"] == "FAILURE" and "not ready within 300s" not in log  # at once, not at the startup timeout
    # the registry has no such image (the kubelet's ErrImagePull says so): no retry can help
    assert "image quay.io/nowhere/ray:none cannot be pulled (ErrImagePull: rpc error" in log
    assert "reading manifest none in quay.io/nowhere/ray: manifest unknown" in log
    assert rayclusters(sbx) == {}


def test_untolerated_taint_fails_at_once_naming_the_toleration(sbx, run_local):
    sbx.set_faults({"clusters": {"gpu": {"taint": True}}})
    result, log = run_local(COMPONENT, {"run_id": "r-taint", "cluster_name": "gpu", "local_queue": "local-queue-test",
                                        "num_workers": 1, "worker_gpus": 1, "head_memory": "1Gi", "worker_memory": "1Gi"})
    assert result["status"] == "FAILURE"
    assert "untolerated taint {nvidia.com/gpu: true}" in log and "add a matching toleration" in log
    assert rayclusters(sbx) == {}


@pytest.mark.ray
def test_queue_wait_is_reported_then_admitted_when_quota_frees_and_a_retry_adopts(box, sbx, run_local):
    # Fill the quota with a cluster that is admitted but never starts Ray (its image never pulls).
    sbx.set_faults({"clusters": {"filler": {"image_pull": True}}})
    admin = k8s.CustomObjectsApi(sbx.api_client())
    admin.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                          raycluster("filler", workers=1, cpu="4", memory="2Gi"))
    eventually(lambda: rayclusters(sbx)["filler"]["spec"].get("suspend") is False, 10, what="the filler's admission")
    outcome = {}
    args = {"run_id": "r-queue", "cluster_name": "waiter", "local_queue": "local-queue-test", "num_workers": 0,
            "head_cpu": "2", "head_memory": "1Gi", "admission_timeout": 120}  # head-only: 2 CPUs, 1 more than is free
    t = threading.Thread(target=lambda: outcome.update(zip(("result", "log"), run_local(COMPONENT, args), strict=True)))
    t.start()
    eventually(lambda: "waiter" in rayclusters(sbx) and rayclusters(sbx)["waiter"]["spec"].get("suspend"), 60,
               what="the waiter to be created and queued")
    # Kueue has looked at it and holds it: 8 CPUs used, 2 more asked, quota 9.
    eventually(lambda: "insufficient unused quota for cpu" in quota_reserved(sbx, "waiter"), 30,
               what="Kueue's reason for holding the waiter")
    assert rayclusters(sbx)["waiter"]["spec"]["suspend"] is True
    admin.delete_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "filler")
    t.join(timeout=180)
    result, log = outcome["result"], outcome["log"]
    assert result["status"] == "SUCCESS", log
    assert "queued: waiting for Kueue admission in LocalQueue local-queue-test" in log
    assert "this service account may not read Kueue objects" in log  # pipeline-runner sees only the suspension
    assert "position" not in log  # no Workloads to order: no place in the queue is claimed
    out = result["tasks"]["provision-ray-cluster"]["parameterValues"]
    assert out["cluster_name"] == "waiter" and out["queued_seconds"] > 0 and out["dashboard_url"].startswith("http://127.")
    rc = rayclusters(sbx)["waiter"]
    labels = rc["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "local-queue-test"  # set although pipeline-runner cannot read queues
    assert labels["kfp-ray.io/run-id"] == "r-queue" and labels["app.kubernetes.io/managed-by"] == "kfp-ray"
    posts = [e for e in sbx.audit() if e["method"] == "POST" and e["path"].endswith("/rayclusters")
             and e["user"].endswith("pipeline-runner-dspa")]
    assert posts[-1]["code"] == 201

    # A retried task of the same run adopts the cluster instead of creating a second one.
    result2, log2 = run_local(COMPONENT, args)
    assert result2["status"] == "SUCCESS" and "adopting it" in log2
    assert list(rayclusters(sbx)) == ["waiter"] and rayclusters(sbx)["waiter"]["metadata"]["uid"] == rc["metadata"]["uid"]
    # Another run may not take it.
    result3, log3 = run_local(COMPONENT, {**args, "run_id": "r-other"})
    assert result3["status"] == "FAILURE" and "belongs to 'r-queue', not to this run" in log3
    assert rayclusters(sbx)["waiter"]["metadata"]["uid"] == rc["metadata"]["uid"]


def test_the_wait_beats_once_per_poll_and_a_failing_heartbeat_is_only_logged(box, sbx, as_pipeline_runner, capsys):
    """The heartbeat (a lease renewal) runs while provision waits; its failure never ends the wait."""
    from kfp_ray.errors import AdmissionTimeout
    from kfp_ray.readiness import wait_ready

    sbx.set_faults({"clusters": {"hb-held": {"never_admit": True}}})
    k8s.CustomObjectsApi(sbx.api_client()).create_namespaced_custom_object(
        "ray.io", "v1", "sandbox", "rayclusters", raycluster("hb-held", workers=0, cpu="100m", memory="256Mi"))

    def polls():
        return len([e for e in sbx.audit() if e["method"] == "GET" and e["path"].endswith("/rayclusters/hb-held")])

    beats = []

    def heartbeat():
        beats.append(polls())
        if len(beats) == 2:
            raise RuntimeError("lease patch refused")

    # The wait's own clock is a fake one its sleeps advance: how many polls fit in the admission
    # timeout is the backoff's schedule, never how busy this machine is (each poll is a real GET).
    clock = FakeClock(1000.0)
    with pytest.raises(AdmissionTimeout):
        wait_ready("hb-held", "sandbox", "local-queue-test", admission_timeout=10, startup_timeout=5, heartbeat=heartbeat,
                   clock=clock, sleep=clock.sleep)
    assert len(beats) >= 3 and beats == list(range(beats[0], beats[0] + len(beats)))  # one beat before each poll
    assert "heartbeat failed (RuntimeError: lease patch refused); carrying on" in capsys.readouterr().out


def test_waiting_polls_lightly_queued_and_starting(box, sbx, as_pipeline_runner, monkeypatch):
    """pipeline-runner may not watch RayClusters, so the wait polls: queued, one GET every 5 s
    at most and the queues read once a minute; starting, the cluster every second for the first
    minute, then every 5 s, and its pods every 5 s (pods that are not failing). The polls'
    jitter is held at its mean, so the counts are the schedule's (random jitter alone made the
    starting count 88 in 0.4% of runs)."""
    from types import SimpleNamespace

    from kfp_ray import wait
    from kfp_ray.errors import AdmissionTimeout, StartupTimeout
    from kfp_ray.readiness import wait_ready

    monkeypatch.setattr(wait, "random", SimpleNamespace(uniform=lambda a, b: (a + b) / 2))

    def requests(since):
        return [e for e in sbx.audit()[since:] if e["user"].endswith(":pipeline-runner-dspa")]

    co = k8s.CustomObjectsApi(sbx.api_client())
    sbx.set_faults({"clusters": {"light-held": {"never_admit": True}, "light-slow": {"slow_start": 600}}})
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                       raycluster("light-held", workers=0, cpu="100m", memory="256Mi"))
    mark, t = len(sbx.audit()), FakeClock()
    with pytest.raises(AdmissionTimeout):
        wait_ready("light-held", "sandbox", "local-queue-test", admission_timeout=600, startup_timeout=5,
                   clock=t, sleep=t.sleep)
    reqs = requests(mark)
    gets = [e for e in reqs if e["path"].endswith("/rayclusters/light-held")]
    assert 600 / 5 <= len(gets) <= 600 / 5 + 12, len(gets)  # the first few polls come sooner
    others = [e for e in reqs if e not in gets]  # why it waits: the Workload and its queues, once a minute
    assert len(others) <= 3 * (600 / 60 + 1), [e["path"] for e in others]

    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                       raycluster("light-slow", workers=0, cpu="100m", memory="256Mi"))
    eventually(lambda: not co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "light-slow")
               ["spec"].get("suspend"), 60, what="Kueue to admit light-slow")  # the wait starts in its starting phase
    mark, t = len(sbx.audit()), FakeClock()
    with pytest.raises(StartupTimeout) as exc:
        wait_ready("light-slow", "sandbox", "local-queue-test", admission_timeout=600, startup_timeout=180,
                   clock=t, sleep=t.sleep)
    assert "ContainerCreating" in str(exc.value)  # the pods as they are at the timeout
    reqs = requests(mark)
    gets = [e for e in reqs if e["path"].endswith("/rayclusters/light-slow")]
    pods = [e for e in reqs if e["path"].endswith("/pods")]
    assert 60 + 120 / 5 - 3 <= len(gets) <= 60 + 120 / 5 + 3, len(gets)  # 1 s for a minute, then 5 s
    assert 180 / 10 <= len(pods) <= 180 / 5 + 2, len(pods)  # every 5 to 10 s (polls with jitter)
    for name in ("light-held", "light-slow"):
        co.delete_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", name)


def test_a_queue_that_does_not_exist_looks_full_to_pipeline_runner_and_the_first_queued_line_says_so(
        box, sbx, capsys):
    """The seeds' project has no LocalQueue `default`: a run without local_queue, provisioned as
    pipeline-runner (no Kueue access), waits in it. Kueue's reason cannot be read, so from the
    first queued line the task says a missing queue and a full one look the same, and how to
    tell; where Kueue is readable its own reason is shown instead."""
    from kfp_ray.errors import AdmissionTimeout
    from kfp_ray.readiness import wait_ready

    k8s.CustomObjectsApi(sbx.api_client()).create_namespaced_custom_object(
        "ray.io", "v1", "sandbox", "rayclusters", raycluster("no-queue", workers=0, cpu="100m", memory="256Mi",
                                                             queue="default"))
    eventually(lambda: quota_reserved(sbx, "no-queue") or rayclusters(sbx)["no-queue"]["spec"].get("suspend"), 30,
               what="Kueue to hold no-queue")
    with kube_identity(box.info["kubeconfig_pipeline_runner"]):
        t = FakeClock()
        with pytest.raises(AdmissionTimeout) as exc:
            wait_ready("no-queue", "sandbox", "default", admission_timeout=90, startup_timeout=5, clock=t, sleep=t.sleep)
        queued = [line for line in capsys.readouterr().out.splitlines() if "queued: waiting for Kueue admission" in line]
        assert len(queued) >= 2
        assert queued[0].endswith(
            "- this service account may not read Kueue, so a LocalQueue that does not exist and a full one look the same "
            "from here: check `oc get localqueue default -n sandbox` (or `kfp-ray doctor`), set local_queue to a queue "
            "that exists, or let pipeline-runner read Kueue (deploy/rbac-kfp-ray.yaml, part 1) to see Kueue's own reason")
        assert all(line.endswith("a missing LocalQueue would look the same (see above)") for line in queued[1:])
        assert "may not read Kueue, so it cannot tell a LocalQueue that does not exist from a full one" in str(exc.value)

    with kube_identity(box.info["kubeconfig"]):  # may read Kueue: its reason, no guess
        t = FakeClock()
        with pytest.raises(AdmissionTimeout) as exc:
            wait_ready("no-queue", "sandbox", "default", admission_timeout=10, startup_timeout=5, clock=t, sleep=t.sleep)
        queued = [line for line in capsys.readouterr().out.splitlines() if "queued: waiting for Kueue admission" in line]
        assert "Kueue: LocalQueue default doesn't exist" in queued[0] and "look the same" not in queued[0]
        assert "cannot tell" not in str(exc.value)
