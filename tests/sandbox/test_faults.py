"""Every fault the sandbox can inject, and what a client sees when it happens."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from tests.helpers import eventually, raycluster

NS = "sandbox"


@pytest.fixture
def api(sbx):
    return sbx.api_client()


def create(api, body):
    return k8s.CustomObjectsApi(api).create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)


def rc(api, name):
    return k8s.CustomObjectsApi(api).get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", name)


def pods(api, name):
    return k8s.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"ray.io/cluster={name}").items


def events_about(api, pod_name):
    return [(e.reason, e.message) for e in k8s.CoreV1Api(api).list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod_name}").items]


def test_never_admit_keeps_the_cluster_suspended_with_a_queue_message(sbx, api):
    sbx.set_faults({"clusters": {"held-*": {"never_admit": True}}})
    create(api, raycluster("held-1", cpu="100m", memory="256Mi"))
    co = k8s.CustomObjectsApi(api)
    wl = eventually(lambda: next((w for w in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "workloads")["items"]
                                  if w["metadata"]["ownerReferences"][0]["name"] == "held-1" and w.get("status")), None), 10,
                    what="the Workload's status")
    cond = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert cond["status"] == "False" and "never_admit" in cond["message"]
    # Kueue's pass that held it also counted it pending: no admission follows while the fault holds.
    eventually(lambda: (co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "cluster-queue")
                        .get("status") or {}).get("pendingWorkloads", 0) >= 1, 10, what="the ClusterQueue to count it pending")
    eventually(lambda: (rc(api, "held-1").get("status") or {}).get("state") == "suspended", 10, what="KubeRay's suspended state")
    assert rc(api, "held-1")["spec"]["suspend"] is True and pods(api, "held-1") == []


def _ray_waiting(api, cluster, reason):
    """The head pod, once its Ray container waits for `reason`."""
    return next((p for p in pods(api, cluster) if p.metadata.labels["ray.io/node-type"] == "head"
                 and p.status.container_statuses and p.status.container_statuses[0].state.waiting
                 and p.status.container_statuses[0].state.waiting.reason == reason), None)


def test_image_pull_failure_leaves_the_head_pending_with_backoff(sbx, api):
    """kubelet v1.31: ErrImagePull with the runtime's error, then ImagePullBackOff while the
    image's back-off runs (base shortened from 10 s to 0.5 s), pulling again after it."""
    sbx.set_faults({"clusters": {"badimage": {"image_pull": True}}, "platform": {"kubelet_backoff_s": 0.5}})
    image = "quay.io/nowhere/ray:missing"
    create(api, raycluster("badimage", image=image))
    head = eventually(lambda: _ray_waiting(api, "badimage", "ErrImagePull"), 15, what="the head pod to report ErrImagePull")
    assert head.status.phase == "Pending"
    error = head.status.container_statuses[0].state.waiting.message
    assert error == ("rpc error: code = Unknown desc = initializing source docker://quay.io/nowhere/ray:missing: "
                     "reading manifest missing in quay.io/nowhere/ray: manifest unknown")
    head = eventually(lambda: _ray_waiting(api, "badimage", "ImagePullBackOff"), 15,
                      what="the head pod to report ImagePullBackOff")
    assert head.status.container_statuses[0].state.waiting.message == f'Back-off pulling image "{image}"'
    events = events_about(api, head.metadata.name)
    for expected in (("Pulling", f'Pulling image "{image}"'), ("Failed", f'Failed to pull image "{image}": {error}'),
                     ("Failed", "Error: ErrImagePull"), ("BackOff", f'Back-off pulling image "{image}"'),
                     ("Failed", "Error: ImagePullBackOff")):
        assert expected in events, events
    # it keeps trying: a later pull fails again
    pulls = [e.count for e in k8s.CoreV1Api(api).list_namespaced_event(NS, field_selector=f"involvedObject.name={head.metadata.name}").items
             if e.reason == "Pulling"]
    eventually(lambda: sum(e.count for e in k8s.CoreV1Api(api).list_namespaced_event(
        NS, field_selector=f"involvedObject.name={head.metadata.name}").items if e.reason == "Pulling") > sum(pulls), 15,
        what="another pull after the back-off")
    # KubeRay never says ready: it keeps the state it last wrote (`suspended` if it saw the cluster
    # before Kueue admitted it), and the SDK keeps waiting.
    assert rc(api, "badimage")["status"].get("state") in (None, "suspended")
    assert [p for p in sbx.processes() if p["cluster"] == "badimage"] == []


