"""The runtime library's pure functions (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kfp_ray import jobs, redact, wait
from kfp_ray.cluster import ClusterSpec
from kfp_ray.diagnose import pod_problem, pod_summary, replica_failure
from kfp_ray.errors import InputError, InputErrors
from kfp_ray.readiness import Admissions
from kfp_ray.validate import label_value, sanitize_name
from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodStatus,
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


def test_names_derived_from_run_ids_are_valid_and_bounded():
    name = sanitize_name("9F3A2C4E-1B2D-4E5F-8A9B-0C1D2E3F4A5B-extra")
    assert name.startswith("ray-9f3a2c4e") and len(name) <= 40 and not name.endswith("-")
    spec(name=name).check()
    assert label_value("--Run ID/with spaces--") == "Run-ID-with-spaces"


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
    assert "ImagePullBackOff" in pod_problem(_pod(waiting=("ImagePullBackOff", 'Back-off pulling image "x"')))
    assert "data_connection" in pod_problem(_pod(waiting=("CreateContainerConfigError", 'secret "s" not found')))
    assert "toleration" in pod_problem(_pod(scheduled="0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: true}."))
    assert pod_problem(_pod(waiting=("ContainerCreating", ""))) is None
    assert pod_problem(_pod(scheduled="0/3 nodes are available: 3 Insufficient cpu.")) is None  # may clear (autoscaler)


def test_a_platform_container_that_cannot_start_is_the_platforms_problem():
    sidecar = pod_problem(_pod(waiting=("ImagePullBackOff", 'Back-off pulling image "registry.redhat.io/x"'),
                               container="oauth-proxy"))
    assert "container oauth-proxy: ImagePullBackOff" in sidecar
    assert "platform's problem, not your image's" in sidecar and "CodeFlare operator" in sidecar
    assert "ose-oauth-proxy" in sidecar and "OpenShift AI administrator" in sidecar
    init = pod_problem(_pod(init=("create-cert", "ErrImageNeverPull", "")))
    assert "container create-cert" in init and "certificate init container" in init
    user = pod_problem(_pod(waiting=("ImagePullBackOff", "Back-off"), container="ray-head"))
    assert "container ray-head" in user and "platform" not in user and "image pull secret" in user
    # a terminating pod of an earlier incarnation (an evicted cluster's) is not what will run
    assert pod_problem(_pod(waiting=("ImagePullBackOff", "x"), deleting=True)) is None
    assert pod_summary([_pod(waiting=("ImagePullBackOff", "x"), deleting=True)]) == "head terminating"


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


def test_admissions_count_evictions_seen_or_missed_between_polls():
    a = Admissions()
    assert a.observe(_rc(1, True)) is None                       # created suspended by Kueue's webhook
    assert a.observe(_rc(2, False)) == "admitted"                # Kueue admits: spec.suspend false
    assert a.observe(_rc(2, False)) is None
    assert a.observe(_rc(3, True)) == "evicted" and a.evictions == 1  # suspended again: evicted
    assert a.observe(_rc(3, True)) is None
    assert a.observe(_rc(4, False)) == "admitted"
    # Evicted and admitted again between two polls: two more spec updates, never seen suspended.
    assert a.observe(_rc(6, False)) == "readmitted" and a.evictions == 2
    assert a.observe(_rc(6, False)) is None and a.evictions == 2
