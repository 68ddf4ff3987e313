"""follow_ray_job rides out a Kueue preemption of its RayCluster (issue 29, lifecycle raycluster):
a higher-priority RayCluster takes the quota (ClusterQueue withinClusterQueue: LowerPriority),
Kueue suspends the job's cluster and KubeRay deletes its pods; when the quota frees Kueue admits
it again, KubeRay starts new pods, and the task submits the job again on the new head and
follows it to its end. Past max_preemptions the run fails naming the preemption and leaves
nothing. Against the session sandbox with real Ray. The job waits for a file the test writes
once the preemption has happened, so no step depends on timing."""

from __future__ import annotations

import threading

import pytest

from kfp_ray import tasks
from kfp_ray.components.run_ray_job.tests.test_run import nothing_left
from kfp_ray.errors import Preempted
from tests.helpers import eventually, in_thread, labelled, preempting_sandbox, ray_object, raycluster

RAY = ("ray.io", "v1", "sandbox")
JOB = """import os, time
print("job started", flush=True)
print("KFP_RAY_CHECKPOINT s3://kfp-ray/run/checkpoints/epoch-1", flush=True)
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.2)
print('KFP_RAY_METRICS {"accuracy": 0.9}', flush=True)
"""


@pytest.fixture
def preempting(sbx):
    """fl-low and fl-high, the queue preempting by priority (tests/helpers); sbx then deletes what
    the test left."""
    with preempting_sandbox(sbx, "fl") as co:
        yield co


def start(tmp_path, name: str, max_preemptions: int) -> tuple[threading.Thread, dict]:
    """provision then follow (submitting the job) in a thread, as the pipeline's two tasks."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text(JOB)

    def task():
        p = tasks.provision(run_id=f"run-{name}", cluster_name=name, namespace="sandbox", local_queue="local-queue-test",
                            priority_class="fl-low", num_workers=0, head_cpu="500m", head_memory="1Gi",
                            startup_timeout=240)
        return tasks.follow(
            p.dashboard_url, "", str(tmp_path / "job.log"), cluster_name=name, namespace="sandbox", timeout=600,
            max_preemptions=max_preemptions, admission_timeout=240, startup_timeout=240,
            submission={"entrypoint": "python job.py", "run_id": f"run-{name}", "task": "follow-ray-job",
                        "working_dir": "code", "embedded_root": str(tmp_path), "env_vars": {"GO": str(tmp_path / "go")}})

    return in_thread(f"task-{name}", task)


def get(co, name: str) -> dict:
    return ray_object(co, "rayclusters", name)


def preempt(co, log) -> None:
    """Once the job runs, a higher-priority RayCluster that needs its quota takes it."""
    eventually(lambda: log.exists() and "job started" in log.read_text(), 240, what="the job to run")
    co.create_namespaced_custom_object(*RAY, "rayclusters",
                                       labelled(raycluster("fl-high", workers=0, cpu="9", memory="2Gi"), "fl-high"))


@pytest.mark.ray
def test_a_preempted_cluster_runs_the_job_again_once_readmitted(box, sbx, as_admin, preempting, tmp_path, capsys):
    co = preempting
    t, out = start(tmp_path, "fl-preempted", max_preemptions=1)
    preempt(co, tmp_path / "job.log")
    eventually(lambda: (get(co, "fl-preempted").get("status") or {}).get("state") == "suspended", 120,
               what="KubeRay to stop the preempted cluster's pods")
    (tmp_path / "go").write_text("")  # the job's next run ends at once
    co.delete_namespaced_custom_object(*RAY, "rayclusters", "fl-high")
    t.join(300)
    assert not t.is_alive() and "error" not in out, out
    result, said = out["result"], capsys.readouterr().out
    assert result.status == "SUCCEEDED" and result.metrics == {"accuracy": 0.9}
    assert result.preemptions == 1 and result.preempted_seconds > 0
    assert "Kueue suspended RayCluster 'fl-preempted' while its job ran: Preempted: Preempted to accommodate a " \
           "workload" in said, [line for line in said.splitlines() if "suspended" in line]
    assert "Preemption 1 of at most 1 ridden out" in said and "is ready again" in said, said
    log = (tmp_path / "job.log").read_text()
    assert log.count("job started") == 2
    assert "--- kfp-ray: preempted (1); the job is submitted again on the cluster's new pods ---" in log
    eventually(lambda: nothing_left(sbx), 60, what="no RayCluster or quota left")


@pytest.mark.ray
def test_past_max_preemptions_follow_fails_naming_them_and_leaves_nothing(box, sbx, as_pipeline_runner, preempting,
                                                                          tmp_path):
    co = preempting
    t, out = start(tmp_path, "fl-given-up", max_preemptions=0)
    preempt(co, tmp_path / "job.log")
    t.join(120)
    assert not t.is_alive() and isinstance(out.get("error"), Preempted), out
    msg = str(out["error"])
    assert "Kueue suspended RayCluster 'fl-given-up' while its job ran" in msg
    assert "Preempted 1 time, more than max_preemptions=0, so the run is given up" in msg
    assert not get(co, "fl-given-up")  # deleted by follow, its quota freed for the preemptor
    co.delete_namespaced_custom_object(*RAY, "rayclusters", "fl-high")
    eventually(lambda: nothing_left(sbx), 60, what="no RayCluster or quota left")