def test_kubelet_backoff_doubles_to_its_cap_and_resets_after_a_stable_run():
    """client-go flowcontrol.Backoff as the kubelet makes it: 10 s doubling to 300 s."""
    from kfp_ray_sandbox.controllers.backoff import Backoff, go_duration

    now = [100.0]
    b = Backoff(10, 300, clock=lambda: now[0])
    assert not b.in_backoff_since("c", 100)  # the first exit: restarted at once
    delays = []
    for _ in range(7):
        delays.append(b.next("c", now[0]))
        now[0] += 1
        assert b.in_backoff_since("c", now[0] - 1)
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert [go_duration(d) for d in delays[:6]] == ["10s", "20s", "40s", "1m20s", "2m40s", "5m0s"]
    now[0] += 601  # ran longer than 2 x the cap since the last restart: back to the start
    assert not b.in_backoff_since("c", now[0]) and b.next("c", now[0]) == 10


@pytest.mark.ray
def test_sidecar_image_pull_leaves_the_head_running_but_not_ready(box, sbx, api):
    from kfp_ray_sandbox.controllers.kuberay_rhoai import SIDECAR, SIDECAR_IMAGE

    assert box.platform.head_sidecar == SIDECAR  # RHOAI 3.3's kube-rbac-proxy
    sbx.set_faults({"clusters": {"nosidecar": {"image_pull": SIDECAR}}, "platform": {"kubelet_backoff_s": 0.5}})
    create(api, raycluster("nosidecar", workers=0, memory="1Gi"))

    def by_name(p):
        return {c.name: c for c in p.status.container_statuses or []}

    def ray_ready_sidecar_pulling():
        head = next(iter(pods(api, "nosidecar")), None)
        st = by_name(head) if head else {}
        return st.get("ray-head") and st["ray-head"].ready and st.get(SIDECAR) and head
    head = eventually(ray_ready_sidecar_pulling, 120, what="the Ray container to be ready beside the failing sidecar")
    sidecar = by_name(head)[SIDECAR]
    assert sidecar.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff")
    assert head.status.phase == "Running"
    ready = next(c for c in head.status.conditions if c.type == "Ready")
    assert (ready.status, ready.message) == ("False", f"containers with unready status: [{SIDECAR}]")
    # the Ray head runs (other pods of the shared sandbox, a task pod still stopping say, are not this test's)
    assert [p["pod"] for p in sbx.processes() if p["cluster"] == "nosidecar"] == [head.metadata.name]
    events = events_about(api, head.metadata.name)
    assert any(r == "Failed" and m.startswith(f'Failed to pull image "{SIDECAR_IMAGE}"') for r, m in events)
    assert ("BackOff", f'Back-off pulling image "{SIDECAR_IMAGE}"') in events
    status = eventually(lambda: (s := rc(api, "nosidecar")["status"]) and any(
        c["type"] == "HeadPodReady" and c["message"] == ready.message for c in s.get("conditions", [])) and s, 15,
        what="KubeRay to report the head not ready")
    assert status.get("state") != "ready"


