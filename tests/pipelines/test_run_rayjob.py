"""A training pipeline in lifecycle "rayjob", from its compiled YAML through the sandbox's
Data Science Pipelines server: one run_ray_job task, a KubeRay RayJob that creates and
deletes its own cluster; the same results as the RayCluster path (tests/pipelines/
test_run_local.py) and nothing left behind. A head-only cluster (one Ray node to start on
this 2-core machine; the RayCluster runs have workers). One pipeline runs here: every
training pipeline reaches run_ray_job through the same `train_on_ray` branch (which branch a
lifecycle value runs: tests/unit/test_dag.py; the component itself, both lifecycles:
components/run_ray_job/tests). fashion_mnist and ray_training ran here too until the suite
outgrew its 20 minutes; their RayCluster runs stay (test_run_fashion_mnist.py, test_run_local.py)."""

from __future__ import annotations

import re

import pytest

from tests.pipelines.cli_runs import assert_usage_ledger, run_cli, summary_metrics

pytestmark = pytest.mark.ray


def ran_as_rayjob(out: str) -> None:
    assert "run-ray-job: SUCCEEDED" in out and "provision-ray-cluster" not in out, out[-3000:]
    assert re.search(r"deleted RayJob \S+ and RayCluster \S+ \(lived \d+s\)", out), out[-3000:]
    assert re.search(r"RayCluster \S+: queued [\d.]+s, starting [\d.]+s, lifetime \d+s", out), out[-3000:]


def test_xgboost_tune_as_a_rayjob(tmp_path):
    """On RHOAI 2.25 (the `compile --rhoai 2.25` YAML, the CodeFlare operator's cluster): xgboost_tune's
    3.3 run is test_run_local's, so each shipped pipeline runs green on both releases."""
    run = run_cli("xgboost_tune", "samples=2", "concurrent_trials=2", "num_workers=0", "head_cpu=2", "lifecycle=rayjob",
                  keep=tmp_path / "out", platform="rhoai-2.25")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    out = run.stdout
    ran_as_rayjob(out)
    assert "platform: rhoai-2.25 " in out and "strip-optional" in out
    assert "admitted by Kueue" in out and "waiting for KubeRay's submitter to submit" in out
    m = summary_metrics(out)
    assert m["accuracy"] > 0.85 and m["trials"] == 2
    assert re.search(r"in S3 under s3://kfp-ray/runs/\S+: \d+ objects, [1-9]\d* checkpoint files, model yes", out)
    html = next((tmp_path / "out").glob("**/publish-training-results/*/html_report")).read_text()
    assert all(f'<th scope="row">{p}</th>' in html for p in ("queued", "starting", "job", "teardown"))
    assert "RayJob (K8sJobMode)" in html
    # run_ray_job copied the job log to S3, and the report links it; not the events, which
    # RHOAI's pipeline-runner may not list (deploy/rbac-kfp-ray.yaml part 4): said once
    assert re.search(r"job log in S3</th><td><code>s3://kfp-ray/runs/\S+/logs/job.log</code>", html)
    assert out.count("may not list events: the run's events are not copied to S3") == 1 and "run events in S3" not in html
    assert_usage_ledger(out, tmp_path / "out", cpu=2, memory_gib=4)  # xgboost_tune head_memory default 4Gi
