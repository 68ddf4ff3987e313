"""run_ray_job rides out a Kueue preemption (issue 29): a higher-priority RayCluster takes the
running RayJob's quota (ClusterQueue withinClusterQueue: LowerPriority), KubeRay deletes the
job's cluster, and when the quota frees Kueue admits the RayJob again and KubeRay runs the job
on a new cluster, which the task follows to its end; past max_preemptions the run fails naming
the preemptions and leaves nothing. Against the session sandbox with real Ray. The job waits
for a file the test writes once the preemption has happened, so no step depends on timing."""

from __future__ import annotations

import threading

import pytest

from kfp_ray import tasks
from kfp_ray.errors import Preempted
from tests.helpers import eventually, in_thread, labelled, preempting_sandbox, ray_object, raycluster

from .test_run import SMALL, TASK, nothing_left

RAY = ("ray.io", "v1", "sandbox")
JOB = """import os, time
print("job started", flush=True)
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.2)
print('KFP_RAY_METRICS {"accuracy": 0.9}', flush=True)
"""


@pytest.fixture
def preempting(sbx):
    """rj-low and rj-high, the queue preempting by priority (tests/helpers); sbx then deletes what
    the test left."""
    with preempting_sandbox(sbx, "rj") as co:
        yield co


@pytest.fixture
def code(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text(JOB)
    return str(tmp_path)


def start(code, tmp_path, name: str, max_preemptions: int) -> tuple[threading.Thread, dict]:
    """run_job in a thread (the task): its Ran under "result", or its error."""
    return in_thread(f"task-{name}", lambda: tasks.run_job(
        run_id=f"rj-{name}", job_name=name, entrypoint="python job.py", working_dir="code", embedded_root=code,
        log_path=str(tmp_path / "job.log"), priority_class="rj-low", env_vars={"GO": str(tmp_path / "go")},
        max_preemptions=max_preemptions, admission_timeout=240, job_timeout=600, **SMALL, **TASK))


def status(co, name: str) -> dict:
    """The RayJob's status; {} until the task has created it."""
    return ray_object(co, "rayjobs", name).get("status") or {}


def preempt(co, name: str, log) -> str:
    """Once the task has the job's first line, a higher-priority RayCluster that needs its quota
    (9 CPUs: the job's head and submitter take 1) takes it; returns the preempted cluster's name."""
    eventually(lambda: log.exists() and "job started" in log.read_text(), 240, what=f"{name}'s job to run")
    running = status(co, name)
    co.create_namespaced_custom_object(*RAY, "rayclusters",
                                       labelled(raycluster("rj-high", workers=0, cpu="8500m", memory="2Gi"), "rj-high"))
    return running["rayClusterName"]


@pytest.mark.ray
def test_a_preempted_rayjob_runs_again_on_a_new_cluster_and_succeeds(box, sbx, as_admin, preempting, code,
                                                                      tmp_path, capsys):
    co = preempting
    t, out = start(code, tmp_path, "rj-preempted", max_preemptions=1)
    first = preempt(co, "rj-preempted", tmp_path / "job.log")
    eventually(lambda: status(co, "rj-preempted").get("jobDeploymentStatus") == "Suspended", 120,
               what="KubeRay to suspend the preempted RayJob")
    (tmp_path / "go").write_text("")  # the job's next run ends at once
    co.delete_namespaced_custom_object(*RAY, "rayclusters", "rj-high")
    t.join(300)
    assert not t.is_alive() and "error" not in out, out
    ran, said = out["result"], capsys.readouterr().out
    assert ran.result.status == "SUCCEEDED" and ran.result.metrics == {"accuracy": 0.9}
    assert ran.preemptions == 1 and ran.preempted_seconds > 0 and ran.cluster_name != first
    # Kueue's own words (this identity may read the Workload), and the budget
    assert "Kueue suspended RayJob 'rj-preempted' while its job ran: Preempted: Preempted to accommodate a workload" in said, \
        [line for line in said.splitlines() if "suspended" in line]
    assert "Preemption 1 of at most 1 ridden out" in said, said
    log = (tmp_path / "job.log").read_text()
    assert log.count("job started") == 2 and "--- kfp-ray: preempted (1); the job runs again on a new cluster ---" in log
    eventually(lambda: nothing_left(sbx), 60, what="no RayJob, RayCluster or quota left")


@pytest.mark.ray
def test_past_max_preemptions_the_run_fails_naming_them_and_leaves_nothing(box, sbx, as_pipeline_runner,
                                                                          preempting, code, tmp_path):
    co = preempting
    t, out = start(code, tmp_path, "rj-given-up", max_preemptions=0)
    preempt(co, "rj-given-up", tmp_path / "job.log")
    t.join(120)
    assert not t.is_alive() and isinstance(out.get("error"), Preempted), out
    msg = str(out["error"])
    assert "Kueue suspended RayJob 'rj-given-up' while its job ran (preempted, or its queue stopped" in msg
    assert "Preempted 1 time, more than max_preemptions=0, so the run is given up. Fix: raise max_preemptions or priority_class" in msg
    co.delete_namespaced_custom_object(*RAY, "rayclusters", "rj-high")
    eventually(lambda: nothing_left(sbx), 60, what="no RayJob, RayCluster or quota left")