def test_exceed_quota_makes_kuberay_report_replica_failure_until_it_clears(sbx, api):
    # image_pull keeps Ray from starting once the pod can be created: this test needs no Ray.
    sbx.set_faults({"clusters": {"overquota": {"exceed_quota": True, "image_pull": True}}})
    create(api, raycluster("overquota", workers=1))

    def failure():
        conds = (rc(api, "overquota").get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "ReplicaFailure"), None)
    cond = eventually(failure, 30, what="KubeRay's ReplicaFailure condition")
    assert cond["status"] == "True" and cond["reason"] == "FailedCreateHeadPod"
    assert cond["message"].startswith('FailedCreateHeadPod\npods "overquota-head-')
    assert "is forbidden: exceeded quota: compute-resources, requested: pods=1, used: pods=" in cond["message"]
    events = [(e.type, e.reason, e.message) for e in k8s.CoreV1Api(api).list_namespaced_event(
        NS, field_selector="involvedObject.name=overquota").items]
    assert any(t == "Warning" and r == "FailedToCreateHeadPod" and m.startswith('Failed to create head Pod sandbox/, pods "overquota-head-')
               for t, r, m in events), events
    assert pods(api, "overquota") == []
    sbx.set_faults({"clusters": {"overquota": {"image_pull": True}}})
    eventually(lambda: len(pods(api, "overquota")) == 2 and not failure(), 60,
               what="KubeRay to create the pods and drop ReplicaFailure once the quota allows")


def test_untolerated_taint_leaves_pods_unschedulable_unless_tolerated(sbx, api):
    # the scheduler is under test: a scheduled pod's Ray never starts (slow_start), sparing a head and worker
    sbx.set_faults({"clusters": {"*": {"taint": True}, "tolerant": {"slow_start": 600}}})
    create(api, raycluster("tainted", gpu=1))
    head = eventually(lambda: next((p for p in pods(api, "tainted") if p.status.conditions), None), 15,
                      what="the scheduler's verdict")
    sched = next(c for c in head.status.conditions if c.type == "PodScheduled")
    assert (sched.status, sched.reason) == ("False", "Unschedulable")
    assert "untolerated taint {nvidia.com/gpu: true}" in sched.message  # what seed 001's `oc get pod ... | grep untolerated` finds
    assert ("FailedScheduling", sched.message) in events_about(api, head.metadata.name)
    create(api, raycluster("tolerant", gpu=1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]))
    eventually(lambda: [p for p in pods(api, "tolerant") if p.spec.node_name], 15, what="the tolerating pod to be scheduled")


def test_api_errors_resets_and_latency_seen_through_the_sdk(box, sbx, sdk_auth, capsys):
    """The SDK swallows API errors: a 503 burst makes `status()` report UNKNOWN, not raise."""
    from codeflare_sdk import Cluster, ClusterConfiguration
    from codeflare_sdk.ray.cluster.status import CodeFlareClusterStatus

    cluster = Cluster(ClusterConfiguration(name="flaky", namespace=NS, num_workers=0, local_queue="local-queue-test"))
    sbx.set_faults({"api": {"errors": {"code": 503, "count": 1, "path": "/rayclusters$"}}})
    assert cluster.status(print_to_console=False) == (CodeFlareClusterStatus.UNKNOWN, False)
    assert "Service Unavailable" in capsys.readouterr().out
    sbx.set_faults({"api": {"latency_ms": 300}})
    v1 = k8s.CoreV1Api(sbx.api_client())
    started = time.monotonic()
    v1.list_namespaced_secret(NS)
    assert time.monotonic() - started >= 0.3
    # Connection resets: urllib3 inside the kubernetes client retries a GET 3 times by itself...
    sbx.set_faults({"api": {"resets": {"count": 2, "path": "/secrets"}}})
    v1.list_namespaced_secret(NS, label_selector="after=resets")
    assert [e["code"] for e in sbx.audit() if e["path"].endswith("/secrets")][-3:] == [0, 0, 200]
    # ...and a client without retries sees the connection broken (over TLS the reset reads
    # as "connection reset" or "closed without response", depending on when it lands).
    import urllib3

    sbx.set_faults({"api": {"resets": {"count": 1, "path": "/secrets"}}})
    cfg = sbx.api_client().configuration
    cfg.retries = 0
    with pytest.raises(urllib3.exceptions.MaxRetryError, match="Connection aborted"):
        k8s.CoreV1Api(k8s.ApiClient(cfg)).list_namespaced_secret(NS)


