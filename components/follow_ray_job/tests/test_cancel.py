"""A cancelled follow (real SIGTERM to a real task process, as pipeline-runner against the
session sandbox): the job's stop and the cluster's deletion are both sent after the signal,
neither waiting for the other (the deletion goes out while the stop hangs), the task exits by
itself (its cleanup is bounded by its own grace period), and no RayCluster is left. With a
dashboard the test controls (it records the stop; it can hang), and with a real Ray job on a
real cluster (ray-marked). No wall-clock figure is asserted, only the order of events: a busy
machine makes a correct task slower, never wrong (the seconds are printed)."""

from __future__ import annotations

import json
import os

import pytest
from kubernetes import client as k8s

from kfp_ray import jobs, tasks
from kfp_ray.components.follow_ray_job.tests.dashboard import Dashboard
from tests.helpers import eventually, raycluster
from tests.task_process import TaskProcess

HANG_S = 120.0  # a bound on a hang: the task's own cleanup ends within its 30 s grace period
RUNNER = "system:serviceaccount:sandbox:pipeline-runner-dspa"
ROUNDING = 0.001  # the audit's times are rounded to the millisecond


def follow_code(dashboard_url: str, job_id: str, cluster: str, log_path: str) -> str:
    args = dict(dashboard_url=dashboard_url, job_id=job_id, log_path=log_path, cluster_name=cluster,
                namespace="sandbox", max_poll_seconds=0.5)
    return f"from kfp_ray import tasks\ntasks.follow(**{json.dumps(args)})\n"


def deletes(sbx, name: str) -> list[float]:
    """When each DELETE of the RayCluster by pipeline-runner reached the apiserver."""
    return [e["ts"] - e["ms"] / 1000.0 for e in sbx.audit() if e["method"] == "DELETE" and e["user"] == RUNNER
            and e["path"].endswith(f"/rayclusters/{name}")]


def names(sbx) -> list[str]:
    co = k8s.CustomObjectsApi(sbx.api_client())
    return [rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]]


def cancel(task: TaskProcess, ready_sign: str) -> tuple[float, float, str]:
    """SIGTERM once the task says ready_sign; (signal time, seconds to exit, output)."""
    try:
        eventually(lambda: task.saw(ready_sign) or task.proc.poll() is not None, 120, what=f"{ready_sign!r} in the task log")
        assert task.proc.poll() is None, task.output
        signalled = task.sigterm()
        rc = task.wait(timeout=HANG_S)
    finally:
        task.kill()
    out = task.output
    assert rc != 0 and "Cancelled" in out, out
    return signalled, task.exited_at - signalled, out


@pytest.mark.parametrize("dashboard_state", ["answering", "hung"])
def test_cancel_sends_stop_and_delete_at_once(box, sbx, tmp_path, dashboard_state):
    """Hung: the stop request cannot be answered; the deletion does not wait for it."""
    name = f"fc-{dashboard_state}"
    sbx.set_faults({"clusters": {"fc-*": {"never_admit": True}}, "platform": {"finalizer_delay_s": 0.5}})
    k8s.CustomObjectsApi(sbx.api_client()).create_namespaced_custom_object(
        "ray.io", "v1", "sandbox", "rayclusters", raycluster(name, workers=0, cpu="100m", memory="256Mi"))
    dash = Dashboard()
    dash.job("j", "RUNNING", "step 1\n")
    try:
        task = TaskProcess(box, follow_code(dash.url, "j", name, str(tmp_path / "job.log")))
        # the job's log line echoed: follow has read it (the log streams in after the status)
        if dashboard_state == "hung":
            eventually(lambda: task.saw("step 1"), 120, what="the task to follow the job and echo its log")
            dash.hang()
        signalled, took, out = cancel(task, "step 1")
        stops = dash.seen("POST", "/j/stop")
    finally:
        dash.close()
    assert "the task was cancelled: stopping Ray job j and deleting RayCluster" in out, out
    sent = deletes(sbx, name)
    assert sent and sent[0] > signalled - ROUNDING, (sent, signalled, out)
    if dashboard_state == "answering":
        assert stops and stops[0] > signalled, (stops, signalled)
        assert "stop of Ray job j answered True" in out
    else:  # the stop went out but could not be answered: the deletion did not wait for it
        assert "stop of Ray job j requested (" in out, out
        answered = task.saw("stop of Ray job j answered")  # at the stop's own deadline, if at all
        assert answered is None or sent[0] < answered, (sent, answered, out)
    eventually(lambda: name not in names(sbx), HANG_S, what=f"RayCluster {name} to be gone")
    assert "step 1" in (tmp_path / "job.log").read_text()  # the log read so far is kept
    print(f"{dashboard_state}: delete sent {sent[0] - signalled:+.2f}s after SIGTERM, exited after {took:.1f}s")


@pytest.mark.ray
def test_cancel_a_running_ray_job_stops_it_and_deletes_its_cluster(box, sbx, as_admin, tmp_path):
    name = "fc-ray"
    sbx.set_faults({"platform": {"finalizer_delay_s": 0.5, "termination_grace_s": 5}})
    p = tasks.provision(run_id=f"fc-{os.getpid()}", cluster_name=name, namespace="sandbox", local_queue="local-queue-test",
                        num_workers=0, head_cpu="1", head_memory="2Gi", startup_timeout=120)
    job = jobs.submit(p.dashboard_url, "python -c 'import time; print(\"training\", flush=True); time.sleep(600)'",
                      run_id=f"fc-{os.getpid()}", task="cancelled")
    task = TaskProcess(box, follow_code(p.dashboard_url, job, name, str(tmp_path / "job.log")))
    signalled, took, out = cancel(task, f"job {job}: RUNNING")
    assert f"the task was cancelled: stopping Ray job {job} and deleting RayCluster {name} now" in out, out
    sent = deletes(sbx, name)
    assert sent and sent[0] > signalled - ROUNDING, (sent, signalled, out)
    # The stop is sent too (the dashboard is the real Ray one: the task's own line says so).
    stop_line = next(line for line in out.splitlines() if f"stop of Ray job {job} requested" in line)
    eventually(lambda: name not in names(sbx), HANG_S, what=f"RayCluster {name} to be gone")
    eventually(lambda: not [q for q in sbx.processes() if q["cluster"] == name], HANG_S, what="the cluster's Ray processes to end")
    print(f"ray: delete sent {sent[0] - signalled:+.2f}s, {stop_line.split('] ', 1)[1]}, exited after {took:.1f}s")
