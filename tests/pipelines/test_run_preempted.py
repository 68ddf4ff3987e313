"""Issue 29's acceptance: fashion_mnist with priority_class=low, run from compiled/ on the sandbox's
Data Science Pipelines server (kfp.Client, each task a pod, as `kfp-ray run --local` runs it),
is preempted mid-training by a high-priority RayCluster once its first checkpoint is in S3 (its
second is held by the sandbox's S3 until then, so the job cannot finish first).
Kueue suspends the run's cluster and KubeRay deletes its pods; once the preemptor is gone Kueue
admits the cluster again, follow submits the job on its new pods, the job resumes from its
latest checkpoint, and the run SUCCEEDS: preemptions = 1, the job log names the checkpoint,
and the accuracy clears the bar of an unpreempted run (test_run_fashion_mnist's). Nothing
waits on timing: each step waits for the state the previous one leads to."""

# no `from __future__ import annotations`: kfp reads annotations as types

import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from kfp_ray.pipelines.run_tasks import run_reader
from kfp_ray.pipelines.summary import task_outputs
from kfp_ray_sandbox.client import SandboxClient
from tests.helpers import eventually, labelled, preempting_queue, raycluster

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
RAY = ("ray.io", "v1", "sandbox")
DONE = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")


def keys(s3, prefix: str) -> list[str]:
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="kfp-ray", Prefix=prefix)
            for o in page.get("Contents", [])]


def run_clusters(co, run_id: str) -> list[dict]:
    return co.list_namespaced_custom_object(*RAY, "rayclusters", label_selector=f"kfp-ray.io/run-id={run_id}")["items"]


def test_fashion_mnist_preempted_mid_training_resumes_from_its_checkpoint_and_succeeds(box, sbx):
    import kfp

    co = k8s.CustomObjectsApi(sbx.api_client())
    s3 = sbx.s3()
    # the preemptor only needs to hold the quota; the job's second checkpoint (its last epoch's) waits
    # in S3 until the test has preempted the run, so the job cannot end first (sandbox/faults.py)
    sbx.set_faults({"clusters": {"preemptor*": {"slow_start": 600}},
                    "s3": {"hold": ["kfp-ray/preempted/*/checkpoints/epoch-0001.pt"]}})
    client = kfp.Client(host=box.info["pipelines_api"], existing_token=SandboxClient(box.info).token(),
                        ssl_ca_cert=box.info["ca_file"])
    with preempting_queue(co, {"low": 100, "high": 1000}):
        run = client.create_run_from_pipeline_package(
            str(ROOT / "compiled" / "fashion_mnist.yaml"), run_name="preempted",
            arguments={"epochs": 2, "num_workers": 1, "worker_gpus": 1, "priority_class": "low",
                       "local_queue": "local-queue-test", "s3_prefix": "preempted"})
        read = run_reader(client)  # the run's state, without building the whole V2beta1Run on each poll

        def checkpointed():
            state = read(run.run_id).state
            assert state not in DONE, f"the run ended ({state}) before its first checkpoint"
            return [k for k in keys(s3, "preempted/") if k.endswith("/checkpoints/epoch-0000.pt")]

        first = eventually(checkpointed, 600, 1.0, what="the first epoch's checkpoint in S3")
        [victim] = run_clusters(co, run.run_id)
        name = victim["metadata"]["name"]
        assert victim["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
        # worker_gpus=1: the worker lands on the pool's GPU node (the pipeline tolerates its taint)
        pods = k8s.CoreV1Api(sbx.api_client()).list_namespaced_pod("sandbox", label_selector=f"ray.io/cluster={name}")
        nodes = {p.metadata.labels["ray.io/node-type"]: p.spec.node_name for p in pods.items}
        assert nodes["worker"].startswith("gpu-worker") and not nodes["head"].startswith("gpu-worker"), nodes
        co.create_namespaced_custom_object(*RAY, "rayclusters",
                                           labelled(raycluster("preemptor", workers=0, cpu="9", memory="2Gi"), "high"))
        eventually(lambda: (co.get_namespaced_custom_object(*RAY, "rayclusters", name).get("status") or {})
                   .get("state") == "suspended", 180, what=f"Kueue to preempt {name} and KubeRay to stop its pods")
        sbx.patch_faults({"s3": None})  # its writer is gone with the pods: the held write never lands
        co.delete_namespaced_custom_object(*RAY, "rayclusters", "preemptor")
        deadline = time.monotonic() + 900
        while (state := read(run.run_id).state) not in DONE and time.monotonic() < deadline:
            time.sleep(1.0)
    outputs = task_outputs(s3, "kfp-ray", f"fashion-mnist/{run.run_id}/")
    follow = outputs["follow-ray-job"]
    job_log = next(k for k in keys(s3, f"fashion-mnist/{run.run_id}/follow-ray-job/") if k.endswith("/job_log"))
    log = s3.get_object(Bucket="kfp-ray", Key=job_log)["Body"].read().decode()
    assert state == "SUCCEEDED", log[-4000:]
    metrics = follow["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    print(f"preempted run {run.run_id}: {metrics}")  # for the record (pytest -s)
    assert metrics["preemptions"] == 1 and metrics["preempted_seconds"] > 0, metrics
    assert metrics["accuracy"] > 0.6  # test_run_fashion_mnist's bar for 2 epochs unpreempted
    assert "--- kfp-ray: preempted (1); the job is submitted again on the cluster's new pods ---" in log
    resumed = log.split("--- kfp-ray: preempted (1)", 1)[1]
    assert f"resuming from checkpoint s3://kfp-ray/{first[0].rsplit('/', 1)[0]}/epoch-" in resumed, resumed[:2000]
    # the S3 copy of the job log (issue 30): the whole log, both attempts, and the parts sent as
    # it grew, which hold every line of it in order
    copied_key = next(k for k in keys(s3, "preempted/") if k.endswith("/logs/job.log"))
    copied = s3.get_object(Bucket="kfp-ray", Key=copied_key)["Body"].read().decode()
    assert copied == log and "--- kfp-ray: preempted (1)" in copied
    parts = sorted(keys(s3, copied_key + ".d/"))
    assert len(parts) >= 2 and "".join(s3.get_object(Bucket="kfp-ray", Key=k)["Body"].read().decode()
                                       for k in parts) == copied, parts
    # the run's metrics and its report: the preemption, what it cost, where the job went on from
    published = outputs["publish-training-results"]["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert published["preemptions"] == 1 and published["preempted_seconds"] == metrics["preempted_seconds"]
    page_key = next(k for k in keys(s3, f"fashion-mnist/{run.run_id}/publish-training-results/")
                    if k.endswith("/html_report"))
    page = s3.get_object(Bucket="kfp-ray", Key=page_key)["Body"].read().decode()
    assert '<th scope="row">preemptions</th><td>1</td>' in page and ">lost to preemption<" in page
    assert 'data-phase="preempted (1)"' in page  # the timeline's row for it
    assert '<th scope="row">resumed from</th><td>s3://kfp-ray/preempted/' in page
    eventually(lambda: not run_clusters(co, run.run_id), 120, what="the run's cluster to be deleted")
