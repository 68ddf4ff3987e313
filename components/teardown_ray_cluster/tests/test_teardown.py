"""teardown_ray_cluster: finds the run's clusters by label, is idempotent, spares others."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.helpers import raycluster

COMPONENT = "components.teardown_ray_cluster.component:teardown_ray_cluster"


def names(sbx):
    co = k8s.CustomObjectsApi(sbx.api_client())
    return sorted(rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"])


def test_nothing_left_is_success(sbx, run_local):
    result, log = run_local(COMPONENT, {"run_id": "r-none"})
    assert result["status"] == "SUCCESS", log
    assert result["tasks"]["teardown-ray-cluster"]["parameterValues"]["Output"] == 0.0
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
    assert result["tasks"]["teardown-ray-cluster"]["parameterValues"]["Output"] >= 0
    again, _ = run_local(COMPONENT, {"run_id": "r-td"})
    assert again["status"] == "SUCCESS"
