"""RHOAI's Ray images run as they would there (sandbox/rayimage.py): a RayJob with a clusterSelector
on a cluster of the CodeFlare SDK's CUDA_PY312_RUNTIME_IMAGE runs its submitter (the `ray` CLI)
and its entrypoint in that image's Python, and a Ray client of Python 3.11 is refused as Ray
refuses it (ray/util/client/__init__.py _check_versions, python_version_match_level "minor")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kubernetes import client as k8s

from tests.helpers import eventually, raycluster
from tests.opt_in import full_only

NS = "default"  # not Kueue-managed: there RHOAI's webhooks refuse a clusterSelector RayJob either way
RAY = ("ray.io", "v1", NS)


@pytest.fixture
def default_ns(sbx):
    """Deletes what the test made in `default` (the sbx fixture tidies `sandbox` only)."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    made: list[tuple[str, str]] = []
    yield co, made
    for plural, name in reversed(made):
        try:
            co.delete_namespaced_custom_object(*RAY, plural, name)
        except k8s.ApiException:
            pass
    eventually(lambda: not any(o["metadata"]["name"] == name for plural, name in made
                               for o in co.list_namespaced_custom_object(*RAY, plural)["items"]), 90,
               what="the test's RayJob and RayCluster to be gone")
    eventually(lambda: not [p for p in sbx.processes() if p["cluster"] == "py312"], 60, what="its Ray to stop")


@pytest.mark.ray
@full_only("tests/unit/test_rayimage.py (the Python each image tag and digest runs) and tests/unit/test_rayjob.py "
           "(the submitter pod gets the head's py312 image); this one builds a Python 3.12 Ray image, a pip install "
           "of Ray that costs minutes of CPU on every clean clone")
def test_cluster_selector_rayjob_on_the_sdk_py312_image(sbx, default_ns, as_admin, tmp_path):
    from codeflare_sdk.common.utils.constants import CUDA_PY312_RUNTIME_IMAGE

    from kfp_ray_sandbox import rayimage

    co, made = default_ns
    minor = "3.12" if rayimage.interpreter("3.12") else rayimage.own_minor()  # else the closest whole image
    # the image is built here, once per machine (a pip install of Ray for 3.12, minutes on a loaded
    # 2-core machine): the pull of a large image, which the wait for the cluster below leaves out
    assert minor != "3.12" or rayimage.foreign_python("3.12"), "the Python 3.12 Ray image could not be built"
    rc = raycluster("py312", workers=0, cpu="1", memory="2Gi", queue=None, image=CUDA_PY312_RUNTIME_IMAGE)
    co.create_namespaced_custom_object(*RAY, "rayclusters", rc)
    made.append(("rayclusters", "py312"))
    eventually(lambda: (co.get_namespaced_custom_object(*RAY, "rayclusters", "py312").get("status") or {})
               .get("state") == "ready", 300, what="the py312 cluster to be ready")
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "py312-job"},
           "spec": {"entrypoint": "python -c \"import sys; print('python %d.%d' % sys.version_info[:2])\"",
                    "clusterSelector": {"ray.io/cluster": "py312"}}}
    co.create_namespaced_custom_object(*RAY, "rayjobs", job)
    made.append(("rayjobs", "py312-job"))
    done = eventually(lambda: (s := co.get_namespaced_custom_object(*RAY, "rayjobs", "py312-job").get("status") or {})
                      .get("jobDeploymentStatus") in ("Complete", "Failed") and s, 240, what="the RayJob to finish")
    v1 = k8s.CoreV1Api(sbx.api_client())
    pods = v1.list_namespaced_pod(NS, label_selector="job-name=py312-job").items
    logs = [v1.read_namespaced_pod_log(p.metadata.name, NS) for p in pods]
    assert (done["jobDeploymentStatus"], done.get("jobStatus")) == ("Complete", "SUCCEEDED"), (done, logs)
    assert [p.spec.containers[0].image for p in pods] == [CUDA_PY312_RUNTIME_IMAGE]
    assert any(f"python {minor}" in log for log in logs), logs

    if minor != "3.12":
        return  # the closest whole image: a 3.11 client is not refused there (docs/sandbox.md)
    from kfp_ray import driver

    env = driver.client_certificate(driver.ca_secret("py312", NS, timeout=30), "py312", NS, str(tmp_path))
    svc = v1.read_namespaced_service("py312-head-svc", NS)
    port = next(p.port for p in svc.spec.ports if p.name == "client")
    for _ in range(4):
        probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init('ray://{svc.spec.cluster_ip}:{port}')"],
                               env={**os.environ, **env}, capture_output=True, text=True, timeout=180)
        # Ray's proxy forks a client server per connection, before any version check, and that
        # server can die at start on a loaded machine, with the sandbox's zygote or without
        # (driver.client_init says how: 3 of 40 at full load); as kfp-ray's driver does, a new
        # connection gets a new server
        if not any(s in probe.stderr for s in ("Initialization failure from server", driver.SESSION_CLEANED_UP)):
            break
        print(_client_server_logs(sbx, "py312"))
    assert probe.returncode != 0, probe.stdout
    assert "Version mismatch: The cluster was started with:" in probe.stderr, probe.stderr[-3000:]
    assert "Python: 3.12." in probe.stderr and f"Python: {sys.version_info[0]}.{sys.version_info[1]}." in probe.stderr


def _client_server_logs(sbx, cluster: str) -> str:
    """The head's ray_client_server_*.err logs (Ray's proxy names them in its error)."""
    from pathlib import Path

    out = []
    for proc in sbx.processes():
        if proc["cluster"] == cluster:
            for f in sorted(Path(proc["temp_dir"]).glob("session_latest/logs/ray_client_server_*.err")):
                out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-2000:]}")
    return "\n".join(out)
