"""The runtime library's pure functions (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodStatus,
)

from kfp_ray import jobs, redact, wait
from kfp_ray.cluster import ClusterSpec
from kfp_ray.diagnose import CRASH_RESTARTS, PodTrouble, pod_problem, pod_summary, replica_failure
from kfp_ray.errors import InputError, InputErrors
from kfp_ray.readiness import Admissions
from kfp_ray.validate import (
    MAX_CLUSTER_NAME,
    derive_cluster_name,
    identity_label,
    label_value,
    sanitize_name,
    task_identity,
)


def spec(**kw):
    base = dict(name="demo", namespace="sandbox", run_id="run-1")
    base.update(kw)
    return ClusterSpec(**base)


BAD_INPUTS = [
    ({"name": "Bad_Name"}, "cluster_name", "lower-case letters"),
    ({"name": "x" * 41}, "cluster_name", "at most 40"),
    ({"name": "9lives"}, "cluster_name", "starting with a letter"),
    ({"head_cpu": "-1"}, "head_cpu", "more than zero"),
    ({"worker_cpu": "0"}, "worker_cpu", "more than zero"),
    ({"worker_cpu": "two"}, "worker_cpu", "millicores"),
    ({"head_memory": "4GB"}, "head_memory", "'4G' means 10^n bytes, '4Gi' 2^n"),
    ({"worker_memory": "0Gi"}, "worker_memory", "more than zero"),
    ({"worker_memory": "512"}, "worker_memory", "add a unit"),
    ({"num_workers": -1}, "num_workers", "at least 0"),
    ({"worker_gpus": -2}, "worker_gpus", "at least 0"),
    ({"run_id": ""}, "run_id", "PIPELINE_JOB_ID_PLACEHOLDER"),
    ({"env": {"1BAD": "x"}}, "env['1BAD']", "environment variable name"),
    ({"labels": {"team": "not valid!"}}, "labels['team']", "label value"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Maybe"}]}, "tolerations[0]", "Equal|Exists"),
    ({"local_queue": "Queue!"}, "local_queue", "lower-case"),
    ({"namespace": "-team"}, "namespace", "starting and ending with a letter or digit"),
    ({"data_connection": "Aws_Connection"}, "data_connection", "'-' and '.'"),
    ({"head_cpu": "2", "head_cpu_limit": "1"}, "head_cpu_limit", "below the request head_cpu='2'"),
    ({"worker_memory": "4Gi", "worker_memory_limit": "2Gi"}, "worker_memory_limit", "at least '4Gi'"),
    ({"image": "quay.io/Modh/ray:2.52.1"}, "image", "must be lower case"),
    ({"image": "quay.io/modh/ray:2.52.1 "}, "image", "contains spaces"),
    ({"image": "https://quay.io/modh/ray"}, "image", "not a URL"),
    ({"image": "quay.io/modh/ray:"}, "image", "invalid reference format"),
    ({"image": "quay.io/modh/ray@sha256:abc"}, "image", "invalid reference format"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "300"}]},
     "tolerations[0].tolerationSeconds", "not an integer"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1.5}]},
     "tolerations[0].tolerationSeconds", "whole seconds"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}]},
     "tolerations[0].tolerationSeconds", "effect NoExecute"),
    ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "tolerations[0]", "only with operator Exists"),
    ({"tolerations": [{"key": "k", "effect": "NoRun"}]}, "tolerations[0]", "NoSchedule, PreferNoSchedule or NoExecute"),
]


@pytest.mark.parametrize("override,field,fix", BAD_INPUTS, ids=[b[1] for b in BAD_INPUTS])
def test_bad_inputs_name_the_field_and_the_fix(override, field, fix):
    with pytest.raises(InputError) as exc:
        spec(**override).check()
    assert exc.value.field == field
    assert fix in str(exc.value)


def test_several_bad_inputs_are_reported_together():
    with pytest.raises(InputErrors) as exc:
        spec(head_cpu="-1", worker_memory="4GB").check()
    assert [e.field for e in exc.value.errors] == ["head_cpu", "worker_memory"]


def test_good_inputs_pass():
    spec(head_cpu="500m", worker_memory="4Gi", head_memory="4G", worker_gpus=1, num_workers=0,
         tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]).check()


@pytest.mark.parametrize("override", [
    {"namespace": "1team"},  # DNS-1123 label: may start with a digit
    {"namespace": "x" * 63},
    {"data_connection": "aws-connection.minio"},  # DNS-1123 subdomain: dots allowed
    {"local_queue": "team-a.gpu"},  # Kueue: a DNS-1123 subdomain in a label
    {"head_cpu": "1", "head_cpu_limit": "1000m", "worker_memory": "4Gi", "worker_memory_limit": "4096Mi"},
    {"head_memory": "2Gi", "head_memory_limit": "8Gi"},
    {"image": "quay.io/modh/ray:2.52.1-py311-cu121"},
    {"image": "ray"},
    {"image": "localhost:5000/team/ray:dev"},
    {"image": "[::1]:5000/ray:1"},
    {"image": "Registry.Example.com/ray__x/ray-ml@sha256:" + "a" * 64},
    {"image": "quay.io/modh/ray:2.52.1@sha256:" + "0" * 64},
    {"tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": 300}]},
    {"tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
                      "tolerationSeconds": 300.0}]},  # a KFP list input carries numbers as doubles
    {"tolerations": [{"operator": "Exists"}]},
], ids=lambda o: next(iter(o)))
def test_inputs_kubernetes_accepts_pass(override):
    spec(**override).check()


def test_a_derived_name_needs_the_task_identity():
    with pytest.raises(InputErrors) as exc:
        spec(run_id="run-1").check(derived_name=True)
    assert [e.field for e in exc.value.errors] == ["task_id", "task_name"]
    assert "dsl.PIPELINE_TASK_ID_PLACEHOLDER" in str(exc.value) and "ParallelFor" in str(exc.value)
    spec(task_name="provision-ray-cluster", task_id="17").check(derived_name=True)
    spec().check()  # a given cluster_name needs no identity


def test_names_derived_from_run_ids_are_valid_and_bounded():
    name = sanitize_name("9F3A2C4E-1B2D-4E5F-8A9B-0C1D2E3F4A5B-extra")
    assert name.startswith("ray-9f3a2c4e") and len(name) <= 40 and not name.endswith("-")
    spec(name=name).check()
    assert label_value("--Run ID/with spaces--") == "Run-ID-with-spaces"


def test_each_task_of_a_run_gets_its_own_cluster_name_and_a_retry_the_same_one():
    """KFP 2.17 on Argo: task name = its name in its DAG, task id = the DAG execution's id
    (one per ParallelFor iteration); both stay when the task is retried."""
    run = "9f3a2c4e-1b2d-4e5f-8a9b-0c1d2e3f4a5b"
    first = derive_cluster_name(run, task_identity("provision-ray-cluster", "12"))
    sibling = derive_cluster_name(run, task_identity("provision-ray-cluster-2", "12"))
    iteration = derive_cluster_name(run, task_identity("provision-ray-cluster", "13"))
    other_run = derive_cluster_name(run.replace("9f", "8f"), task_identity("provision-ray-cluster", "12"))
    assert len({first, sibling, iteration, other_run}) == 4
    assert derive_cluster_name(run, task_identity("provision-ray-cluster", "12")) == first  # a retry
    for name in (first, sibling, iteration):
        assert name.startswith("ray-9f3a2c4e-1b2d") and len(name) <= MAX_CLUSTER_NAME
        spec(name=name).check()
    long = task_identity("provision-ray-cluster-for-the-second-model-of-this-pipeline-" + "x" * 40, "123456")
    labels = {identity_label(long), identity_label(long.replace("123456", "123457"))}
    assert len(labels) == 2 and all(len(v) <= 63 and label_value(v) == v for v in labels)
    assert identity_label("provision-ray-cluster.12") == "provision-ray-cluster.12"


def test_poll_backs_off_and_times_out_naming_what_it_waited_for():
    now = [0.0]
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        now[0] += s

    with pytest.raises(TimeoutError, match="waiting for Kueue admission"):
        wait.poll(lambda: None, 10, "Kueue admission", wait.Backoff(0.2, 2.0, 3.0), clock=lambda: now[0], sleep=sleep)
    assert sleeps[0] < 0.25 and max(sleeps) <= 3.3 and sleeps == sorted(sleeps[:4]) + sleeps[4:]
    assert now[0] == pytest.approx(10)


def test_retry_retries_transient_errors_only_and_is_bounded():
    class Api(Exception):
        def __init__(self, status):
            self.status = status

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise Api(503)
        return "ok"

    assert wait.retry(flaky, "x", sleep=lambda s: None) == "ok" and len(calls) == 3
    with pytest.raises(Api):
        wait.retry(lambda: (_ for _ in ()).throw(Api(404)), "x", sleep=lambda s: None)
    attempts = []
    with pytest.raises(Api):
        wait.retry(lambda: attempts.append(1) or (_ for _ in ()).throw(Api(429)), "x", attempts=4, sleep=lambda s: None)
    assert len(attempts) == 4


def test_metrics_contract():
    logs = "\n".join(["epoch 1", 'KFP_RAY_METRICS {"loss": 0.9, "accuracy": 0.5}', "noise KFP_RAY_METRICS {}",
                      'KFP_RAY_METRICS {"loss": 0.3, "note": "text", "flag": true}', "KFP_RAY_METRICS {broken"])
    assert jobs.parse_metrics(logs) == {"loss": 0.3, "accuracy": 0.5}


def test_working_dir_zip_is_reproducible_and_skips_caches(tmp_path):
    import os
    import zipfile

    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "train.py").write_text("print(1)")
    (tmp_path / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"0")
    first = jobs.zip_dir(tmp_path / "pkg")
    os.utime(tmp_path / "pkg" / "train.py", (1, 1))
    assert jobs.zip_dir(tmp_path / "pkg") == first
    import io

    assert zipfile.ZipFile(io.BytesIO(first)).namelist() == ["train.py"]


def test_submission_id_is_stable_per_run_and_task():
    assert jobs.submission_id("run-1", "submit-ray-job") == jobs.submission_id("run-1", "submit-ray-job")
    assert jobs.submission_id("run-1", "a") != jobs.submission_id("run-2", "a")


def test_redaction_hides_s3_keys_and_tokens(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-123")
    text = redact.redact("key=s3cr3t-value-123 auth: Bearer abc.def-ghi")
    assert "s3cr3t" not in text and "abc.def" not in text and text.count("[REDACTED]") == 2


def _status(name, waiting, image="i"):
    return V1ContainerStatus(name=name, image=image, image_id="", ready=False, restart_count=0,
                             state=V1ContainerState(waiting=V1ContainerStateWaiting(reason=waiting[0], message=waiting[1])))


def _pod(waiting=None, scheduled=None, container="ray-head", init=None, deleting=False):
    statuses = [_status(container, waiting, image="registry.redhat.io/openshift4/ose-oauth-proxy@sha256:1")] if waiting else None
    inits = [_status(init[0], init[1:])] if init else None
    conds = [V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=scheduled)] if scheduled else None
    meta = V1ObjectMeta(name="c-head-x", labels={"ray.io/node-type": "head"},
                        deletion_timestamp=datetime.now(UTC) if deleting else None)
    return V1Pod(metadata=meta, status=V1PodStatus(phase="Pending", container_statuses=statuses,
                                                   init_container_statuses=inits, conditions=conds))


def test_pod_problems_that_need_a_user_fix():
    assert "InvalidImageName" in pod_problem(_pod(waiting=("InvalidImageName", 'Failed to apply default image tag "x:"')))
    assert "data_connection" in pod_problem(_pod(waiting=("CreateContainerConfigError", 'secret "s" not found')))
    assert "toleration" in pod_problem(_pod(scheduled="0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: true}."))
    assert pod_problem(_pod(waiting=("ContainerCreating", ""))) is None
    assert pod_problem(_pod(scheduled="0/3 nodes are available: 3 Insufficient cpu.")) is None  # may clear (autoscaler)
    # an image that failed to pull may still come (a registry outage): PodTrouble decides
    assert pod_problem(_pod(waiting=("ImagePullBackOff", 'Back-off pulling image "x"'))) is None


def test_a_platform_container_that_cannot_start_is_the_platforms_problem():
    not_found = "rpc error: code = Unknown desc = reading manifest v4.14 in registry.redhat.io/x: manifest unknown"
    sidecar = PodTrouble().check([_pod(waiting=("ErrImagePull", not_found), container="oauth-proxy")])
    assert "container oauth-proxy: image" in sidecar and "manifest unknown" in sidecar
    assert "platform's problem, not your image's" in sidecar and "CodeFlare operator" in sidecar
    assert "ose-oauth-proxy" in sidecar and "OpenShift AI administrator" in sidecar
    init = pod_problem(_pod(init=("create-cert", "ErrImageNeverPull", "")))
    assert "container create-cert" in init and "certificate init container" in init
    user = PodTrouble().check([_pod(waiting=("ErrImagePull", not_found), container="ray-head")])
    assert "container ray-head" in user and "platform" not in user and "pull secret" in user
    # a terminating pod of an earlier incarnation (an evicted cluster's) is not what will run
    assert PodTrouble().check([_pod(waiting=("ErrImagePull", not_found), deleting=True)]) is None
    assert pod_summary([_pod(waiting=("ImagePullBackOff", "x"), deleting=True)]) == "head terminating"


def _crashing(restarts, reason="CrashLoopBackOff", exit_code=1, why="Error", message=None):
    pod = _pod(waiting=(reason, "back-off 40s restarting failed container=ray-head pod=c-head-x_ns(u)"))
    cs = pod.status.container_statuses[0]
    cs.restart_count = restarts
    cs.last_state = V1ContainerState(terminated=V1ContainerStateTerminated(exit_code=exit_code, reason=why,
                                                                             message=message))
    return pod


def test_an_image_pull_failure_is_fatal_once_it_persists_or_at_once_when_final():
    now = [0.0]
    trouble = PodTrouble(pull_grace=60, clock=lambda: now[0])
    outage = ('rpc error: code = Unknown desc = pinging container registry quay.io: Get "https://quay.io/v2/": '
              "dial tcp: lookup quay.io: i/o timeout")
    assert trouble.check([_pod(waiting=("ErrImagePull", outage))]) is None
    now[0] = 30
    assert trouble.check([_pod(waiting=("ImagePullBackOff", 'Back-off pulling image "i"'))]) is None
    now[0] = 61
    fatal = trouble.check([_pod(waiting=("ImagePullBackOff", 'Back-off pulling image "i"'))])
    assert "cannot be pulled for 61s" in fatal and "i/o timeout" in fatal  # the pull's own error, not the back-off's
    # a pull that succeeded in between starts the count again
    trouble = PodTrouble(pull_grace=60, clock=lambda: now[0])
    trouble.check([_pod(waiting=("ErrImagePull", outage))])
    now[0] = 100
    assert trouble.check([_pod(waiting=("ContainerCreating", ""))]) is None
    now[0] = 130
    assert trouble.check([_pod(waiting=("ImagePullBackOff", "Back-off"))]) is None
    # the registry says there is no such image: no retry helps
    assert "manifest unknown" in PodTrouble(clock=lambda: 0).check(
        [_pod(waiting=("ErrImagePull", "reading manifest none in quay.io/x: manifest unknown"))])


def test_a_crash_loop_is_fatal_after_three_restarts_with_the_last_exit_and_log():
    assert CRASH_RESTARTS == 3
    trouble = PodTrouble()
    assert trouble.check([_crashing(2)]) is None
    logs = []
    fatal = trouble.check([_crashing(3)], previous_log=lambda pod, c: logs.append(c) or "ValueError: too small\n")
    assert logs == ["ray-head"]
    assert "container ray-head keeps crashing (CrashLoopBackOff after 3 restarts)" in fatal
    assert "last exited with code 1 (Error)" in fatal and "ValueError: too small" in fatal and "--previous" in fatal
    oom = trouble.check([_crashing(5, exit_code=137, why="OOMKilled", message="killed")])
    assert "code 137 (OOMKilled), saying: killed" in oom and "head_memory/worker_memory" in oom
    assert trouble.check([_crashing(7, reason="ContainerCreating")]) is None  # restarting: not in back-off now


def _rc(generation=1, suspend=True, conditions=None):
    return {"metadata": {"name": "c", "namespace": "ns", "generation": generation},
            "spec": {"suspend": suspend}, "status": {"conditions": conditions or []}}


def test_kuberay_replica_failure_is_classified_with_its_fix():
    # KubeRay v1.4: Message is errors.Join(ErrFailedCreateHeadPod, the apiserver's error)
    quota = _rc(2, False, [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateHeadPod",
                            "message": 'FailedCreateHeadPod\npods "c-head-abcde" is forbidden: exceeded quota: compute, '
                                       "requested: cpu=1, used: cpu=4, limited: cpu=4"}])
    problem = replica_failure(quota)
    assert problem.reason == "FailedCreateHeadPod" and not problem.transient
    assert str(problem).startswith('KubeRay could not create the cluster\'s pods (FailedCreateHeadPod): pods "c-head-abcde" '
                                   "is forbidden: exceeded quota: compute")
    assert "ResourceQuota" in problem.fix and "oc describe resourcequota -n ns" in problem.fix
    limits = _rc(2, False, [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateWorkerPod",
                             "message": "FailedCreateWorkerPod\npods \"w\" is forbidden: maximum cpu usage per Container is 2, but limit is 4"}])
    assert "LimitRange" in replica_failure(limits).fix
    # The CodeFlare operator not having created the head's ServiceAccount yet: wait for it.
    sa = _rc(2, False, [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateHeadPod",
                         "message": 'FailedCreateHeadPod\npods "c-head-x" is forbidden: error looking up service account '
                                    'ns/c-oauth-proxy: serviceaccount "c-oauth-proxy" not found'}])
    assert replica_failure(sa).transient
    sa["status"]["conditions"][0]["message"] = sa["status"]["conditions"][0]["message"].replace("c-oauth-proxy", "c-oauth-proxy-1a2b3")
    assert replica_failure(sa).transient  # the operator's newer, hashed name
    assert replica_failure(_rc(2, False, [{"type": "HeadPodReady", "status": "False"}])) is None


def _suspension(suspending: tuple[str, str], suspended: tuple[str, str]) -> list[dict]:
    """KubeRay's suspension conditions, each (status, lastTransitionTime)."""
    return [{"type": "RayClusterSuspending", "status": suspending[0], "lastTransitionTime": suspending[1]},
            {"type": "RayClusterSuspended", "status": suspended[0], "lastTransitionTime": suspended[1]}]


