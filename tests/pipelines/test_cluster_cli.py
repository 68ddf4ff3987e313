"""`kfp-ray cluster` (the seed's demo 0 from the terminal) against the sandbox: up with live
progress, status, details, list, down with the quota back to 0; a queued cluster's status
says why; a bad name is refused before anything is created."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client as k8s

from .. import helpers
from ..helpers import eventually, on_platforms

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]


def cli(box, *args, timeout=300):
    env = {**os.environ, "KUBECONFIG": box.info["kubeconfig"]}
    return subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "cluster", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@on_platforms()
def test_up_status_details_list_down(box, sbx):
    up = cli(box, "up", "demo0", "--num-workers", "0", "--head-memory", "1Gi", "--local-queue", box.info["local_queue"])
    assert up.returncode == 0, up.stdout + up.stderr
    assert "admitted by Kueue" in up.stdout and "RayCluster demo0 is ready in sandbox: dashboard http://" in up.stdout
    assert cli(box, "status", "demo0").stdout.strip() == "demo0: ready"
    details = cli(box, "details", "demo0").stdout
    # the dashboard as the SDK finds it: KubeRay's HTTPRoute on the data-science-gateway (3.x), the Route (2.x)
    dashboard = {"rhoai-3.3": f"dashboard:  {box.gateway_http.url if box.gateway_http else ''}/ray/sandbox/demo0\n",
                 "rhoai-2.25": "dashboard:  http://"}[box.platform.name]
    assert f"queue:      {box.info['local_queue']}" in details and dashboard in details, details
    assert "resources:  cpu 1, memory 1Gi, 1 pod" in details and "Running  " in details
    listed = cli(box, "list").stdout.splitlines()
    row = next(li for li in listed if li.startswith("demo0 "))
    assert "ready" in row and "terminal" in row and "live, 7h5" in row  # an 8 h lease, just begun
    down = cli(box, "down", "demo0")
    assert down.returncode == 0 and "deleted RayCluster demo0 in sandbox; released cpu 1, memory 1Gi, 1 pod" in down.stdout
    co = k8s.CustomObjectsApi(sbx.api_client())
    assert not [rc for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]
                if rc["metadata"]["name"] == "demo0"]
    eventually(lambda: helpers.cpu_in_use(co) == 0, 30, what="the quota back to 0")


def test_a_queued_cluster_says_why_and_an_interrupted_up_deletes_it(box, sbx):
    sbx.patch_faults({"clusters": {"demo0-queued": {"never_admit": True}}})
    env = {**os.environ, "KUBECONFIG": box.info["kubeconfig"]}
    up = subprocess.Popen([sys.executable, "-m", "kfp_ray.pipelines", "cluster", "up", "demo0-queued", "--num-workers", "0",
                           "--head-memory", "1Gi", "--local-queue", box.info["local_queue"]], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        status = eventually(lambda: (r := cli(box, "status", "demo0-queued")).stdout.startswith("demo0-queued: queued")
                            and r.stdout, 120, 0.5, what="the cluster to be queued")
        assert "ClusterQueue" in status  # Kueue's reason and the queue's usage
        # its place in the LocalQueue, as Kueue orders it (the Workloads are readable as this user)
        row = next(li for li in cli(box, "list").stdout.splitlines() if li.startswith("demo0-queued "))
        assert f"{box.info['local_queue']}: position 0 of " in row, row
    finally:
        up.send_signal(signal.SIGTERM)  # Ctrl-C / a cancelled notebook cell: nothing is left behind
        out, _ = up.communicate(timeout=120)
    assert up.returncode != 0
    assert "no RayCluster demo0-queued" in cli(box, "status", "demo0-queued").stdout, out


def test_a_bad_name_is_refused_before_anything_is_created(box):
    r = cli(box, "up", "Not_A_Name", "--local-queue", box.info["local_queue"])
    assert r.returncode == 1 and "cluster_name" in r.stderr and "Not_A_Name" in r.stderr, r.stdout + r.stderr
    assert "creating RayCluster" not in r.stdout