@pytest.mark.ray
def test_slow_start_then_head_crash_mid_job(sbx, api):
    from ray.job_submission import JobSubmissionClient

    sbx.set_faults({"clusters": {"crashy": {"slow_start": 3}}})
    t0 = time.monotonic()
    create(api, raycluster("crashy", workers=0, memory="1Gi"))
    eventually(lambda: rc(api, "crashy").get("status", {}).get("state") == "ready", 90, what="crashy to be ready")
    assert time.monotonic() - t0 >= 3
    svc = k8s.CoreV1Api(api).read_namespaced_service("crashy-head-svc", NS)
    port = next(p.port for p in svc.spec.ports if p.name == "dashboard")
    jobs = JobSubmissionClient(f"http://{svc.spec.cluster_ip}:{port}")
    job = jobs.submit_job(entrypoint="python -c 'import time; print(\"started\", flush=True); time.sleep(120)'")
    eventually(lambda: jobs.get_job_status(job).value == "RUNNING", 30, what="the job to run")

    sbx.set_faults({"clusters": {"crashy": {"head_crash_after": 0}}})
    head = eventually(lambda: next((p for p in pods(api, "crashy") if p.status.container_statuses
                                    and p.status.container_statuses[0].restart_count == 1), None), 30,
                      what="the head container to restart")
    assert head.status.container_statuses[0].last_state.terminated.exit_code == 137
    # The job died with the head (no GCS fault tolerance): once the head is back, Ray no
    # longer knows it, and the client's calls fail rather than report a status.
    # Wait on the restarted pod itself: KubeRay's HeadPodReady can still read True from
    # before the crash for a moment, and the kubelet marks the pod Ready only once the new
    # Ray head answers.
    def restarted_and_ready():
        return any(p.status.container_statuses and p.status.container_statuses[0].restart_count == 1
                   and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                   for p in pods(api, "crashy"))

    eventually(restarted_and_ready, 60, what="the restarted head to be ready again")
    eventually(lambda: any(c["type"] == "HeadPodReady" and c["status"] == "True"
                           for c in rc(api, "crashy")["status"]["conditions"]), 10, what="KubeRay to see the head ready")
    with pytest.raises(RuntimeError, match="status code 404"):
        JobSubmissionClient(f"http://{svc.spec.cluster_ip}:{port}").get_job_status(job)


def test_previous_log_of_a_container_that_never_restarted_is_refused(sbx, api):
    sbx.set_faults({"clusters": {"fresh": {"image_pull": True}}})
    create(api, raycluster("fresh", workers=0))
    head = eventually(lambda: next(iter(pods(api, "fresh")), None), 15, what="the head pod")
    with pytest.raises(k8s.ApiException) as exc:
        k8s.CoreV1Api(api).read_namespaced_pod_log(head.metadata.name, NS, container="ray-head", previous=True)
    assert exc.value.status == 400


def test_s3_hold_keeps_a_write_waiting_until_cleared_then_answers_503_and_stores_nothing(sbx):
    """The gate of issue 29's preempted-run test: a job's write that must not land yet."""
    import threading

    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    conn = sbx.data_connection()
    s3 = boto3.client("s3", endpoint_url=conn["AWS_S3_ENDPOINT"], aws_access_key_id=conn["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=conn["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
    sbx.patch_faults({"s3": {"hold": ["kfp-ray/held/*/epoch-0001.pt"]}})
    outcome = {}

    def put():
        try:
            s3.put_object(Bucket="kfp-ray", Key="held/run/epoch-0001.pt", Body=b"late")
        except ClientError as exc:
            outcome["error"] = exc.response["Error"]["Code"]

    t = threading.Thread(target=put, daemon=True)
    t.start()
    eventually(lambda: sbx.s3_held() == ["kfp-ray/held/run/epoch-0001.pt"], 30, what="the write to be held")
    s3.put_object(Bucket="kfp-ray", Key="held/run/epoch-0000.pt", Body=b"on time")  # others pass meanwhile
    assert t.is_alive()  # held: no answer while the fault holds it
    sbx.patch_faults({"s3": None})
    t.join(30)
    assert outcome == {"error": "SlowDown"} and sbx.s3_held() == []
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="kfp-ray", Prefix="held/")["Contents"]] == ["held/run/epoch-0000.pt"]
