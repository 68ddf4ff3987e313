"""The training pipelines run green on this machine, from their compiled YAML, train models
that beat chance by a wide margin on held-out data, and leave model, checkpoints and
metrics in S3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.opt_in import full_only
from tests.pipelines.cli_runs import ROOT, assert_usage_ledger, run_cli, summary_metrics

pytestmark = pytest.mark.ray


@full_only("test_generic_ray_training_through_the_cli (the same xgboost job through train_on_ray's RayCluster branch on "
           "3.3: the default LocalQueue, live progress, the reports), test_run_rayjob (xgboost_tune's compiled YAML)")
def test_xgboost_tune_through_the_cli(tmp_path):
    """On RHOAI 3.3. (2.25 through the CLI, each with the `compile --rhoai 2.25` YAML: xgboost_tune
    in test_run_rayjob, ray_training in test_job_contract, interactive_train in its own test.)"""
    platform, samples = "rhoai-3.3", 4
    run = run_cli("xgboost_tune", f"samples={samples}", "concurrent_trials=2", keep=tmp_path / "out", platform=platform)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    out = run.stdout
    assert "xgboost_tune: SUCCEEDED" in out
    assert f"platform: {platform} " in out  # the summary names the release the sandbox played
    m = summary_metrics(out)
    assert m["accuracy"] > 0.85 and m["trials"] == samples  # majority class is 63% of the held-out rows
    assert_xgboost_run_on_3_3(out, tmp_path / "out")


def test_generic_ray_training_through_the_cli(tmp_path):
    """The generic pipeline with your code in a directory of this machine: a task's pod cannot see
    it (as on a cluster), so `run --local` uploads it to the sandbox's S3 and the run gets its
    s3:// prefix; on a cluster you give that prefix or an https zip (see the submit_ray_job tests)."""
    run = run_cli("ray_training", "entrypoint=python xgboost_tune.py --samples 2 --concurrent 2 --rounds 30",
                  f"working_dir={ROOT / 'pipelines' / 'jobs'}", "dataset=breast_cancer", "head_memory=2Gi",
                  "num_workers=0", "head_cpu=3",  # head-only: the demos' runs have workers; a node less here
                  'requirements=["xgboost-cpu==3.2.0", "boto3==1.44.5"]',
                  keep=tmp_path / "out")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    out = run.stdout
    assert re.search(r"==> working_dir \S+/pipelines/jobs: \d+ files \(\d+ KiB\) uploaded to s3://kfp-ray/code/[0-9a-f]{16}/", out)
    assert summary_metrics(out)["accuracy"] > 0.85
    assert re.search(r"model: s3://kfp-ray/runs/\S+/model/model.json", out)
    assert re.search(r"results: s3://kfp-ray/runs/\S+/results.json", out)
    outputs = tmp_path / "out"
    cm = json.loads(next(outputs.glob("**/publish-training-results/*/executor_output.json")).read_text())
    matrix = cm["artifacts"]["confusion_matrix"]["artifacts"][0]["metadata"]["confusionMatrix"]
    assert [a["displayName"] for a in matrix["annotationSpecs"]] == ["malignant", "benign"]
    model = next(outputs.glob("**/publish-training-results/*/model"))
    assert json.loads(model.read_text())  # the model itself, copied into the artifact
    # the usage ledger: a head-only cluster of 3 CPU and 2 GiB (pipeline-runner reads no Workload: the
    # RayCluster's requests stand in, as the report says)
    assert_usage_ledger(out, outputs, cpu=3, memory_gib=2)
    assert "ray_training: SUCCEEDED" in out and "platform: rhoai-3.3 " in out
    html = assert_xgboost_run_on_3_3(out, outputs)
    # the job log, copied to S3 while the job ran (follow_ray_job), linked from the report
    assert re.search(r"job log in S3</th><td><code>s3://kfp-ray/runs/\S+/logs/job.log</code>", html)


def assert_xgboost_run_on_3_3(out: str, outputs: Path) -> str:
    """What a 3.3 CLI run of the xgboost job shows: the default LocalQueue, live progress, the
    results in S3, the Markdown report and the HTML one the UI renders (drawn and checked in
    Chromium by tests/report). Returns the HTML report."""
    assert "strip-optional" not in out  # 3.x takes the YAML as compiled
    # local_queue left empty: the CLI passes the project's default LocalQueue (the seed layout has no `default`)
    assert "==> local_queue=local-queue-test: the default LocalQueue of sandbox (annotated" in out
    assert "queued: waiting" in out or "admitted by Kueue" in out  # live progress: queue, start, job logs
    assert "best trial" in out
    assert re.search(r"in S3 under s3://kfp-ray/runs/\S+: \d+ objects, [1-9]\d* checkpoint files, model yes", out)
    report = Path(next(li for li in out.splitlines() if li.startswith("report: ")).split(": ", 1)[1]).read_text()
    assert "Confusion matrix" in report and "Best trial" in report and "trials.csv" in report
    html = next(outputs.glob("**/publish-training-results/*/html_report")).read_text()
    assert all(f'<th scope="row">{p}</th>' in html for p in ("queued", "starting", "job", "teardown"))
    assert "best trial" in html and html.count('class="cell"') == 4 and "LocalQueue local-queue-test" in html
    # the tasks at their real times (the run's task pods), the job log's location, the image and Ray version
    assert all(f'class="phase" data-phase="{t}"' in html for t in ("provision-ray-cluster", "follow-ray-job"))
    assert re.search(r"<th scope=\"row\">job log</th><td><code>[^<]*job_log</code>", html)
    assert re.search(r"<th scope=\"row\">Ray version</th><td>2\.\d+\.\d+</td>", html)
    assert '<th scope="row">num_workers</th>' in html and '<th scope="row">dataset</th><td>breast_cancer</td>' in html
    return html
