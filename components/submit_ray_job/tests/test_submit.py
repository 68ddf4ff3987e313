"""submit_ray_job: input checks, embedded code, code from S3, and idempotent retries."""

from __future__ import annotations

import pytest
import requests

from kfp_ray import jobs
from kfp_ray.errors import InputError

pytestmark = pytest.mark.ray
JOB_CODE = 'import os\nprint("hello from embedded code", os.environ.get("GREETING"))\n'


def test_bad_inputs_fail_before_submitting(ray_cluster):
    before = requests.get(ray_cluster.dashboard_url + "/api/jobs/").json()
    for kwargs, field in (({"entrypoint": "  "}, "entrypoint"), ({"dashboard_url": "ray-head:8265"}, "dashboard_url"),
                          ({"pip": "xgboost"}, "pip"), ({"env_vars": {"BAD-NAME": "1"}}, "env_vars['BAD-NAME']"),
                          ({"working_dir": "no-such-dir"}, "working_dir")):
        args = {"dashboard_url": ray_cluster.dashboard_url, "entrypoint": "python x.py", "run_id": "r", "task": "t", **kwargs}
        with pytest.raises(InputError) as exc:
            jobs.submit(**args)
        assert exc.value.field == field, exc.value
    assert requests.get(ray_cluster.dashboard_url + "/api/jobs/").json() == before


def test_embedded_code_runs_and_a_retry_finds_the_same_job(ray_cluster, sbx, run_local, tmp_path):
    from kfp import compiler

    from kfp_ray.components.submit_ray_job.component import submit_ray_job_with_code

    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text(JOB_CODE)
    yaml_path = tmp_path / "submit_with_code.yaml"
    compiler.Compiler().compile(submit_ray_job_with_code(code), str(yaml_path))
    args = {"dashboard_url": ray_cluster.dashboard_url, "entrypoint": "python job.py", "run_id": "r-embed",
            "task_name": "submit", "working_dir": "code", "env_vars": {"GREETING": "hi"}}
    first, log1 = run_local(str(yaml_path), args)
    assert first["status"] == "SUCCESS", log1
    job_id = first["tasks"]["submit-ray-job"]["parameterValues"]["job_id"]
    second, log2 = run_local(str(yaml_path), args)
    assert second["status"] == "SUCCESS", log2
    assert second["tasks"]["submit-ray-job"]["parameterValues"]["job_id"] == job_id
    assert "found already submitted Ray job" in log2
    listed = [j for j in requests.get(ray_cluster.dashboard_url + "/api/jobs/").json() if j["submission_id"] == job_id]
    assert len(listed) == 1
    result = jobs.follow(ray_cluster.dashboard_url, job_id, timeout=120, echo=lambda line: None)
    assert "hello from embedded code hi" in result.logs
    assert result.logs and jobs.RayJobsClient(ray_cluster.dashboard_url).info(job_id)["runtime_env"]["working_dir"].startswith("gcs://_ray_pkg_")


def test_code_from_s3_with_the_data_connection(ray_cluster, sbx, run_local):
    s3 = sbx.s3()
    s3.put_object(Bucket="kfp-ray", Key="jobs/hello/job.py", Body=JOB_CODE.encode())
    env = sbx.data_connection()
    args = {"dashboard_url": ray_cluster.dashboard_url, "entrypoint": "python job.py", "run_id": "r-s3",
            "task_name": "submit", "working_dir": "s3://kfp-ray/jobs/hello/"}
    result, log = run_local("kfp_ray.components.submit_ray_job.component:submit_ray_job", args, env=env)
    assert result["status"] == "SUCCESS", log
    job_id = result["tasks"]["submit-ray-job"]["parameterValues"]["job_id"]
    done = jobs.follow(ray_cluster.dashboard_url, job_id, timeout=120, echo=lambda line: None)
    assert "hello from embedded code" in done.logs
    assert env["AWS_SECRET_ACCESS_KEY"] not in log
