"""The training pipelines run green on this machine, from their compiled YAML, train models
that beat chance by a wide margin on held-out data, and leave model, checkpoints and
metrics in S3."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]


def run_cli(name, *params, keep=None):
    args = [sys.executable, "-m", "pipelines", "run", name, "--local"]
    for p in params:
        args += ["--param", p]
    if keep:
        args += ["--keep-outputs", str(keep)]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def summary_metrics(out: str) -> dict:
    line = next(li for li in out.splitlines() if li.startswith("metrics: "))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.e+-]+)", line)}


def test_xgboost_tune_through_the_cli(tmp_path):
    run = run_cli("xgboost_tune", "samples=4", "concurrent_trials=2", keep=tmp_path / "out")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    out = run.stdout
    assert "xgboost_tune: SUCCESS" in out
    # local_queue left empty: the sandbox (seed layout) has no `default` LocalQueue, so the CLI names its default one
    assert "==> local_queue=local-queue-test (the sandbox's default LocalQueue" in out
    assert "queued: waiting" in out or "admitted by Kueue" in out  # live progress: queue, start, job logs
    assert "best trial" in out
    m = summary_metrics(out)
    assert m["accuracy"] > 0.85 and m["trials"] == 4  # majority class is 63% of the held-out rows
    assert re.search(r"in S3 under s3://kfp-ray/runs/\S+: \d+ objects, [1-9]\d* checkpoint files, model yes", out)
    report = Path(next(li for li in out.splitlines() if li.startswith("report: ")).split(": ", 1)[1]).read_text()
    assert "Confusion matrix" in report and "Best trial" in report and "trials.csv" in report


def test_fashion_mnist_ray_train_through_the_cli():
    run = run_cli("fashion_mnist", "epochs=8")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    m = summary_metrics(run.stdout)
    assert m["accuracy"] > 0.8 and m["workers"] == 2  # 10 classes: chance is 10%
    assert re.search(r"[1-9]\d* checkpoint files, model yes", run.stdout)


def test_generic_ray_training_through_the_cli(tmp_path):
    """The generic pipeline with your code: here a local directory (the task runs on this
    machine); on a cluster an s3:// prefix or an https zip (see the submit_ray_job tests)."""
    run = run_cli("ray_training", "entrypoint=python xgboost_tune.py --samples 2 --concurrent 2 --rounds 30",
                  f"working_dir={ROOT / 'pipelines' / 'jobs'}", "dataset=breast_cancer", "head_memory=2Gi",
                  "worker_memory=2Gi", "worker_cpu=2", 'requirements=["xgboost-cpu==3.2.0", "boto3==1.44.5"]',
                  keep=tmp_path / "out")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    out = run.stdout
    assert summary_metrics(out)["accuracy"] > 0.85
    assert re.search(r"model: s3://kfp-ray/runs/\S+/model/model.json", out)
    assert re.search(r"results: s3://kfp-ray/runs/\S+/results.json", out)
    outputs = tmp_path / "out"
    cm = json.loads(next(outputs.glob("**/publish-training-results/executor_output.json")).read_text())
    matrix = cm["artifacts"]["confusion_matrix"]["artifacts"][0]["metadata"]["confusionMatrix"]
    assert [a["displayName"] for a in matrix["annotationSpecs"]] == ["malignant", "benign"]
    model = next(outputs.glob("**/publish-training-results/model"))
    assert json.loads(model.read_text())  # the model itself, copied into the artifact


def test_a_job_that_writes_no_results_json_still_succeeds_and_reports_what_it_printed(tmp_path):
    """Any existing training script: no results.json, metrics printed as KFP_RAY_METRICS lines."""
    script = r"""print('epoch 1 done'); print('KFP_RAY_METRICS {\"loss\": 0.125, \"epochs\": 1}')"""  # in sh's "..."
    run = run_cli("ray_training", f'entrypoint=python -c "{script}"', "num_workers=0", "head_memory=2Gi",
                  keep=tmp_path / "out")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "ray_training: SUCCESS" in run.stdout
    assert summary_metrics(run.stdout)["loss"] == 0.125
    report = next((tmp_path / "out").glob("**/publish-training-results/report")).read_text()
    assert "wrote no `results.json`" in report and "| loss | 0.125 |" in report
    assert "epoch 1 done" in report and re.search(r"output location: `s3://kfp-ray/runs/\S+/`", report)


def test_a_job_without_its_requirements_fails_with_the_import_error_in_the_task_log():
    """The sandbox's Ray image is RHOAI's: no xgboost or boto3 unless runtime_env pip installs them."""
    run = run_cli("xgboost_tune", "samples=2", "concurrent_trials=1", "install_requirements=false")
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert re.search(r"ModuleNotFoundError: No module named '(xgboost|boto3)'", out), out[-4000:]
    assert "xgboost_tune: FAILURE" in out
