"""sweep_ray_clusters, as the compiled kfp_ray_gc pipeline runs it (kfp.local, as
pipeline-runner): deletes the kfp-ray clusters whose lease expired, spares the rest, reports."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubernetes import client as k8s

from kfp_ray import lease, rayclusters
from kfp_ray.pipelines import registry
from tests.helpers import raycluster

NS = "sandbox"


def kfp_ray(name, run, expires):
    body = raycluster(name, workers=1, cpu="250m", memory="512Mi")
    body["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "kfp-ray", rayclusters.RUN_LABEL: run})
    body["metadata"]["annotations"] = {lease.ANNOTATION: lease.format_time(datetime.now(UTC) + timedelta(seconds=expires))}
    return body


def test_the_gc_pipeline_deletes_expired_kfp_ray_clusters_only(sbx, run_local):
    sbx.set_faults({"clusters": {"sw-*": {"never_admit": True}}, "platform": {"finalizer_delay_s": 0.5}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    foreign = raycluster("sw-foreign", workers=0, cpu="250m", memory="512Mi")
    foreign["metadata"]["annotations"] = {lease.ANNOTATION: "2020-01-01T00:00:00Z"}
    for body in (kfp_ray("sw-gone", "run-deleted", -600), kfp_ray("sw-live", "run-live", 600), foreign):
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)

    result, log = run_local(str(registry.compiled_path("kfp_ray_gc")), {})
    assert result["status"] == "SUCCESS", log
    out = result["tasks"]["sweep-ray-clusters"]
    assert out["parameterValues"] == {"expired": 1, "deleted": 1}
    left = {rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]}
    assert "sw-gone" not in left and {"sw-live", "sw-foreign"} <= left
    assert re.search(r"lease of RayCluster sandbox/sw-gone \(run run-deleted\) expired 1\dm\d\ds ago: deleting it", log)
    report = Path(out["artifacts"]["report"]["artifacts"][0]["uri"]).read_text()
    assert "| sandbox | sw-gone | run-deleted | expired 10m" in report and "| deleted |" in report
    assert "| sandbox | sw-live | run-live | live, " in report and "sw-foreign" not in report
    assert "2 kfp-ray RayClusters in namespace sandbox, 1 with an expired lease; deleted 1" in report