def test_admissions_count_real_suspensions_seen_or_missed_between_polls():
    """Issue 25 item 8: a real suspension counts, seen (spec.suspend true again) or missed between
    polls (KubeRay's suspension conditions moved); no other spec write does."""
    a = Admissions()
    created = _suspension(("False", "t1"), ("True", "t1"))  # Kueue's webhook created it suspended
    assert a.observe(_rc(1, True, created)) is None
    assert a.observe(_rc(2, False, created)) == "admitted"  # KubeRay has not caught up yet
    running = _suspension(("False", "t1"), ("False", "t2"))
    assert a.observe(_rc(2, False, running)) is None and a.evictions == 0  # KubeRay catching up is no eviction
    # An autoscaler (or anyone) writing the spec: generations move, no suspension.
    assert a.observe(_rc(3, False, running)) is None
    assert a.observe(_rc(5, False, running)) is None and a.evictions == 0
    assert a.observe(_rc(6, True, running)) == "evicted" and a.evictions == 1  # seen suspended again
    assert a.observe(_rc(6, True, _suspension(("False", "t4"), ("True", "t4")))) is None
    assert a.observe(_rc(7, False, _suspension(("False", "t4"), ("False", "t5")))) == "admitted"
    assert a.observe(_rc(7, False, _suspension(("False", "t4"), ("False", "t5")))) is None
    # Evicted and admitted again between two polls: never seen suspended, KubeRay's conditions moved.
    assert a.observe(_rc(9, False, _suspension(("False", "t7"), ("False", "t8")))) == "readmitted"
    assert a.evictions == 2
    assert a.observe(_rc(12, False, _suspension(("False", "t7"), ("False", "t8")))) is None and a.evictions == 2


