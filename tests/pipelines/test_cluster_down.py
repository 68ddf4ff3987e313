"""`kfp-ray cluster down` deletes kfp-ray's clusters only: one it did not make needs --force
(and gets no lease stamped on it), a RayJob's is never touched, --force or not. Against the
session sandbox as the kubeconfig's user; no Ray (the clusters are held in the queue)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kubernetes import client as k8s

from kfp_ray import lease, rayclusters
from tests.helpers import raycluster

ROOT = Path(__file__).resolve().parents[2]
NS = "sandbox"


def down(box, *args):
    env = {**os.environ, "KUBECONFIG": box.info["kubeconfig"]}
    return subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "cluster", "down", *args, "-n", NS], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_down_deletes_only_kfp_rays_clusters_and_never_a_rayjobs(box, sbx):
    sbx.set_faults({"clusters": {"down-*": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    ours = raycluster("down-ours", workers=0, cpu="250m", memory="512Mi")
    ours["metadata"]["labels"].update({lease.MANAGED_BY[0]: lease.MANAGED_BY[1], rayclusters.RUN_LABEL: "terminal"})
    foreign = raycluster("down-foreign", workers=0, cpu="250m", memory="512Mi")  # a notebook's
    of_job = raycluster("down-rayjob", workers=0, cpu="250m", memory="512Mi")
    of_job["metadata"]["labels"]["ray.io/originated-from-crd"] = "RayJob"
    of_job["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "train",
                                              "uid": "6d1c4a52-0000-4000-8000-000000000001", "controller": True}]
    for body in (ours, foreign, of_job):
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)

    def get(name):
        return next((rc for rc in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]
                     if rc["metadata"]["name"] == name), None)

    r = down(box, "down-foreign")
    assert r.returncode == 1 and "RayCluster down-foreign is not kfp-ray's" in r.stderr and "--force" in r.stderr
    for args in (("down-rayjob",), ("down-rayjob", "--force")):
        r = down(box, *args)
        assert r.returncode == 1 and "belongs to RayJob train" in r.stderr and "oc delete rayjob train" in r.stderr
    for name in ("down-foreign", "down-rayjob"):  # untouched: still there, no lease written on them
        rc = get(name)
        assert rc is not None and lease.ANNOTATION not in (rc["metadata"].get("annotations") or {}), rc["metadata"]

    r = down(box, "down-foreign", "--force")
    assert r.returncode == 0 and "deleted RayCluster down-foreign" in r.stdout, r.stderr
    r = down(box, "down-ours")
    assert r.returncode == 0 and "deleted RayCluster down-ours" in r.stdout, r.stderr
    assert get("down-foreign") is None and get("down-ours") is None and get("down-rayjob") is not None
