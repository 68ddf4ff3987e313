"""follow_ray_job with the data connection mounted (pipelines.common.with_data_connection): the
Ray pods have its keys (envFrom), so a job may print them; follow's log and its job_log
artifact show [REDACTED] instead. The cluster's data connection has no AWS_DEFAULT_REGION
(optional in RHOAI), and the cluster came up through two failed image pulls and one crash
of its head (a registry outage, a one-off exit): neither is fatal."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from kubernetes import client as k8s

from kfp_ray import jobs
from kfp_ray.pipelines.common import data_connection_env
from kfp_ray_sandbox.client import SandboxClient
from tests.helpers import kube_identity

pytestmark = pytest.mark.ray
COMPONENT = "kfp_ray.components.follow_ray_job.component:follow_ray_job"
JOBS = Path(__file__).resolve().parents[3] / "pipelines" / "jobs"
NOREGION = "aws-connection-noregion-ray"
CLUSTER = "dc-ray"


@pytest.fixture(scope="module")
def noregion(box):
    """A data connection without AWS_DEFAULT_REGION (its values, read as a user would)."""
    client = SandboxClient(box.info)
    v1 = k8s.CoreV1Api(client.api_client())
    values = {k: v for k, v in client.data_connection().items() if k != "AWS_DEFAULT_REGION"}
    v1.create_namespaced_secret(client.namespace, k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=NOREGION), type="Opaque",
        data={k: base64.b64encode(v.encode()).decode() for k, v in values.items()}))
    yield values
    if not box.stopped:
        v1.delete_namespaced_secret(NOREGION, client.namespace)


@pytest.fixture(scope="module")
def dc_cluster(box, noregion):
    """A head-only cluster with that data connection, provisioned as pipeline-runner through
    two failed pulls and one exit of the head (kubelet back-off shortened to 0.25 s)."""
    from kfp_ray import cluster, tasks

    client = SandboxClient(box.info)
    client.set_faults({"clusters": {CLUSTER: {"image_pull_failures": 2, "crash_loop": 1}},
                       "platform": {"kubelet_backoff_s": 0.25}})
    with kube_identity(box.info["kubeconfig_pipeline_runner"]):
        try:
            yield tasks.provision(run_id=f"dc-{os.getpid()}", cluster_name=CLUSTER, namespace="sandbox",
                                  local_queue="local-queue-test", num_workers=0, head_cpu="1", head_memory="2Gi",
                                  data_connection=NOREGION, startup_timeout=180)
        finally:
            client.clear_faults()
            if not box.stopped:
                cluster.delete(CLUSTER, "sandbox")


def test_two_failed_pulls_and_one_crash_were_ridden_out(dc_cluster, sbx):
    v1 = k8s.CoreV1Api(sbx.api_client())
    head = v1.list_namespaced_pod("sandbox", label_selector=f"ray.io/cluster={CLUSTER}").items[0]
    ray = head.status.container_statuses[0]
    assert ray.ready and ray.restart_count == 1 and ray.last_state.terminated.exit_code == 2
    failed_pulls = [e for e in v1.list_namespaced_event("sandbox", field_selector=f"involvedObject.name={head.metadata.name}").items
                    if e.reason == "Failed" and e.message.startswith("Failed to pull image")]
    assert sum(e.count for e in failed_pulls) == 2


def test_follow_redacts_the_data_connection_keys_a_job_prints(dc_cluster, noregion, run_local):
    secret, key_id = noregion["AWS_SECRET_ACCESS_KEY"], noregion["AWS_ACCESS_KEY_ID"]
    entrypoint = ("python -c \"import os, storage; "
                  "print('secret=' + os.environ['AWS_SECRET_ACCESS_KEY'], 'id=' + os.environ['AWS_ACCESS_KEY_ID']); "
                  "print('region=' + os.environ.get('AWS_DEFAULT_REGION', 'unset')); "
                  "storage.put_bytes('s3://' + os.environ['AWS_S3_BUCKET'] + '/redaction/probe.txt', b'ok'); "
                  "print('s3 ok')\"")
    # boto3 is not in the Ray image (as on RHOAI): the job installs it, as the demo jobs do
    job = jobs.submit(dc_cluster.dashboard_url, entrypoint, run_id=f"redact-{os.getpid()}", task="redact",
                      working_dir=str(JOBS), pip=["boto3==1.44.5"])
    # The job really prints them (Ray's own log of it):
    raw = jobs.RayJobsClient(dc_cluster.dashboard_url)
    result, log = run_local(COMPONENT, {"dashboard_url": dc_cluster.dashboard_url, "job_id": job, "delete_cluster": False},
                            env=data_connection_env(noregion))
    assert result["status"] == "SUCCESS", log
    assert secret in raw.logs(job) and key_id in raw.logs(job)
    assert "secret=[REDACTED] id=[REDACTED]" in log and secret not in log and key_id not in log
    assert "s3 ok" in log  # boto3 in the job got us-east-1
    if "AWS_DEFAULT_REGION" not in os.environ:  # the sandbox's Ray processes also inherit its own env
        assert "region=unset" in log  # the Ray pod has no region either
    artifact = Path(result["tasks"]["follow-ray-job"]["artifacts"]["job_log"]["artifacts"][0]["uri"]).read_text()
    assert "secret=[REDACTED] id=[REDACTED]" in artifact and secret not in artifact and key_id not in artifact
