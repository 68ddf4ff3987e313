"""The four components chained in an ExitHandler, run with kfp.local against the sandbox
as RHOAI's pipeline-runner: green, and never a leaked cluster, quota or secret. (Red runs, and
their teardown, are the fault matrix's: tests/reliability, rows job_exits_nonzero onwards.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from tests.helpers import eventually

pytestmark = pytest.mark.ray
PIPELINE = "tests.components.pipelines_under_test:ray_job"
METRICS_JOB = ("python -c \"import os, json, ray; ray.init(); "
               "print('endpoint', os.environ['AWS_S3_ENDPOINT'], 'key set', bool(os.environ.get('AWS_SECRET_ACCESS_KEY'))); "
               "print('KFP_RAY_METRICS', json.dumps({'accuracy': 0.9}))\"")


def assert_nothing_left(sbx):
    co = k8s.CustomObjectsApi(sbx.api_client())
    assert co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"] == []
    eventually(lambda: not [p for p in sbx.processes() if p["cluster"]], 60, what="every Ray process to stop")  # Ray pods'
    assert set(sbx.summary()["queue_usage"].values()) == {"0"}


def test_pipeline_runs_green_and_leaves_nothing(box, sbx, run_local, tmp_path):
    result, log = run_local(PIPELINE, {"entrypoint": METRICS_JOB, "data_connection": "aws-connection-minio",
                                       "num_workers": 0})  # the job runs on the head: a Ray node less
    assert result["status"] == "SUCCESS", log
    tasks = result["tasks"]
    assert set(tasks) == {"provision-ray-cluster", "submit-ray-job", "follow-ray-job", "teardown-ray-cluster"}
    assert tasks["follow-ray-job"]["parameterValues"]["status"] == "SUCCEEDED"
    assert tasks["follow-ray-job"]["artifacts"]["metrics"]["artifacts"][0]["metadata"]["accuracy"] == 0.9
    # the data connection reached the Ray pods (envFrom) and so the job
    assert f"endpoint {box.info['s3_endpoint']} key set True" in log
    assert_nothing_left(sbx)

    # No token or S3 key in anything the run wrote: task logs, outputs, artifacts.
    dc = sbx.data_connection()
    tokens = [yaml.safe_load(Path(box.info[k]).read_text())["users"][0]["user"]["token"]
              for k in ("kubeconfig", "kubeconfig_pipeline_runner")]
    secrets = [dc["AWS_ACCESS_KEY_ID"], dc["AWS_SECRET_ACCESS_KEY"], *tokens]
    written = log + "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    leaked = [s[:4] + "..." for s in secrets if s in written]
    assert leaked == []

