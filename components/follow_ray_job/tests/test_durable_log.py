"""follow_ray_job copies the job log to S3 as it grows ($KFP_RAY_OUTPUT/logs/job.log: parts
while the job runs, the whole log at the end, jobs.LogShipper), so a head that dies takes no
line with it that the task had read; the cluster's events go beside it (events.jsonl)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from kfp_ray import jobs, tasks
from kfp_ray.errors import KfpRayError
from tests.helpers import eventually, in_thread

# 3000 lines at once, then one every 0.2 s until the head dies
JOB = ("python -c \"import time\nfor i in range(3000): print('line', i, flush=True)\ni = 3000\n"
       "while True:\n    print('line', i, flush=True); i += 1; time.sleep(0.2)\"")


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^line (\d+)$", text, re.M)]


@pytest.mark.ray
def test_the_log_is_copied_to_s3_as_it_grows_and_outlives_the_head(box, sbx, ray_cluster, as_admin, tmp_path,
                                                                    monkeypatch):
    import boto3

    keys = sbx.data_connection()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET"):
        monkeypatch.setenv(k, keys[k])  # the data connection, as the pipelines mount it into the task
    s3 = boto3.client("s3", endpoint_url=keys["AWS_S3_ENDPOINT"], aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    bucket, prefix = keys["AWS_S3_BUCKET"], f"durable/{uuid.uuid4().hex[:8]}"
    env_vars = {"KFP_RAY_OUTPUT": f"s3://{bucket}/{prefix}"}
    uri = jobs.log_uri(env_vars)
    assert uri == f"s3://{bucket}/{prefix}/logs/job.log"
    log_path = tmp_path / "job.log"
    shipper = jobs.LogShipper(str(log_path), uri, every=1.0)
    run_id = f"durable-{uuid.uuid4().hex[:6]}"
    t, out = in_thread("follow", lambda: tasks.follow(
        ray_cluster.dashboard_url, "", str(log_path), cluster_name=ray_cluster.name, namespace="sandbox",
        delete_cluster=False, timeout=300, outage_tolerance_seconds=5, shipper=shipper,
        submission={"entrypoint": JOB, "run_id": run_id, "task": "follow-ray-job", "env_vars": env_vars}))

    def parts() -> list[str]:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/logs/job.log.d/").get("Contents", [])
        return sorted(o["Key"] for o in listed)

    eventually(lambda: parts(), 60, what="the first part of the log in S3, while the job runs")
    eventually(lambda: log_path.exists() and len(_numbers(log_path.read_text())) >= 3000, 60,
               what="the task to have read the job's first 3000 lines")
    # what the job printed before the head dies: its driver log on the head's disk
    head = next(p for p in sbx.processes() if p["cluster"] == ray_cluster.name and not p["terminating"])
    driver_log = next(Path(head["temp_dir"]).glob(f"session_latest/logs/job-driver-{jobs.submission_id(run_id, 'follow-ray-job')}.log"))
    printed = _numbers(driver_log.read_text())
    sbx.crash_head(ray_cluster.name)
    t.join(timeout=120)
    assert isinstance(out.get("error"), KfpRayError), out  # the job died with its head

    copied = b"".join(s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in parts()).decode()
    numbers = _numbers(copied)
    assert numbers == list(range(len(numbers)))  # in order, none twice
    kept = len(set(printed) & set(numbers)) / len(printed)
    print(f"durable log: {len(numbers)} lines in S3 in {len(parts())} parts; {len(printed)} printed before the "
          f"head died; {kept:.2%} of them kept")
    assert kept >= 0.99
    whole = s3.get_object(Bucket=bucket, Key=f"{prefix}/logs/job.log")["Body"].read().decode()
    assert whole == log_path.read_text() and copied in whole  # the whole log, written when the task ended
    # beside it, the cluster's events (an admin may list them): Kueue's on its Workload, KubeRay's on it
    events = [json.loads(line) for line in
              s3.get_object(Bucket=bucket, Key=f"{prefix}/logs/events.jsonl")["Body"].read().decode().splitlines()]
    assert {("Workload", "Admitted"), ("RayCluster", "CreatedHeadPod")} <= {(e["kind"], e["reason"]) for e in events}
    assert all(e["name"].startswith((ray_cluster.name, f"raycluster-{ray_cluster.name}-")) for e in events)
