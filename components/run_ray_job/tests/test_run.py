"""run_ray_job: the RayJob path's runtime against the session sandbox (KubeRay's RayJob
controller, Kueue's RayJob integration, real Ray), as RHOAI's pipeline-runner: bad inputs
fail before anything exists; a job runs with embedded code (K8sJobMode) or none (HTTPMode)
and its log and metrics come back; a retried task adopts its RayJob. A failing job, KubeRay's
deadline, a SIGTERM, a kill -9, an image pull failure and a head crash are the fault matrix's
rayjob rows (tests/reliability/test_fault_matrix.py)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.errors import InputError, JobFailed
from tests.helpers import cpu_in_use, eventually
from tests.task_process import TaskProcess

SMALL = dict(num_workers=0, head_cpu="500m", head_memory="1Gi", local_queue="local-queue-test")
TASK = dict(task_name="run-ray-job", task_id="3")
RUNNER = "system:serviceaccount:sandbox:pipeline-runner-dspa"
JOB = """print("hello from the job", flush=True)
print('KFP_RAY_METRICS {"accuracy": 0.93}', flush=True)
"""

def objects(sbx, plural: str) -> dict:
    co = k8s.CustomObjectsApi(sbx.api_client())
    return {o["metadata"]["name"]: o for o in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", plural)["items"]}


def nothing_left(sbx) -> bool:
    return not objects(sbx, "rayjobs") and not objects(sbx, "rayclusters") and \
        cpu_in_use(k8s.CustomObjectsApi(sbx.api_client())) == 0


def creates(sbx) -> list:
    return [e for e in sbx.audit() if e["method"] == "POST" and e["path"].endswith("/rayjobs")]


@pytest.fixture
def code(tmp_path):
    """A component's embedded code root with the job as code/job.py."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text(JOB)
    return str(tmp_path)


