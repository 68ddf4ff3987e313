"""xgboost_tune's job after a preemption (issue 29, item 4: "Ray Tune restore of unfinished
trials"): its first run is stopped once Tune has saved a finished trial in the run's
checkpoint folder ($KFP_RAY_CHECKPOINTS, in S3), as a Kueue preemption stops it when KubeRay
deletes the pods; the run submitted again (what follow_ray_job and KubeRay then do) restores
Tune's experiment, keeps the finished trials, runs the others and writes the results of all.
The job as the pipelines ship it, on the module's real Ray cluster, S3 through the data
connection's keys. No step waits on timing: the stop waits for the trial in S3."""

from __future__ import annotations

import json
import re
import shutil
import uuid

import pytest

from kfp_ray import datasets, jobs
from kfp_ray.pipelines.common import JOBS
from tests.helpers import eventually
from tests.opt_in import full_only

ENTRYPOINT = "python xgboost_tune.py --samples 4 --concurrent 1 --rounds 20"


@pytest.mark.ray
@full_only("test_run_rayjob and test_run_local (xgboost_tune green end to end); the preemption rows of "
           "tests/reliability and test_run_preempted (a job resumed from its checkpoint after a preemption)")
def test_a_stopped_tuning_run_is_restored_with_its_finished_trials(box, sbx, ray_cluster, as_admin, tmp_path,
                                                                    monkeypatch):
    keys = sbx.data_connection()
    creds = {k: keys[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET")}
    for k, v in creds.items():
        monkeypatch.setenv(k, v)  # for the staging here; the job gets them as its env, as the pods get them
    bucket, prefix = creds["AWS_S3_BUCKET"], f"tune-resume/{uuid.uuid4().hex[:8]}"
    datasets.stage("breast_cancer", f"s3://{bucket}/{prefix}/data")
    shutil.copytree(JOBS, tmp_path / "code", ignore=shutil.ignore_patterns("__pycache__"))
    # Tune saves its experiment state every second (its default adapts, to tens of seconds): the
    # stop then comes once the first trial is saved, while the next one runs
    env = {**creds, "TUNE_GLOBAL_CHECKPOINT_S": "1", "KFP_RAY_DATA": f"s3://{bucket}/{prefix}/data",
           "KFP_RAY_OUTPUT": f"s3://{bucket}/{prefix}"}
    s3 = sbx.s3()
    url, client = ray_cluster.dashboard_url, jobs.RayJobsClient(ray_cluster.dashboard_url)

    def submit(task: str) -> str:
        return jobs.submit(url, ENTRYPOINT, "tune-resume", task, working_dir="code", embedded_root=str(tmp_path),
                           env_vars=env, requirements_file="requirements/xgboost_tune.txt")

    def finished_trials() -> int:
        """Trials Tune's saved experiment state in S3 counts as TERMINATED."""
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/checkpoints/xgboost-tune/").get("Contents", [])
        states = sorted(o["Key"] for o in listed if re.search(r"/experiment_state-[^/]+\.json$", o["Key"]))
        if not states:
            return 0
        text = s3.get_object(Bucket=bucket, Key=states[-1])["Body"].read().decode()
        return text.count("TERMINATED")

    first = submit("first")
    eventually(lambda: finished_trials() >= 1 or client.info(first)["status"] in jobs.TERMINAL, 300, 1.0,
               what="Tune to save a finished trial in the run's checkpoint folder")
    assert client.info(first)["status"] not in jobs.TERMINAL, client.logs(first)[-3000:]
    client.stop(first)
    eventually(lambda: client.info(first)["status"] in jobs.TERMINAL, 60, what="the first run to stop")
    kept = finished_trials()

    second = submit("again")
    result = jobs.follow(url, second, timeout=300, echo=lambda line: None)
    assert result.status == "SUCCEEDED", result.logs[-4000:]
    log = result.logs
    assert f"resuming from checkpoint s3://{bucket}/{prefix}/checkpoints/xgboost-tune" in log, log[:3000]
    started = len(re.findall(r"Trial train_xgb_\w+ started with configuration", log))
    assert started <= 4 - kept, (kept, started, log[-3000:])  # the finished ones are not run again
    results = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/results.json")["Body"].read())
    assert results["metrics"]["trials"] == 4 and results["metrics"]["accuracy"] > 0.85, results["metrics"]
    print(f"tune resume: {kept} trial(s) kept from the stopped run, {started} started again, "
          f"accuracy {results['metrics']['accuracy']:.3f}")
