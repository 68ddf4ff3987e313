"""What the sandbox's run executor decides from a compiled pipeline (sandbox/pipelines_api/dag.py),
on the real compiled xgboost_tune: what starts together, what waits, what is skipped after a
failure, that the exit handler's task runs whatever happened, and where inputs come from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kfp_ray_sandbox.pipelines_api import dag

ROOT = Path(__file__).resolve().parents[2]


def spec():
    docs = list(yaml.safe_load_all((ROOT / "compiled" / "xgboost_tune.yaml").read_text()))
    return docs[0], docs[1]


def branch(task: str) -> dict:
    """The tasks of the lifecycle branch (a dsl.If sub-DAG) that holds `task`."""
    return next(c["dag"]["tasks"] for c in spec()[0]["components"].values() if task in (c.get("dag") or {}).get("tasks", {}))


def inner():
    return branch("provision-ray-cluster")


def test_the_lifecycle_parameter_picks_one_branch_and_a_typo_runs_only_the_check():
    components = spec()[0]["components"]
    tasks = next(c["dag"]["tasks"] for c in components.values()
                 if any("condition" in (t.get("triggerPolicy") or {}) for t in (c.get("dag") or {}).get("tasks", {}).values()))
    inside = {}
    for value in ("raycluster", "rayjob", "RayJob"):
        [taken] = [name for name, t in tasks.items() if dag.condition_holds(t, {"pipelinechannel--lifecycle": value})]
        inside[value] = sorted(components[tasks[taken]["componentRef"]["name"]]["dag"]["tasks"])
    assert inside["raycluster"] == ["follow-ray-job", "provision-ray-cluster", "publish-training-results", "stage-dataset"]
    assert inside["rayjob"] == ["publish-training-results-2", "run-ray-job", "stage-dataset-2"]
    assert inside["RayJob"] == ["stage-dataset-3"]  # stage_dataset names the parameter and fails


def test_a_lifecycle_that_is_neither_fails_naming_the_parameter():
    from kfp_ray.datasets import check_lifecycle
    from kfp_ray.errors import InputError

    for good in ("raycluster", "rayjob"):
        check_lifecycle(good)
    with pytest.raises(InputError) as exc:
        check_lifecycle("RayJob")
    assert exc.value.field == "lifecycle" and '"raycluster"' in exc.value.fix and '"rayjob"' in exc.value.fix


def test_independent_tasks_start_together_and_the_rest_in_dependency_order():
    tasks, states = inner(), {}
    start, skip = dag.runnable(tasks, states)
    assert sorted(start) == ["provision-ray-cluster", "stage-dataset"] and skip == []  # stage does not wait
    states |= {"provision-ray-cluster": dag.SUCCEEDED, "stage-dataset": dag.RUNNING}
    assert dag.runnable(tasks, states) == ([], [])  # follow (it submits the job) needs the staged data too
    states["stage-dataset"] = dag.SUCCEEDED
    assert dag.runnable(tasks, states)[0] == ["follow-ray-job"]
    states |= {"follow-ray-job": dag.SUCCEEDED}
    assert dag.runnable(tasks, states)[0] == ["publish-training-results"]


def test_after_a_failure_the_dependents_are_skipped_and_the_exit_task_still_runs():
    tasks = inner()
    states = {"provision-ray-cluster": dag.SUCCEEDED, "stage-dataset": dag.SUCCEEDED,
              "follow-ray-job": dag.FAILED}
    assert dag.runnable(tasks, states) == ([], ["publish-training-results"])
    root = spec()[0]["root"]["dag"]["tasks"]
    assert dag.runnable(root, {"exit-handler-1": dag.RUNNING}) == ([], [])
    for outcome in (dag.SUCCEEDED, dag.FAILED, dag.CANCELED):
        assert dag.runnable(root, {"exit-handler-1": outcome}) == (["teardown-ray-cluster"], [])


def test_inputs_come_from_the_dag_inputs_upstream_outputs_and_constants():
    tasks = inner()
    parent = {"pipelinechannel--samples": 6, "pipelinechannel--concurrent_trials": 3, "pipelinechannel--boosting_rounds": 60,
              "pipelinechannel--install_requirements": True, "pipelinechannel--extra_requirements": []}
    siblings = {"provision-ray-cluster": dag.Node("provision-ray-cluster", {}, {}, dag.SUCCEEDED,
                                                  outputs={"dashboard_url": "http://head:8265", "cluster_name": "c", "namespace": "sandbox"}),
                "stage-dataset": dag.Node("stage-dataset", {}, {}, dag.SUCCEEDED,
                                          outputs={"data_uri": "s3://b/d", "output_uri": "s3://b/o"})}
    params = dag.resolve_parameters(tasks["follow-ray-job"], parent, siblings)
    assert params["dashboard_url"] == "http://head:8265"
    assert params["pipelinechannel--stage-dataset-data_uri"] == "s3://b/d"
    assert params["pipelinechannel--samples"] == 6
    assert "{{$.inputs.parameters['pipelinechannel--samples']}}" in params["entrypoint"]  # the executor input resolves it


def test_the_data_connection_becomes_secret_env_with_optional_keys_kept_optional():
    _, platform = spec()
    executor = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-follow-ray-job"]
    env = dag.secret_env(executor, {"pipelinechannel--data_connection": "aws-connection-minio"})
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env}
    assert refs["AWS_ACCESS_KEY_ID"] == {"name": "aws-connection-minio", "key": "AWS_ACCESS_KEY_ID"}
    assert refs["AWS_DEFAULT_REGION"] == {"name": "aws-connection-minio", "key": "AWS_DEFAULT_REGION", "optional": True}


@pytest.mark.parametrize("pipeline", ["fashion_mnist", "ray_training", "xgboost_tune"])
def test_both_lifecycle_branches_hand_the_job_the_same_inputs(pipeline):
    """What a run in lifecycle "rayjob" submits is what the RayCluster branch submits: the same
    entrypoint, code, requirements and cluster shape from the same pipeline parameters (the
    RayJob CLI run of xgboost_tune, tests/pipelines/test_run_rayjob.py, stands for the others)."""
    pipeline_spec = next(yaml.safe_load_all((ROOT / "compiled" / f"{pipeline}.yaml").read_text()))
    tasks = {name: t for c in pipeline_spec["components"].values() for name, t in (c.get("dag") or {}).get("tasks", {}).items()}

    def constant_inputs(*names):
        out = {}
        for name in names:
            for key, value in tasks[name]["inputs"].get("parameters", {}).items():
                if "componentInputParameter" in value or "runtimeValue" in value:
                    # each branch refers to its own stage-dataset task (KFP numbers the second one)
                    out[key] = re.sub(r"(stage-dataset)-\d+", r"\1", json.dumps(value, sort_keys=True))
        return out

    cluster = constant_inputs("provision-ray-cluster", "follow-ray-job")
    rayjob = constant_inputs("run-ray-job")
    shared = set(cluster) & set(rayjob)
    assert {"entrypoint", "num_workers", "worker_gpus", "tolerations", "image"} <= shared, sorted(shared)
    assert {k: rayjob[k] for k in shared} == {k: cluster[k] for k in shared}
