"""compiled/*.yaml: importable, reproducible, fresh, and safe to share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kfp import components, dsl

from kfp_ray.pipelines import compile as comp
from kfp_ray.pipelines import registry

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_TASKS = ("provision-ray-cluster", "follow-ray-job", "teardown-ray-cluster")  # follow submits too
RAYJOB_TASKS = ("run-ray-job", "stage-dataset-2", "publish-training-results-2")  # lifecycle "rayjob"
# the Ray client driver pipeline (seed demo 2) has no job: its driver task is the cluster's user
DRIVER_TASKS = ("provision-ray-cluster", "run-ray-driver", "teardown-ray-cluster")
TRAINING = [name for name in registry.PIPELINES if name != "kfp_ray_gc"]  # the sweeper has no cluster of its own


def docs(name):
    return list(yaml.safe_load_all(registry.compiled_path(name).read_text()))


@pytest.mark.parametrize("name", TRAINING)
def test_compiled_yaml_loads_with_exit_handler_no_caching_and_the_data_connection(name):
    assert components.load_component_from_file(str(registry.compiled_path(name))) is not None
    spec, platform = docs(name)
    dag = spec["root"]["dag"]["tasks"]
    exit_tasks = [t for t, body in dag.items() if body.get("triggerPolicy", {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED"]
    assert exit_tasks == ["teardown-ray-cluster"]
    inner = {t: body for c in spec["components"].values() for t, body in ((c.get("dag") or {}).get("tasks") or {}).items()}
    tasks = DRIVER_TASKS if name == "interactive_train" else CLUSTER_TASKS + RAYJOB_TASKS
    for task in tasks:
        body = inner.get(task) or dag.get(task)
        assert body["cachingOptions"] == {}, f"{task} must not be cached"
    containers = [t for t, body in inner.items() if "dag" not in spec["components"][body["componentRef"]["name"]]]
    assert all(inner[t]["cachingOptions"] == {} for t in containers), "every task of every branch uncached"
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    secret_users = {k for k, v in executors.items() if "secretAsEnv" in v}
    assert {"exec-stage-dataset", f"exec-{tasks[1]}", "exec-publish-training-results"} <= secret_users
    mount = executors["exec-stage-dataset"]["secretAsEnv"][0]
    assert mount["secretNameParameter"]["componentInputParameter"].endswith("data_connection")  # the pipeline parameter
    assert {m["envVar"] for m in mount["keyToEnv"]} >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT"}


def test_the_sweeper_pipeline_is_one_uncached_sweep_that_deletes_by_default():
    assert components.load_component_from_file(str(registry.compiled_path("kfp_ray_gc"))) is not None
    spec, = docs("kfp_ray_gc")
    assert list(spec["root"]["dag"]["tasks"]) == ["sweep-ray-clusters"]
    assert spec["root"]["dag"]["tasks"]["sweep-ray-clusters"]["cachingOptions"] == {}
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["delete"]["defaultValue"] is True and params["namespace"]["defaultValue"] == ""


def test_compile_check_passes_on_main():
    run = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_compile_check_fails_after_an_edit_of_a_pipeline():
    # The same source with one edit (its description), as after changing pipeline.py.
    edited = dsl.pipeline(name="xgboost-tune", description="edited")(registry.load("xgboost_tune").pipeline_func)

    def loader(name):
        return edited if name == "xgboost_tune" else registry.load(name)

    assert comp.stale(loader=loader, components=()) == ["xgboost_tune"]


def test_recompiling_gives_the_same_bytes(tmp_path):
    comp.compile_all(tmp_path, names=["ray_training"], components=["teardown_ray_cluster"])
    assert (tmp_path / "ray_training.yaml").read_bytes() == registry.compiled_path("ray_training").read_bytes()
    assert (tmp_path / "components" / "teardown_ray_cluster.yaml").read_bytes() == \
        registry.compiled_component_path("teardown_ray_cluster").read_bytes()


def test_no_secret_value_ends_up_in_compiled_yaml(box, sbx, tmp_path, monkeypatch):
    """Compile with a live data connection in the environment: none of it may leak in."""
    secrets = sbx.data_connection()
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    comp.compile_all(tmp_path)
    text = "".join(p.read_text() for p in tmp_path.glob("**/*.yaml"))
    tokens = [yaml.safe_load(Path(box.info[k]).read_text())["users"][0]["user"]["token"]
              for k in ("kubeconfig", "kubeconfig_pipeline_runner")]
    assert [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if secrets[k] in text] == []
    assert [t for t in tokens if t in text] == []
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in text


@pytest.mark.parametrize("name", registry.COMPONENTS)
def test_each_component_compiles_alone_and_loads_as_a_component(name):
    """compiled/components/<name>.yaml: what kfp.components.load_component_from_file and an Elyra
    component catalog entry take; its inputs are the component's, with its docstring."""
    path = registry.compiled_component_path(name)
    loaded = components.load_component_from_file(str(path))
    assert loaded.name == name.replace("_", "-")
    original = registry.load_component(name)
    assert set(loaded.component_spec.inputs or {}) == set(original.component_spec.inputs or {})
    # the UI shows the docstring's summary; the loaded form keeps its Args section too
    summary = original.description.split("\n")[0]
    assert summary and loaded.description.startswith(summary)


def test_compile_check_names_a_field_rhoai_3s_kfp_would_refuse(tmp_path, capsys):
    import shutil

    import yaml

    shutil.copytree(registry.COMPILED, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "xgboost_tune.yaml"
    spec, platform = yaml.safe_load_all(path.read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    first = sorted(executors)[0]
    executors[first]["securityContext"] = {"runAsNonRoot": True}  # kfp-kubernetes 2.17's set_security_context
    path.write_text(yaml.safe_dump_all([spec, platform]))
    assert comp.server_accepts(registry.COMPILED) is True
    assert comp.server_accepts(tmp_path) is False
    assert f"rhoai-3.3's KFP would refuse: xgboost_tune.yaml: executor {first}: securityContext" in capsys.readouterr().err
