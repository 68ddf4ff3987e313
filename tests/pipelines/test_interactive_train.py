"""Seed demo 2 runs green from its compiled YAML: the pipeline task is a Ray client driver
of its RayCluster, over the mTLS that the sandbox's Ray serves as RHOAI's does, and Ray Train
checkpoints land in S3."""

from __future__ import annotations

import json
import re

import pytest

from tests.opt_in import full_only
from tests.pipelines.cli_runs import run_cli, summary_metrics

pytestmark = pytest.mark.ray


TWO_25 = ("test_ray_client_tls (the 2.25 CA secret's client certificate through the head's mTLS), "
          "test_job_contract's and test_run_rayjob's 2.25 runs (the `compile --rhoai 2.25` YAML)")


@pytest.mark.parametrize("platform", ["rhoai-3.3", pytest.param("rhoai-2.25", marks=full_only(TWO_25))])
def test_interactive_train_through_the_cli(tmp_path, platform):
    """On either release: the CA secret is cert-manager's on 3.x, the CodeFlare operator's on 2.x.
    2.25 trains one epoch: the release differs in the platform, not the training."""
    epochs = 2 if platform == "rhoai-3.3" else 1  # 2: several epochs and checkpoints, 0.91 here
    run = run_cli("interactive_train", f"epochs={epochs}", keep=tmp_path / "out", platform=platform)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    out = run.stdout
    assert "interactive_train: SUCCEEDED" in out
    assert f"platform: {platform} " in out  # the summary names the release the sandbox played
    # a 2.25 user uploads the `compile --rhoai 2.25` YAML (no secretAsEnv `optional`: KFP 2.5 knows none)
    assert ("the YAML as `kfp-ray compile --rhoai 2.25` writes it (strip-optional)" in out) == (platform == "rhoai-2.25")
    # the driver connected by the head Service's DNS name, with a certificate from the cluster's CA
    assert re.search(r"run-ray-driver \| \[kfp-ray\] mTLS: client certificate signed by RayCluster \S+'s CA", out)
    assert re.search(r"connecting to ray://ray-\S+-head-svc\.sandbox\.svc:10001 as a Ray client", out)
    # its output and its Ray Train workers' output stream into the task's log, live
    assert re.search(rf"run-ray-driver \| .*\(RayTrainWorker pid=\d+.*Reporting training result {epochs}", out)
    assert "run-ray-driver | best epoch" in out
    # the quota goes as soon as the driver is done, not only in the exit handler
    assert re.search(r"run-ray-driver \| \[kfp-ray\] deleted RayCluster", out)
    m = summary_metrics(out)
    assert m["accuracy"] > (0.8 if epochs == 2 else 0.5) and m["checkpoints"] == epochs  # 10 classes: chance is 10%
    assert re.search(rf"in S3 under s3://kfp-ray/runs/\S+: \d+ objects, [{epochs}-9]\d* checkpoint files", out)
    model = re.search(r"model: (s3://kfp-ray/runs/\S+/checkpoints/interactive_train/checkpoint_\S+/weights.npy)", out)
    assert model, out[-3000:]
    outputs = tmp_path / "out"
    result = json.loads(next(outputs.glob("**/run-ray-driver/*/executor_output.json")).read_text())
    returned = json.loads(result["parameterValues"]["result"])
    assert returned["model_uri"] == model.group(1) and len(returned["history"]["series"]["test_accuracy"]) == epochs
    html = next(outputs.glob("**/publish-training-results/*/html_report")).read_text()
    assert all(f'<th scope="row">{p}</th>' in html for p in ("queued", "starting", "job", "teardown"))
    assert html.count('class="cell"') == 100 and "checkpoints" in html  # the 10x10 confusion matrix