@pytest.mark.parametrize("inputs,field", [
    ({"job_name": "Not_Valid"}, "job_name"),
    ({"submission_mode": "Interactive"}, "submission_mode"),
    ({"submission_mode": "HTTPMode", "working_dir": "code"}, "working_dir"),
    ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
    ({"entrypoint": " "}, "entrypoint"),
    ({"head_cpu": "0"}, "head_cpu"),
    ({"job_timeout": 0}, "job_timeout"),
    ({"working_dir": "no-such-dir"}, "working_dir"),
    ({"task_id": ""}, "task_id"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_inputs_fail_before_anything_is_created(box, sbx, as_pipeline_runner, code, inputs, field):
    before = len(creates(sbx))
    with pytest.raises(InputError) as exc:
        tasks.run_job(**{"run_id": "bad-inputs", "entrypoint": "python job.py", "embedded_root": code, **SMALL,
                         **TASK, **inputs})
    assert exc.value.field == field and "Fix:" in str(exc.value)
    assert len(creates(sbx)) == before and objects(sbx, "rayjobs") == {}


@pytest.mark.ray
def test_a_job_with_embedded_code_runs_and_leaves_nothing(box, sbx, as_pipeline_runner, code, tmp_path, capsys):
    log_path = tmp_path / "job.log"
    ran = tasks.run_job(run_id="rj-ok", entrypoint="python job.py", working_dir="code", embedded_root=code,
                        log_path=str(log_path), env_vars={"GREETING": "hi"}, **SMALL, **TASK)
    out = capsys.readouterr().out
    result = ran.result
    assert result.status == "SUCCEEDED" and result.metrics == {"accuracy": 0.93}, (result, out)
    assert "hello from the job" in log_path.read_text() and "hello from the job" in out
    assert ran.cluster_name.startswith(ran.rayjob + "-") and ran.queued_seconds >= 0 and ran.starting_seconds > 0
    assert "admitted by Kueue" in out and "uploaded working_dir of the job" in out, out
    assert result.teardown_seconds > 0 and nothing_left(sbx)


@pytest.mark.ray
def test_http_mode_runs_a_job_without_code(box, sbx, as_pipeline_runner):
    ran = tasks.run_job(run_id="rj-http", entrypoint="python -c 'import sys; print(\"via http\")'",
                        submission_mode="HTTPMode", **SMALL, **TASK)
    assert ran.result.status == "SUCCEEDED" and "via http" in ran.result.logs
    assert nothing_left(sbx)


@pytest.mark.ray
def test_a_retried_task_adopts_its_rayjob_and_follows_the_same_job(box, sbx, as_pipeline_runner, code, capsys):
    """The first attempt is SIGKILLed while its job runs (no cleanup at all); the retry, with the
    same inputs, finds its RayJob, follows the job that is already running to its end."""
    args = dict(run_id="rj-retry", entrypoint="python job.py", working_dir="code", embedded_root=code, **SMALL, **TASK)
    first = TaskProcess(box, f"from kfp_ray import tasks\ntasks.run_job(**{json.dumps(args)})\n")
    try:
        eventually(lambda: first.saw("waiting for KubeRay's submitter") or first.proc.poll() is not None, 120,
                   what="the first attempt to see its cluster ready")
        assert first.proc.poll() is None, first.output
    finally:
        first.kill()
    [rayjob] = objects(sbx, "rayjobs")
    before = len(creates(sbx))
    ran = tasks.run_job(**args)
    out = capsys.readouterr().out
    assert f"RayJob {rayjob} already exists for this run (a retried task): adopting it" in out, out
    assert ran.rayjob == rayjob and ran.result.status == "SUCCEEDED" and "hello from the job" in ran.result.logs
    assert len(creates(sbx)) == before  # no second RayJob
    assert nothing_left(sbx)


@pytest.mark.ray
@pytest.mark.parametrize("job,outcome", [("print('done', flush=True)\n", "SUCCEEDED"),
                                         ("print('boom', flush=True)\nraise SystemExit(3)\n", "FAILED")],
                         ids=["succeeded", "app-failed"])
def test_a_retry_adopting_a_finished_rayjob_reports_the_jobs_outcome(box, sbx, as_pipeline_runner, tmp_path, capsys,
                                                                    job, outcome):
    """The first attempt is SIGKILLed once it uploaded the code; KubeRay runs the job to its end and
    deletes the cluster (ttl 0). The retry adopts the finished RayJob and reports the job's real
    outcome from KubeRay (no upload to the deleted cluster), then deletes the RayJob."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text(job)
    args = dict(run_id=f"rj-done-{outcome.lower()}", entrypoint="python job.py", working_dir="code",
                embedded_root=str(tmp_path), **SMALL, **TASK)
    first = TaskProcess(box, f"from kfp_ray import tasks\ntasks.run_job(**{json.dumps(args)})\n")
    try:
        eventually(lambda: first.saw("uploaded working_dir of the job") or first.proc.poll() is not None, 120,
                   what="the first attempt to upload the job's code")
        assert first.proc.poll() is None, first.output
    finally:
        first.kill()
    [rayjob] = objects(sbx, "rayjobs")
    done = eventually(lambda: (o := objects(sbx, "rayjobs")[rayjob]["status"]).get("jobDeploymentStatus") in
                      ("Complete", "Failed") and not objects(sbx, "rayclusters") and o, 120,
                      what="KubeRay to end the job and delete its cluster")
    if outcome == "SUCCEEDED":
        ran = tasks.run_job(**args)
        assert ran.result.status == "SUCCEEDED" and "done" in ran.result.logs, ran.result
    else:
        with pytest.raises(JobFailed) as exc:
            tasks.run_job(**args)
        assert done["reason"] == "AppFailed" and f"FAILED: {done['message']}" in str(exc.value), (done, exc.value)
        assert "boom" in str(exc.value)
    out = capsys.readouterr().out
    assert "adopting it" in out and "already ended" in out and "uploaded working_dir" not in out, out
    assert nothing_left(sbx)
