"""follow_ray_job's cluster deletion: it runs however the follow ends, and returns only once
the RayCluster is really gone (finalizers done). No Ray needed: the follow itself fails at
once (the "dashboard" here is the sandbox's S3 endpoint, which knows no Ray job)."""

from __future__ import annotations

import threading

from kfp_ray import tasks
from kfp_ray.errors import KfpRayError
from kubernetes import client as k8s

from tests.helpers import eventually, raycluster

HOLD = "test.kfp-ray.io/hold"  # a finalizer only the test removes


def test_follow_deletes_the_cluster_and_waits_until_it_is_gone(box, sbx, as_pipeline_runner, tmp_path, capsys):
    sbx.set_faults({"clusters": {"fl-held": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    body = raycluster("fl-held", workers=0, cpu="100m", memory="256Mi")
    body["metadata"]["finalizers"] = [HOLD]
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)

    def get():
        items = co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]
        return next((rc for rc in items if rc["metadata"]["name"] == "fl-held"), None)

    outcome = {}

    def follow():
        try:
            tasks.follow(box.info["s3_endpoint"], "no-such-job", str(tmp_path / "job.log"), cluster_name="fl-held",
                         namespace="sandbox", timeout=60)
        except KfpRayError as exc:
            outcome["error"] = exc

    t = threading.Thread(target=follow)
    t.start()
    rc = eventually(lambda: (get() or {}).get("metadata", {}).get("deletionTimestamp") and get(), 60,
                    what="follow's deletion request")
    assert t.is_alive()  # held by the finalizer: follow cannot have returned
    co.patch_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "fl-held",
                                      {"metadata": {"finalizers": [f for f in rc["metadata"]["finalizers"] if f != HOLD]}})
    t.join(timeout=60)
    assert "error" in outcome and get() is None
    out = capsys.readouterr().out
    assert "to be gone" in out and HOLD in out and "deleted RayCluster fl-held" in out
