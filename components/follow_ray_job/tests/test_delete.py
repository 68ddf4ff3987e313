"""follow_ray_job's cluster deletion: when the job is over (and only then), returning only once
the RayCluster is really gone (finalizers done). No Ray needed: the "dashboard" is the
sandbox's S3 endpoint (which knows no Ray job), or a loopback one the test controls."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.components.follow_ray_job.tests.dashboard import Dashboard
from kfp_ray.errors import AccessDenied, JobFailed, JobLost, JobTimeout, KfpRayError, Unreachable
from tests.helpers import eventually, raycluster

HOLD = "test.kfp-ray.io/hold"  # a finalizer only the test removes


def test_follow_deletes_the_cluster_and_waits_until_it_is_gone(box, sbx, as_pipeline_runner, dashboard, tmp_path,
                                                                 capsys):
    sbx.set_faults({"clusters": {"fl-held": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    body = raycluster("fl-held", workers=0, cpu="100m", memory="256Mi")
    body["metadata"]["finalizers"] = [HOLD]
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", body)

    def get():
        items = co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]
        return next((rc for rc in items if rc["metadata"]["name"] == "fl-held"), None)

    outcome = {}

    # the dashboard knows no job: the job is lost, so over

    def follow():
        try:
            tasks.follow(dashboard.url, "no-such-job", str(tmp_path / "job.log"), cluster_name="fl-held",
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
    assert isinstance(outcome.get("error"), JobLost) and get() is None
    out = capsys.readouterr().out
    assert "to be gone" in out and HOLD in out and "deleted RayCluster fl-held" in out


@pytest.mark.parametrize("outcome,raises,deleted", [
    ("SUCCEEDED", None, True),
    ("FAILED", JobFailed, True),
    ("lost", JobLost, True),
    ("timed out", JobTimeout, True),
    ("unreachable", Unreachable, False),
    # Not over: the job may still run (issue 25 item 6): the task fails with the cause, the cluster stays.
    ("proxy 403", AccessDenied, False),
    ("login page", KfpRayError, False),
])
def test_follow_deletes_the_cluster_only_when_the_job_is_over(box, sbx, as_pipeline_runner, tmp_path, capsys,
                                                              outcome, raises, deleted):
    """Over: terminal, lost, or timed out and stopped. An outage longer than tolerated is
    not: the job may still be running, so the cluster is left (to a retry of the task, the
    exit handler's teardown, the lease sweeper)."""
    name = f"fo-{outcome.replace(' ', '')}".lower()
    sbx.set_faults({"clusters": {"fo-*": {"never_admit": True}}, "platform": {"finalizer_delay_s": 0.2}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", raycluster(name, workers=0, cpu="100m",
                                                                                            memory="256Mi"))
    dash = Dashboard()
    try:
        if outcome in ("SUCCEEDED", "FAILED"):
            dash.job("j", outcome, "line one\n", message="exit code 3" if outcome == "FAILED" else "")
        elif outcome == "timed out":
            dash.job("j", "RUNNING", "still going\n")
        elif outcome == "unreachable":
            dash.refuse()
        elif outcome == "proxy 403":
            dash.answer = (403, "text/plain", "Forbidden")
        elif outcome == "login page":
            dash.answer = (200, "text/html", "<html><title>Log in with OpenShift</title></html>")
        log_path = tmp_path / "job.log"
        kwargs = dict(cluster_name=name, namespace="sandbox", timeout=1 if outcome == "timed out" else 60,
                      max_poll_seconds=0.2, outage_tolerance_seconds=1.5)
        if raises is None:
            assert tasks.follow(dash.url, "j", str(log_path), **kwargs).status == "SUCCEEDED"
        else:
            with pytest.raises(raises):
                tasks.follow(dash.url, "j", str(log_path), **kwargs)
        if outcome == "timed out":
            assert dash.seen("POST", "/j/stop") and dash.jobs["j"]["status"] == "STOPPED"
    finally:
        dash.close()
    left = [rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]]
    assert (name not in left) == deleted, (outcome, left)
    assert log_path.exists()
    out = capsys.readouterr().out
    if not deleted:
        assert f"leaving RayCluster {name}: Ray job j may still be running" in out


def test_an_unreachable_kubernetes_api_is_ridden_out_then_left_to_teardown(box, tmp_path, monkeypatch, capsys):
    """The job is over, but the API refuses connections: follow keeps trying for
    outage_tolerance_seconds (saying so), then leaves the deletion to the exit handler's
    teardown; the job's result stands."""
    import socket

    import yaml

    from kfp_ray import kube

    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = yaml.safe_load(open(box.info["kubeconfig_pipeline_runner"]))
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    kube.api_client.cache_clear()
    dash = Dashboard()
    dash.job("j", "SUCCEEDED", "done\n")
    try:
        result = tasks.follow(dash.url, "j", str(tmp_path / "job.log"), cluster_name="fo-noapi", namespace="sandbox",
                              max_poll_seconds=0.2, outage_tolerance_seconds=2)
    finally:
        dash.close()
        kube.api_client.cache_clear()
    assert result.status == "SUCCEEDED"
    out = capsys.readouterr().out
    assert "the Kubernetes API unreachable since" in out and "outage_tolerance_seconds=2" in out
    assert "could not delete RayCluster fo-noapi (Unreachable: the Kubernetes API has been unreachable for" in out
    assert "longer than the 2s tolerated" in out
    assert "teardown will retry" in out