@pytest.mark.parametrize("prefix,problem", [
    ("s3://kfp-ray/runs/1", "a URI"),
    ("runs//1", "empty folder"),
    ("runs/../other-team", "'.' and '..'"),
    ("my runs/1", "not safe"),
    ("runs/1?x=2", "not safe"),
    ("x" * 901, "longer than 900"),
])
def test_a_bad_s3_prefix_is_refused_before_staging(monkeypatch, prefix, problem):
    from kfp_ray.datasets import run_prefix

    monkeypatch.setenv("AWS_S3_BUCKET", "kfp-ray")
    with pytest.raises(InputError) as exc:
        run_prefix("run-1", prefix)
    assert exc.value.field == "s3_prefix" and problem in str(exc.value) and "bucket comes from the data connection" in str(exc.value)


def test_good_s3_prefixes_and_the_default(monkeypatch):
    from kfp_ray.datasets import run_prefix

    monkeypatch.setenv("AWS_S3_BUCKET", "kfp-ray")
    assert run_prefix("run-1") == "s3://kfp-ray/runs/run-1"
    assert run_prefix("run-1", "/projects/mnist_v2/(a)/") == "s3://kfp-ray/projects/mnist_v2/(a)"
    with pytest.raises(InputError, match="run_id"):
        run_prefix("", "")


