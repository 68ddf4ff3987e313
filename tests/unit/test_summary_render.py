"""The summary `kfp-ray run --local` prints (pipelines/summary.py render)."""

from kfp_ray.pipelines.summary import render


def result(status: str, tasks: dict) -> dict:
    return {"status": status, "error": "", "tasks": tasks, "cluster": "", "metrics": {}, "model": "", "results": "",
            "output_uri": "", "report": "", "job_log": "", "stored": {"objects": 0, "checkpoints": 0, "model": False}}


def test_a_task_still_running_in_an_ended_run_is_said_to_be_kfps_last_report():
    """KFP 2.14's persistence agent reports no task states from a Workflow whose node status Argo
    gzipped (over 1 MiB): an exit task can stay RUNNING in a run that has ended."""
    out = render("p", result("SUCCEEDED", {"train": "SUCCEEDED", "teardown-ray-cluster": "RUNNING"}), 60)
    assert "tasks: train SUCCEEDED, teardown-ray-cluster RUNNING" in out
    assert "(teardown-ray-cluster: as KFP last reported; the run has ended." in out
    running = render("p", result("RUNNING", {"train": "RUNNING"}), 5)
    assert "as KFP last reported" not in running
