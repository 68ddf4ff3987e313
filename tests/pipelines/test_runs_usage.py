"""`kfp-ray runs usage` as a team lead runs it: the ledgers the runs wrote to the sandbox's S3
(moto's server), summed per pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kfp_ray import usage
from tests.unit.test_usage import RECORD


def test_runs_usage_sums_the_ledgers_in_the_bucket(box, sbx):
    """Ledgers of two months, one before --since, one that is not JSON."""
    import boto3

    env = sbx.data_connection()
    s3 = boto3.client("s3", endpoint_url=env["AWS_S3_ENDPOINT"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    bucket = env["AWS_S3_BUCKET"]
    for run, day, pipeline, cpu_h in (("u1", "2026-09-30", "fashion_mnist", 9.0), ("u2", "2026-10-02", "fashion_mnist", 1.25),
                                      ("u3", "2026-10-20", "xgboost_tune", 0.5), ("u4", "2026-10-21", "fashion_mnist", 0.75)):
        entry = usage.ledger(RECORD, queued=1, starting=0, running=0, teardown=0, run_id=run, pipeline=pipeline,
                             finished_at=f"{day}T12:00:00+00:00")
        entry["cpu_hours"] = cpu_h
        s3.put_object(Bucket=bucket, Key=usage.ledger_key(entry), Body=json.dumps(entry).encode())
    s3.put_object(Bucket=bucket, Key="kfp-ray/usage/2026-10/broken.json", Body=b"not json")
    keys = {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT", "AWS_S3_BUCKET")}
    cmd = [sys.executable, "-m", "kfp_ray.pipelines", "runs", "usage", "--since", "2026-10-01"]
    run = subprocess.run([*cmd, "--json"], env={**os.environ, **keys}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert sorted(e["run_id"] for e in got["runs"] if e["run_id"].startswith("u")) == ["u2", "u3", "u4"]
    sums = {r["pipeline"]: (r["runs"], r["cpu_hours"]) for r in got["sums"]}
    assert sums["fashion_mnist"][0] >= 2 and sums["xgboost_tune"][0] >= 1  # and any run of this session's
    assert "skipping s3://" in run.stderr and "broken.json: not a ledger" in run.stderr
    table = subprocess.run(cmd, env={**os.environ, **keys}, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "CPU-h" in table.stdout and table.stdout.splitlines()[-1].startswith("total")
    for secret in (keys["AWS_SECRET_ACCESS_KEY"], keys["AWS_ACCESS_KEY_ID"]):
        assert secret not in run.stdout + run.stderr + table.stdout + table.stderr
