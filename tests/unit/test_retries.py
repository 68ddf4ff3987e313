"""Task retries (issue 25 item 9, pipelines/common.py RETRY): the compiled pipelines retry
exactly the tasks whose rerun takes up where a failed attempt left off (follow, which submits too, the
exit handler's teardown), and a retried follow whose job already ended says so at once."""

from __future__ import annotations

import re

import pytest
import yaml

from kfp_ray import tasks
from kfp_ray.errors import JobLost
from kfp_ray.pipelines import common, registry
from kfp_ray.pipelines import compile as compiling

RETRIED = {"follow-ray-job", "teardown-ray-cluster"}  # follow submits the job too
POLICY = {"maxRetryCount": 2, "backoffDuration": "30s", "backoffFactor": 2.0, "backoffMaxDuration": "604800s"}


def compiled_tasks(name: str, tmp_path) -> dict[str, dict | None]:
    """Every container task of a shipped pipeline, compiled here as `kfp-ray compile` does: its
    name (KFP's, without the -2, -3 of a second branch) -> its retryPolicy."""
    path = tmp_path / f"{name}.yaml"
    compiling.compile_one(registry.load(name), path)
    spec = next(yaml.safe_load_all(path.read_text()))
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    out = {}
    for dag in dags:
        for task_name, task in (dag.get("tasks") or {}).items():
            if "dag" in spec["components"][task["componentRef"]["name"]]:
                continue  # a sub-DAG (exit handler, condition): not a pod
            out[task_name] = task.get("retryPolicy")
    return out


@pytest.mark.parametrize("name", sorted(registry.PIPELINES))
def test_the_compiled_pipelines_retry_the_tasks_that_adopt_and_no_other(name, tmp_path):
    got = compiled_tasks(name, tmp_path)
    assert got, name
    for task_name, policy in got.items():
        kind = re.sub(r"-\d+$", "", task_name)
        if kind in RETRIED:
            assert policy == POLICY, (name, task_name, policy)
        else:
            assert policy is None, f"{name}: {task_name} is retried ({policy}), but its rerun would not adopt"
    if name in ("ray_training", "fashion_mnist", "xgboost_tune"):
        assert RETRIED <= {re.sub(r"-\d+$", "", t) for t in got}, got
    if name == "interactive_train":
        assert got["teardown-ray-cluster"] == POLICY and got["run-ray-driver"] is None


def test_the_retry_window_outlasts_the_longest_follow():
    """Argo counts backoff.maxDuration from the first attempt's start (and gives retried pods that
    deadline): it must outlast a follow of the default job_timeout (a day) by far."""
    seconds = int(common.RETRY["backoff_max_duration"].rstrip("s"))
    assert seconds >= 7 * 86400


def test_a_retried_follow_whose_cluster_is_gone_fails_at_once_saying_why(as_runner, tmp_path):
    """The first attempt saw the job end and deleted the cluster, then failed (the job failed):
    KFP retries it. The retry must not wait out an unreachable dashboard for the outage window
    (600 s by default; 30 s here) and then fail as if the dashboard were down."""
    with pytest.raises(JobLost, match=r"RayCluster gone-cluster does not exist, so Ray job raysubmit_1 cannot be "
                                      r"running.*an earlier attempt of this task deleted its cluster"):
        tasks.follow("http://127.0.0.1:9", "raysubmit_1", str(tmp_path / "job.log"), cluster_name="gone-cluster",
                     namespace="sandbox", outage_tolerance_seconds=30)