def test_publish_refuses_an_output_uri_that_is_not_an_s3_folder():
    from kfp_ray.results import results_uri

    assert results_uri("s3://kfp-ray/runs/1/") == "s3://kfp-ray/runs/1/results.json"
    for bad in ("kfp-ray/runs/1", "s3:///runs/1", "s3://kfp-ray/runs//1"):
        with pytest.raises(InputError) as exc:
            results_uri(bad)
        assert exc.value.field == "output_uri"


@pytest.mark.parametrize("value", [0, -1, 0.0, float("nan"), "5", True])
def test_follow_refuses_a_max_poll_that_is_not_a_positive_number(value):
    with pytest.raises(InputError) as exc:  # before any request: the URL goes nowhere
        jobs.follow("http://127.0.0.1:9", "raysubmit_1", timeout=60, max_poll=value)
    assert exc.value.field == "max_poll_seconds" and "max_poll_seconds=5" in str(exc.value)


def test_kueues_record_counts_an_eviction_missed_between_polls_only_without_kuberays_conditions():
    """Where the optional RBAC lets it read the Workload, Kueue's requeueState.count witnesses an
    eviction that began and ended between two polls, once it is over (Evicted not True), and only
    where KubeRay's suspension conditions (the other witness) are absent: never counted twice."""
    from kfp_ray.queues import Eviction
    from kfp_ray.readiness import PODS_EVERY, _Wait

    class Kueue:
        readable, record = True, Eviction("PodsReadyTimeout", "Exceeded the PodsReady timeout", 0, "", False)

        def eviction(self, rc):
            return self.record

    w = _Wait("c", "ns", "q", 60, 60, "", clock=lambda: 0.0, sleep=lambda s: None)
    w.kueue, w.phase, w.requeue_baseline = Kueue(), "starting", 0
    bare = _rc(3, False)
    assert w.kueue_readmitted(bare, 0.0) is None  # nothing in Kueue's record
    w.kueue.record = Eviction("PodsReadyTimeout", "Exceeded the PodsReady timeout", 1, "", False, ongoing=True)
    assert w.kueue_readmitted(bare, PODS_EVERY) is None  # evicted now: the RayCluster shows it (suspended)
    w.kueue.record = Eviction("PodsReadyTimeout", "Previously: Exceeded the PodsReady timeout", 1, "", False)
    assert w.kueue_readmitted(bare, PODS_EVERY + 1) is None  # read every PODS_EVERY only
    assert w.kueue_readmitted(bare, 2 * PODS_EVERY) is w.kueue.record  # readmitted: the record that says so
    w.admissions.evictions = 1
    assert w.kueue_readmitted(bare, 3 * PODS_EVERY) is None  # already counted
    w.admissions.evictions = 0
    with_conditions = _rc(3, False, _suspension(("False", "t1"), ("False", "t2")))
    assert w.kueue_readmitted(with_conditions, 4 * PODS_EVERY) is None  # KubeRay's conditions witness it
