"""teardown_ray_cluster: finds the run's clusters by label, is idempotent, spares others."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.errors import InputError
from tests.helpers import eventually, on_platforms, raycluster

COMPONENT = "kfp_ray.components.teardown_ray_cluster.component:teardown_ray_cluster"
HOLD = "test.kfp-ray.io/hold"  # a finalizer only the test removes


def list_rcs(co):
    return co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]


def names(sbx):
    return sorted(rc["metadata"]["name"] for rc in list_rcs(k8s.CustomObjectsApi(sbx.api_client())))


def test_nothing_left_is_success(sbx, run_local):
    result, log = run_local(COMPONENT, {"run_id": "r-none"})
    assert result["status"] == "SUCCESS", log
    assert result["tasks"]["teardown-ray-cluster"]["parameterValues"]["cluster_seconds"] == 0.0
    assert "nothing to tear down" in log


def test_deletes_the_runs_clusters_and_spares_others(sbx, run_local):
    sbx.set_faults({"clusters": {"td-*": {"never_admit": True}}})  # no Ray needed to prove the point
    co = k8s.CustomObjectsApi(sbx.api_client())
    for name, run in (("td-mine-a", "r-td"), ("td-mine-b", "r-td"), ("td-other", "r-else")):
        body = raycluster(name, cpu="100m", memory="256Mi")
        body["metadata"]["labels"]["kfp-ray.io/run-id"] = run
        co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)
    result, log = run_local(COMPONENT, {"run_id": "r-td", "cluster_name": "td-other"})
    assert result["status"] == "SUCCESS", log
    assert names(sbx) == ["td-other"]
    assert "belongs to another run; leaving it" in log
    assert result["tasks"]["teardown-ray-cluster"]["parameterValues"]["cluster_seconds"] >= 0
    again, _ = run_local(COMPONENT, {"run_id": "r-td"})
    assert again["status"] == "SUCCESS"


def test_teardown_returns_only_once_the_cluster_is_really_gone(sbx, as_pipeline_runner, capsys):
    """On OpenShift AI a deleted RayCluster lingers while finalizers run (KubeRay's
    ray.io/authentication-resources on 3.x): teardown waits until it is gone, so the
    name and the quota are free when the run ends. Here a finalizer only the test removes."""
    sbx.set_faults({"clusters": {"td-held": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    body = raycluster("td-held", cpu="100m", memory="256Mi")
    body["metadata"]["labels"]["kfp-ray.io/run-id"] = "r-held"
    body["metadata"]["finalizers"] = [HOLD]
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)
    outcome = {}
    t = threading.Thread(target=lambda: outcome.update(lifetime=tasks.teardown(run_id="r-held", namespace="sandbox")))
    t.start()
    rc = eventually(lambda: next((r for r in list_rcs(co) if r["metadata"]["name"] == "td-held"
                                  and r["metadata"].get("deletionTimestamp")), None), 30, what="the deletion request")
    assert t.is_alive()  # held by the finalizer: teardown cannot have returned
    co.patch_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "td-held",
                                      {"metadata": {"finalizers": [f for f in rc["metadata"]["finalizers"] if f != HOLD]}})
    t.join(timeout=60)
    assert "lifetime" in outcome and names(sbx) == []
    out = capsys.readouterr().out
    assert "waiting up to 300s for RayCluster td-held to be gone" in out and HOLD in out
    assert "deleted RayCluster td-held" in out


@on_platforms()
def test_teardown_under_the_platforms_finalizer(box, sbx, as_pipeline_runner):
    """The platform's controller (KubeRay's authentication controller on 3.x, the CodeFlare
    operator on 2.x) holds its finalizer for finalizer_delay_s after a delete: when teardown
    returns, the cluster is gone."""
    sbx.set_faults({"platform": {"finalizer_delay_s": 2.0}, "clusters": {"td-cf": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    body = raycluster("td-cf", cpu="100m", memory="256Mi")
    body["metadata"]["labels"]["kfp-ray.io/run-id"] = "r-cf"
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)
    eventually(lambda: box.platform.ray_finalizer in (co.get_namespaced_custom_object(
        "ray.io", "v1", "sandbox", "rayclusters", "td-cf")["metadata"].get("finalizers") or []), 30,
        what="the platform's finalizer")
    tasks.teardown(run_id="r-cf", namespace="sandbox")
    assert names(sbx) == []


def test_a_bad_timeout_fails_the_task_but_only_after_the_runs_clusters_are_deleted(sbx, as_pipeline_runner, capsys):
    """An exit handler that refused to delete would leave the quota held: it deletes (with the
    default wait), then fails naming the field."""
    sbx.set_faults({"clusters": {"td-bad": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    body = raycluster("td-bad", cpu="100m", memory="256Mi")
    body["metadata"]["labels"]["kfp-ray.io/run-id"] = "r-bad-timeout"
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)
    with pytest.raises(InputError) as exc:
        tasks.teardown(run_id="r-bad-timeout", namespace="sandbox", timeout=0)
    assert exc.value.field == "timeout" and "above zero" in str(exc.value) and "timeout=300" in str(exc.value)
    assert names(sbx) == []
    assert "deleting the run's clusters anyway" in capsys.readouterr().out


def test_deletes_the_runs_rayjobs_and_spares_others(sbx, as_pipeline_runner, capsys):
    """Lifecycle "rayjob": the run's RayJobs go too (KubeRay's clusters with them). Queued
    ones here (their LocalQueue does not exist): no Ray needed to prove the point."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    for name, run in (("tdj-mine", "r-tdj"), ("tdj-other", "r-else")):
        spec = raycluster(name, cpu="100m", memory="256Mi", queue="no-such-queue")
        meta = spec["metadata"]
        meta["labels"]["kfp-ray.io/run-id"] = run
        co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayjobs", {
            "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "rayClusterSpec": spec["spec"]}})
    try:
        tasks.teardown(run_id="r-tdj", namespace="sandbox")
        left = [rj["metadata"]["name"] for rj in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayjobs")["items"]]
        assert left == ["tdj-other"]
        assert "deleted RayJob tdj-mine" in capsys.readouterr().out
    finally:
        co.delete_namespaced_custom_object("ray.io", "v1", "sandbox", "rayjobs", "tdj-other")
