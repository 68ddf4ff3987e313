"""follow_ray_job: success with metrics and log artifact, failure, timeout, and SIGTERM."""

from __future__ import annotations

import io
import os
import signal
import threading
from pathlib import Path

import pytest

from kfp_ray import jobs
from tests.helpers import eventually

pytestmark = pytest.mark.ray
COMPONENT = "kfp_ray.components.follow_ray_job.component:follow_ray_job"


def submit(cluster, entrypoint, name):
    return jobs.submit(cluster.dashboard_url, entrypoint, run_id=f"follow-{os.getpid()}", task=name)


def args(cluster, job_id, **kw):
    return {"dashboard_url": cluster.dashboard_url, "job_id": job_id, "delete_cluster": False, **kw}


def test_success_streams_logs_and_reports_metrics(ray_cluster, run_local):
    job = submit(ray_cluster, """python -c 'import json
for e in range(3): print("epoch", e, flush=True)
print("KFP_RAY_METRICS", json.dumps({"accuracy": 0.91, "loss": 0.2}))'""", "ok")
    result, log = run_local(COMPONENT, args(ray_cluster, job))
    assert result["status"] == "SUCCESS", log
    assert "epoch 2" in log and f"job {job}: SUCCEEDED" in log
    out = result["tasks"]["follow-ray-job"]
    assert out["parameterValues"]["status"] == "SUCCEEDED" and out["parameterValues"]["duration_seconds"] > 0
    metrics = out["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["accuracy"] == 0.91 and metrics["loss"] == 0.2 and "job_duration_seconds" in metrics
    log_uri = out["artifacts"]["job_log"]["artifacts"][0]["uri"]
    assert "epoch 0" in Path(log_uri).read_text()


def test_failed_job_fails_the_task_with_its_error_and_log_tail(ray_cluster, run_local):
    job = submit(ray_cluster, "python -c 'import sys; print(\"boom-line\"); sys.exit(3)'", "fails")
    result, log = run_local(COMPONENT, args(ray_cluster, job))
    assert result["status"] == "FAILURE"
    assert f"JobFailed: Ray job {job} FAILED" in log
    assert "--- last log lines ---" in log and "boom-line" in log


def test_timeout_stops_the_job(ray_cluster, run_local):
    job = submit(ray_cluster, "python -c 'import time; time.sleep(300)'", "slow")
    result, log = run_local(COMPONENT, args(ray_cluster, job, timeout=3))
    assert result["status"] == "FAILURE" and "did not finish within 3s and was stopped" in log
    assert jobs.RayJobsClient(ray_cluster.dashboard_url).info(job)["status"] == "STOPPED"


def _task_process(runner_pid: int) -> int | None:
    from kfp_ray_sandbox.raynode import descendants

    for pid in descendants(runner_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"kfp.dsl.executor_main" in cmd and not cmd.startswith(b"sh"):
            return pid
    return None


def test_sigterm_stops_the_job_before_the_task_exits(ray_cluster, run_local):
    """A cancelled run: KFP sends SIGTERM to the task's container."""
    job = submit(ray_cluster, "python -c 'import time; print(\"running\", flush=True); time.sleep(300)'", "cancelled")
    started = {}
    done = {}
    output = io.StringIO()
    t = threading.Thread(target=lambda: done.update(zip(("result", "log"), run_local(
        COMPONENT, args(ray_cluster, job), output=output, on_start=lambda p: started.update(pid=p.pid)), strict=True)))
    t.start()
    eventually(lambda: jobs.RayJobsClient(ray_cluster.dashboard_url).info(job)["status"] == "RUNNING", 60, what="the job to run")
    task = eventually(lambda: "pid" in started and _task_process(started["pid"]), 60, what="the follow task's process")
    # The task logs the job's status from inside its SIGTERM handling, in its poll loop.
    eventually(lambda: f"job {job}: RUNNING" in output.getvalue(), 60, what="the task to follow the running job")
    os.kill(task, signal.SIGTERM)
    t.join(timeout=120)
    assert done["result"]["status"] == "FAILURE"
    assert "the task was cancelled: stopping Ray job" in done["log"]
    assert jobs.RayJobsClient(ray_cluster.dashboard_url).info(job)["status"] == "STOPPED"


def test_a_large_log_is_streamed_from_ray_once_never_fetched_whole(ray_cluster, tmp_path, monkeypatch):
    """Against Ray 2.52.1's own /logs/tail (issue 25 item 7): ~20 MB of log reaches follow's file
    whole, each line once and in order, without the whole-log endpoint."""
    def whole_log(*args, **kwargs):
        raise AssertionError("follow fetched the whole log")

    monkeypatch.setattr(jobs.RayJobsClient, "logs", whole_log)
    job = submit(ray_cluster, "python -c 'import sys\nfor i in range(10000): sys.stdout.write(f\"{i:08d} \" + \"y\" * 2000 + \"\\n\")'",
                 "large")
    echoed = []
    result = jobs.follow(ray_cluster.dashboard_url, job, timeout=300, echo=lambda text: echoed.append(len(text) + 1),
                         log_path=str(tmp_path / "job.log"))
    assert result.status == "SUCCEEDED"
    numbers = [int(line[:8]) for line in (tmp_path / "job.log").read_text().splitlines()
               if line[:8].isdigit() and line[8:] == " " + "y" * 2000]
    assert numbers == list(range(10000))
    assert sum(echoed) == len((tmp_path / "job.log").read_text())  # each line echoed once, as written
    assert len(result.logs) <= jobs.TAIL_CHARS
