"""The order of states a watcher of a Kueue-managed RayJob sees (kueue.py ORDER), recorded through a
real watch of the kubernetes client: with free quota no Suspending/Suspended (the CodeFlare SDK
0.34's wait_until_job_running reads Suspended as a failure), with no quota KubeRay's walk to
Suspended and back through New once admitted."""

from __future__ import annotations

import contextlib
import threading

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from tests.helpers import eventually, on_platforms

NS = "sandbox"
RAY = ("ray.io", "v1", NS)
KUEUE = "kueue.x-k8s.io"


class StateRecorder:
    """Every jobDeploymentStatus of one RayJob, as a watch from before its creation delivers it."""

    def __init__(self, api_client, name: str):
        self.co, self.name = k8s.CustomObjectsApi(api_client), name
        self.states: list[str] = []
        self._watch = watch.Watch()
        rv = self.co.list_namespaced_custom_object(*RAY, "rayjobs")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _run(self, rv: str) -> None:
        for event in self._watch.stream(self.co.list_namespaced_custom_object, *RAY, "rayjobs", resource_version=rv,
                                        field_selector=f"metadata.name={self.name}", timeout_seconds=600):
            if event["type"] in ("ADDED", "MODIFIED"):
                state = (event["object"].get("status") or {}).get("jobDeploymentStatus", "")
                if not self.states or self.states[-1] != state:
                    self.states.append(state)

    def seen(self) -> list[str]:
        return list(self.states)

    def stop(self) -> None:
        self._watch.stop()


@contextlib.contextmanager
def recording(api_client, name: str):
    rec = StateRecorder(api_client, name)
    try:
        yield rec
    finally:
        rec.stop()


@on_platforms()
def test_a_full_queue_is_seen_suspended_then_new_once_admitted(box, sbx):
    """No quota (the fault never_admit holds the Workload; image_pull keeps Ray from starting):
    "" -> Initializing -> Suspending -> Suspended; admitted: "" -> Initializing."""
    from tests.sandbox.test_rayjob import rayjob

    runner = k8s.CustomObjectsApi(sbx.api_client(as_pipeline_runner=True))
    sbx.patch_faults({"clusters": {"rj-order-full*": {"never_admit": True, "image_pull": True}}})
    with recording(sbx.api_client(), "rj-order-full") as rec:
        runner.create_namespaced_custom_object(*RAY, "rayjobs", rayjob("rj-order-full"))
        eventually(lambda: rec.seen()[-1:] == ["Suspended"], 60, what="the RayJob to be Suspended")
        sbx.patch_faults({"clusters": {"rj-order-full*": {"never_admit": None}}})
        eventually(lambda: len(rec.seen()) >= 6, 60, what="the RayJob to start again once admitted")
        assert rec.seen()[:6] == ["", "Initializing", "Suspending", "Suspended", "", "Initializing"]


@pytest.fixture
def free_queue(sbx):
    """A LocalQueue of its own with ample quota, so no other test's cluster holds it."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    resources = [("cpu", "64"), ("memory", "256Gi"), ("pods", "50")]
    co.create_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "order-cq"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": [r for r, _ in resources],
            "flavors": [{"name": "default-flavor", "resources": [{"name": r, "nominalQuota": q} for r, q in resources]}]}]}})
    co.create_namespaced_custom_object(KUEUE, "v1beta1", NS, "localqueues", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "LocalQueue", "metadata": {"name": "order-lq", "namespace": NS},
        "spec": {"clusterQueue": "order-cq"}})
    yield "order-lq"
    co.delete_namespaced_custom_object(KUEUE, "v1beta1", NS, "localqueues", "order-lq")
    co.delete_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", "order-cq")


@pytest.mark.ray
def test_sdk_rayjob_with_free_quota_runs_without_being_suspended(box, sbx, sdk_auth, free_queue, monkeypatch):
    """The CodeFlare SDK 0.34's RayJob, waited for as its client waits (Suspended is a failure there)."""
    from codeflare_sdk import ManagedClusterConfig, RayJob
    from kubernetes.config import kube_config

    # the SDK's vendored RayjobApi loads the default kubeconfig ($KUBECONFIG as the client read it at import)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", box.info["kubeconfig"])
    config = ManagedClusterConfig(head_cpu_requests=1, head_cpu_limits=1, head_memory_requests=2, head_memory_limits=2,
                                  num_workers=0)
    job = RayJob(job_name="sdk-order", entrypoint="python -c \"import sys; print('ordered')\"", cluster_config=config,
                 namespace=NS, local_queue=free_queue)
    with recording(sbx.api_client(), "sdk-order") as rec:
        job.submit()
        assert job._api.wait_until_job_running("sdk-order", NS, timeout=240, delay_between_attempts=1), rec.seen()
        eventually(lambda: rec.seen()[-1:] in (["Complete"], ["Failed"]), 180, what="the RayJob to finish")
        co, v1 = k8s.CustomObjectsApi(sbx.api_client()), k8s.CoreV1Api(sbx.api_client())
        status = co.get_namespaced_custom_object(*RAY, "rayjobs", "sdk-order")["status"]
        logs = [v1.read_namespaced_pod_log(p.metadata.name, NS)
                for p in v1.list_namespaced_pod(NS, label_selector="job-name=sdk-order").items]
        assert rec.seen() == ["", "Initializing", "Running", "Complete"], (status, logs)
        assert any("ordered" in log for log in logs)
    job.delete()
