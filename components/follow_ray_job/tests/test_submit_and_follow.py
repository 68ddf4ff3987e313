"""follow_ray_job given an entrypoint: it submits the job, then follows it, in one task (what the
training pipelines run). Its inputs are checked before anything is sent; a retry adopts the job
its first attempt submitted; a failed submission leaves the cluster, its lease handed on."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import requests
from kubernetes import client as k8s

from kfp_ray import jobs, lease, tasks
from kfp_ray.errors import InputError, KfpRayError
from tests.helpers import raycluster

JOB_CODE = 'import json, os\nprint("hello from embedded code", os.environ.get("GREETING"))\n' \
           'print("KFP_RAY_METRICS", json.dumps({"accuracy": 0.5}))\n'


@pytest.mark.parametrize("job_id,submission,field", [
    ("raysubmit_1", {"entrypoint": "python x.py", "run_id": "r", "task": "t"}, "job_id"),  # both
    ("", None, "job_id"),  # neither
    ("", {"entrypoint": " ", "run_id": "r", "task": "t"}, "entrypoint"),
    ("", {"entrypoint": "python x.py", "run_id": "", "task": "t"}, "run_id"),
    ("", {"entrypoint": "python x.py", "run_id": "r", "task": "t", "pip": "xgboost"}, "pip"),
])
def test_bad_inputs_fail_naming_the_field_before_any_request(job_id, submission, field, dashboard, tmp_path):
    with pytest.raises(InputError) as exc:
        tasks.follow(dashboard.url, job_id, str(tmp_path / "job.log"), submission=submission)
    assert field in str(exc.value) and "Fix" in str(exc.value), exc.value
    assert dashboard.requests == []


def test_a_failed_submission_leaves_the_cluster_and_hands_its_lease_on(sbx, as_pipeline_runner, dashboard, tmp_path,
                                                                       capsys):
    sbx.set_faults({"clusters": {"fl-submit": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                       raycluster("fl-submit", workers=0, cpu="100m", memory="256Mi"))
    dashboard.answer = (400, "text/plain", "Traceback ...\nValueError: runtime_env is invalid")
    with pytest.raises(KfpRayError, match="Ray rejected the job: ValueError: runtime_env is invalid"):
        tasks.follow(dashboard.url, "", str(tmp_path / "job.log"), cluster_name="fl-submit", namespace="sandbox",
                     timeout=60, submission={"entrypoint": "python x.py", "run_id": "r", "task": "follow-ray-job"})
    rc = co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "fl-submit")
    assert "deletionTimestamp" not in rc["metadata"]  # for a retry of the task, else the exit handler's teardown
    expires = lease.parse(rc["metadata"]["annotations"][lease.ANNOTATION])
    assert (expires - datetime.now(UTC)).total_seconds() > lease.HANDOFF_S - 120  # handed on, not one lease
    assert [m for _, m, p in dashboard.requests if p.startswith("/api/jobs")] == ["POST"]  # a 400 is not re-sent
    out = capsys.readouterr().out
    assert "leaving RayCluster fl-submit: the job's submission failed" in out and "handed on" in out


@pytest.mark.ray
def test_embedded_code_is_submitted_followed_and_a_retry_adopts_the_job(ray_cluster, run_local, tmp_path):
    from kfp import compiler

    from kfp_ray.components.follow_ray_job.component import follow_ray_job_with_code

    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text(JOB_CODE)
    yaml_path = tmp_path / "follow_with_code.yaml"
    compiler.Compiler().compile(follow_ray_job_with_code(code), str(yaml_path))
    args = {"dashboard_url": ray_cluster.dashboard_url, "entrypoint": "python job.py", "run_id": "r-follow-embed",
            "task_name": "follow", "working_dir": "code", "env_vars": {"GREETING": "hi"}, "delete_cluster": False}
    first, log1 = run_local(str(yaml_path), args)
    assert first["status"] == "SUCCESS", log1
    job_id = jobs.submission_id("r-follow-embed", "follow")
    assert f"submitted Ray job {job_id}: python job.py" in log1 and "hello from embedded code hi" in log1
    out = first["tasks"]["follow-ray-job"]
    assert out["parameterValues"]["status"] == "SUCCEEDED"
    assert out["artifacts"]["metrics"]["artifacts"][0]["metadata"]["accuracy"] == 0.5
    assert out["artifacts"]["job_log"]["artifacts"][0]["metadata"]["job_id"] == job_id
    # a retry of the task (same run, same task): the same job, followed again, not a second one
    second, log2 = run_local(str(yaml_path), args)
    assert second["status"] == "SUCCESS", log2
    assert f"found already submitted Ray job {job_id}" in log2 and "hello from embedded code hi" in log2
    listed = [j for j in requests.get(ray_cluster.dashboard_url + "/api/jobs/", timeout=10).json()
              if j["submission_id"] == job_id]
    assert len(listed) == 1
