"""run_ray_job, as provision and follow_ray_job do in the RayCluster lifecycle: while its RayJob
waits for Kueue it says where it stands in the LocalQueue (queue_position.py), and it copies the
job log to $KFP_RAY_OUTPUT/logs/job.log in S3 (jobs.LogShipper). On RHOAI 2.25 (Kueue 0.11):
the RayCluster lifecycle's tests run on 3.3 (provision_ray_cluster/tests/test_queue_position.py,
follow_ray_job/tests/test_durable_log.py)."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from tests.helpers import eventually, in_thread, on_platforms, raycluster

RAY = ("ray.io", "v1", "sandbox", "rayclusters")
JOB = "python -c \"import sys\nfor i in range(500): print('line', i)\""


@pytest.mark.ray
@on_platforms("rhoai-2.25")
def test_a_queued_rayjob_says_its_position_and_its_log_is_kept_in_s3(box, sbx, as_admin, capsys, tmp_path,
                                                                       monkeypatch):
    co = k8s.CustomObjectsApi(sbx.api_client())
    keys = sbx.data_connection()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET"):
        monkeypatch.setenv(k, keys[k])  # the data connection, as the pipelines mount it into the task
    bucket, prefix = keys["AWS_S3_BUCKET"], f"rj-log/{uuid.uuid4().hex[:8]}"
    # 8 CPUs each of the ClusterQueue's 9: one at a time ahead of ours; their images never pull,
    # so they hold the quota without starting Ray
    sbx.set_faults({"clusters": {f"rq-{x}": {"image_pull": True} for x in "ab"}})

    def later_than(name: str) -> None:  # Kueue orders by creation time, to the second
        stamp = co.get_namespaced_custom_object(*RAY, name)["metadata"]["creationTimestamp"]
        eventually(lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > stamp, 5, 0.05,
                   what=f"a second later than {name}'s creation")

    for name in ("rq-a", "rq-b"):
        co.create_namespaced_custom_object(*RAY, raycluster(name, workers=1, cpu="4", memory="1Gi"))
        later_than(name)
    eventually(lambda: co.get_namespaced_custom_object(*RAY, "rq-a")["spec"].get("suspend") is False, 30,
               what="rq-a to be admitted")
    log_path = tmp_path / "job.log"
    t, out = in_thread("run-ray-job", lambda: tasks.run_job(
        run_id="rj-position", entrypoint=JOB, task_name="run-ray-job", task_id="9", namespace="sandbox",
        local_queue="local-queue-test", num_workers=0, head_cpu="2", head_memory="1Gi", admission_timeout=300,
        startup_timeout=120, log_path=str(log_path), env_vars={"KFP_RAY_OUTPUT": f"s3://{bucket}/{prefix}"}))
    lines: list[str] = []

    def said(pattern: str) -> re.Match | None:
        lines.extend(capsys.readouterr().out.splitlines())
        return next((m for li in lines if (m := re.search(pattern, li))), None)

    eventually(lambda: said(r"position 1 of 2 waiting in LocalQueue local-queue-test"), 60,
               what="run_ray_job to say its RayJob is second in line")
    co.delete_namespaced_custom_object(*RAY, "rq-a")
    eventually(lambda: said(r"queued: now position 0 of 1 waiting in LocalQueue local-queue-test \(next in line"),
               90, what="run_ray_job to say its RayJob is next")
    co.delete_namespaced_custom_object(*RAY, "rq-b")
    t.join(timeout=240)
    assert "result" in out, out
    assert out["result"].result.status == "SUCCEEDED"
    said("")
    positions = [int(m.group(1)) for li in lines if (m := re.search(r"position (\d+) of \d+ waiting", li))]
    assert positions[0] == 1 and positions[-1] == 0 and sorted(positions, reverse=True) == positions, positions

    s3 = sbx.s3()
    whole = s3.get_object(Bucket=bucket, Key=f"{prefix}/logs/job.log")["Body"].read().decode()
    assert "line 499" in whole and whole == log_path.read_text()
    parts = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/logs/job.log.d/").get("Contents", [])
    assert parts and b"".join(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
                              for o in sorted(parts, key=lambda o: o["Key"])).decode() == whole
    # and the run's events beside it (an admin may list them): Kueue's on the RayJob's Workload,
    # KubeRay's on the RayJob and its cluster, none of another object
    events = [json.loads(line) for line in
              s3.get_object(Bucket=bucket, Key=f"{prefix}/logs/events.jsonl")["Body"].read().decode().splitlines()]
    rayjob = out["result"].rayjob
    seen = {(e["kind"], e["reason"]) for e in events}
    assert {("Workload", "QuotaReserved"), ("Workload", "Admitted")} <= seen, seen
    assert {e["kind"] for e in events} >= {"Workload", "RayJob", "RayCluster"}, seen
    assert all(e["name"] == rayjob or e["name"].startswith((f"{rayjob}-", f"rayjob-{rayjob}-")) for e in events)
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
