"""What a job owes kfp-ray: its requirements (or it fails with the import error, as on
RHOAI), and no results.json (the run succeeds with what the job printed)."""

from __future__ import annotations

import re

import pytest

from tests.pipelines.cli_runs import run_cli, summary_metrics

pytestmark = pytest.mark.ray


def test_a_job_without_its_requirements_fails_with_the_import_error_in_the_task_log(tmp_path):
    """The sandbox's Ray image is RHOAI's: no xgboost or boto3 unless runtime_env pip installs them."""
    # follow-ray-job fails for good; KFP retries it twice (30 s, then 60 s later), which this test need not wait out
    run = run_cli("xgboost_tune", "samples=2", "concurrent_trials=1", "num_workers=0", "install_requirements=false",
                  keep=tmp_path / "out", timings={"task_retry_backoff_cap_s": 1})
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert re.search(r"ModuleNotFoundError: No module named '(xgboost|boto3)'", out), out[-4000:]
    assert "xgboost_tune: FAILED" in out
    # the exit handler's report still says where the run failed and why, with the log's end and the tasks' timeline
    assert re.search(r"teardown-ray-cluster \| \[kfp-ray\] run report: task follow-ray-job failed: .*No module named", out)
    page = next((tmp_path / "out").glob("**/teardown-ray-cluster/*/html_report")).read_text()
    assert "Failed at follow-ray-job" in page and re.search(r"No module named &#x27;(xgboost|boto3)&#x27;", page)
    assert all(f'data-phase="{p}"' in page for p in ("provision-ray-cluster", "follow-ray-job"))
    assert re.search(r'data-phase="follow-ray-job"[^>]* data-state="failed"', page)
    assert 'id="failure"' in page and "<script" not in page


def test_a_job_that_writes_no_results_json_still_succeeds_and_reports_what_it_printed(tmp_path):
    """Any existing training script: no results.json, metrics printed as KFP_RAY_METRICS lines. On
    RHOAI 2.25: the generic pipeline's 3.3 run is test_run_local's."""
    script = r"""print('epoch 1 done'); print('KFP_RAY_METRICS {\"loss\": 0.125, \"epochs\": 1}')"""  # in sh's "..."
    run = run_cli("ray_training", f'entrypoint=python -c "{script}"', "num_workers=0", "head_memory=2Gi",
                  keep=tmp_path / "out", platform="rhoai-2.25")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "ray_training: SUCCEEDED" in run.stdout and "platform: rhoai-2.25 " in run.stdout
    assert summary_metrics(run.stdout)["loss"] == 0.125
    report = next((tmp_path / "out").glob("**/publish-training-results/*/report")).read_text()
    assert "wrote no `results.json`" in report and "| loss | 0.125 |" in report
    assert "epoch 1 done" in report and re.search(r"output location: `s3://kfp-ray/runs/\S+/`", report)
    html = next((tmp_path / "out").glob("**/publish-training-results/*/html_report")).read_text()
    assert "epoch 1 done" in html and "0.125" in html and 'id="curves"' not in html
