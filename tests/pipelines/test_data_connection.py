"""The data connection as the compiled pipelines mount it: into every task that touches S3 or
prints a job's log (follow, for redaction), with AWS_DEFAULT_REGION optional, as KFP 2.17's
driver turns the kfp-kubernetes spec into the pod's env (backend/src/v2/driver/k8s.go: each
secretAsEnv entry's keys become env with secretKeyRef{name, key, optional of the entry}),
resolved by the sandbox's kubelet against a data connection without a region."""

from __future__ import annotations

import base64

import pytest
import yaml
from kubernetes import client as k8s

from kfp_ray.pipelines import registry
from kfp_ray.pipelines.common import DATA_CONNECTION_KEYS, data_connection_env
from kfp_ray_sandbox.controllers.kubelet import ConfigError, container_env

NOREGION = "aws-connection-noregion"
S3_TASKS = {"exec-stage-dataset", "exec-follow-ray-job", "exec-publish-training-results",
            # lifecycle "rayjob" (run-ray-job streams the job's log: redacted with the keys), and the typo branch
            "exec-stage-dataset-2", "exec-run-ray-job", "exec-publish-training-results-2", "exec-stage-dataset-3"}
# the Ray client driver pipeline: its driver task reads and writes S3 (data, checkpoints, results.json)
DRIVER_S3_TASKS = {"exec-stage-dataset", "exec-run-ray-driver", "exec-publish-training-results"}
# The exit task: its report shows failed tasks' log ends, which may hold what a Ray task printed; with
# the keys in its env (each optional: it must start whatever the data connection is), redact.py hides them.
TEARDOWN = "exec-teardown-ray-cluster"


def executors(name):
    platform = list(yaml.safe_load_all(registry.compiled_path(name).read_text()))[1]
    return platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def with_a_data_connection() -> list[str]:
    """The pipelines that take a data connection (the training ones; not the sweeper)."""
    def inputs(name):
        spec = next(yaml.safe_load_all(registry.compiled_path(name).read_text()))
        return (spec["root"].get("inputDefinitions") or {}).get("parameters", {})
    return [name for name in registry.PIPELINES if "data_connection" in inputs(name)]


def driver_env(secret_as_env: list, secret_name: str) -> list[dict]:
    """What KFP 2.17's driver puts into the task pod for the secretAsEnv entries."""
    return [{"name": m["envVar"], "valueFrom": {"secretKeyRef": {"name": secret_name, "key": m["secretKey"],
                                                                 "optional": entry.get("optional", False)}}}
            for entry in secret_as_env for m in entry["keyToEnv"]]


def test_the_training_pipelines_take_a_data_connection():
    assert {"ray_training", "fashion_mnist", "xgboost_tune"} <= set(with_a_data_connection())


@pytest.mark.parametrize("name", with_a_data_connection())
def test_every_s3_task_and_follow_mount_the_data_connection_with_an_optional_region(name):
    ex = executors(name)
    tasks = DRIVER_S3_TASKS if name == "interactive_train" else S3_TASKS
    assert {k for k, v in ex.items() if "secretAsEnv" in v} == tasks | {TEARDOWN}
    for task in tasks:
        entries = ex[task]["secretAsEnv"]
        by_optional = {e["optional"]: {m["secretKey"] for m in e["keyToEnv"]} for e in entries}
        assert by_optional == {False: set(DATA_CONNECTION_KEYS), True: {"AWS_DEFAULT_REGION"}}, task
        assert all(e["secretNameParameter"]["componentInputParameter"].endswith("data_connection") for e in entries)


@pytest.fixture
def noregion_secret(box, sbx):
    """An RHOAI data connection whose region was left empty (the key is absent)."""
    v1 = k8s.CoreV1Api(sbx.api_client())
    values = {k: v for k, v in sbx.data_connection().items() if k != "AWS_DEFAULT_REGION"}
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=NOREGION, labels={"opendatahub.io/dashboard": "true"},
                                                  annotations={"opendatahub.io/connection-type": "s3"}),
                        type="Opaque", data={k: base64.b64encode(v.encode()).decode() for k, v in values.items()})
    v1.create_namespaced_secret(sbx.namespace, body)
    yield values
    v1.delete_namespaced_secret(NOREGION, sbx.namespace)


def test_a_task_pod_starts_without_a_region_and_gets_the_other_keys(box, sbx, noregion_secret):
    pod = {"metadata": {"name": "follow-ray-job-pod", "namespace": sbx.namespace}, "spec": {}, "status": {}}
    mounted = driver_env(executors("xgboost_tune")["exec-follow-ray-job"]["secretAsEnv"], NOREGION)
    env = container_env(box.store, box.registry, pod, {"name": "main", "env": mounted})
    assert env == {k: noregion_secret[k] for k in DATA_CONNECTION_KEYS}
    assert env == data_connection_env(noregion_secret)  # what `run --local` and the tests give kfp.local tasks
    # Before: all five keys in one entry, none optional: the kubelet refuses to start the pod.
    before = [{"keyToEnv": [{"secretKey": k, "envVar": k} for k in (*DATA_CONNECTION_KEYS, "AWS_DEFAULT_REGION")],
               "optional": False}]
    with pytest.raises(ConfigError, match=f"couldn't find key AWS_DEFAULT_REGION in Secret sandbox/{NOREGION}"):
        container_env(box.store, box.registry, pod, {"name": "main", "env": driver_env(before, NOREGION)})


@pytest.mark.parametrize("name", with_a_data_connection())
def test_the_teardown_gets_every_key_optional_for_its_reports_redaction(name):
    entries = executors(name)[TEARDOWN]["secretAsEnv"]
    assert [e["optional"] for e in entries] == [True]
    assert {m["secretKey"] for m in entries[0]["keyToEnv"]} == {*DATA_CONNECTION_KEYS, "AWS_DEFAULT_REGION"}
    assert entries[0]["secretNameParameter"]["componentInputParameter"].endswith("data_connection")


def test_the_teardown_starts_without_its_data_connection_and_hides_its_keys_with_one(box, sbx, noregion_secret):
    pod = {"metadata": {"name": "teardown-ray-cluster-pod", "namespace": sbx.namespace}, "spec": {}, "status": {}}
    secret_as_env = executors("xgboost_tune")[TEARDOWN]["secretAsEnv"]
    missing = container_env(box.store, box.registry, pod, {"name": "main", "env": driver_env(secret_as_env, "no-such")})
    assert missing == {}  # a data connection that is not there: the exit task still runs, and frees the cluster
    env = container_env(box.store, box.registry, pod, {"name": "main", "env": driver_env(secret_as_env, NOREGION)})
    assert env == {k: noregion_secret[k] for k in DATA_CONNECTION_KEYS}


def test_a_missing_required_key_fails_like_the_pod_would():
    with pytest.raises(KeyError, match="AWS_S3_BUCKET"):
        data_connection_env({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_S3_ENDPOINT": "c"})
