"""Kueue's ResourceFlavors with node labels and taints, through the real kubernetes client: a
ClusterQueue of its own over the node pool's flavors (cpu-workers, gpu-a10g). Kueue picks the
flavor a pod set tolerates and may land on, writes its nodeLabels into the RayCluster's pod
templates when it starts it, and the scheduler then puts the pods on those nodes. The pods never
run Ray (the `image_pull` fault): only where they are bound matters here."""

from __future__ import annotations

import contextlib

from kubernetes import client as k8s

from kfp_ray_sandbox.nodepool import GPU_TOLERATION
from tests.helpers import eventually, raycluster

NS = "sandbox"
CQ, LQ = "flavor-test-queue", "flavor-test"
KUEUE = ("kueue.x-k8s.io", "v1beta1")


def _quota(flavor: str, gpus: int) -> dict:
    return {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "8Gi"},
                                          {"name": "pods", "nominalQuota": "4"},
                                          {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}


@contextlib.contextmanager
def pool_queue(co):
    """A ClusterQueue over both pool flavors (CPU workers first, no GPU quota there) and its
    LocalQueue in `sandbox`; both deleted afterwards (the seed queue is other tests')."""
    co.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": CQ},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "pods", "nvidia.com/gpu"],
            "flavors": [_quota("cpu-workers", 0), _quota("gpu-a10g", 1)]}]}})
    try:
        co.create_namespaced_custom_object(*KUEUE, NS, "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": LQ},
            "spec": {"clusterQueue": CQ}})
        try:
            yield
        finally:
            co.delete_namespaced_custom_object(*KUEUE, NS, "localqueues", LQ)
    finally:
        co.delete_cluster_custom_object(*KUEUE, "clusterqueues", CQ)


def _cluster(name: str, gpu_worker: bool, tolerate: bool) -> dict:
    """Head 500m/1Gi; with `gpu_worker` one worker with a GPU, tolerating the GPU taint if `tolerate`.
    Only the worker tolerates it: cpu-workers' label (node-role.kubernetes.io/worker) is on the GPU
    node too, so a tolerating head could land there, as on OpenShift."""
    body = raycluster(name, workers=1 if gpu_worker else 0, cpu="500m", memory="1Gi", queue=LQ, gpu=1 if gpu_worker else 0)
    for kind in ("requests", "limits"):  # the head asks for no GPU
        body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"][kind].pop("nvidia.com/gpu", None)
    if tolerate:
        body["spec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    return body


def _workload(co, cluster: str):
    return next((w for w in co.list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]
                 if w["metadata"]["ownerReferences"][0]["name"] == cluster), None)


def _cond(obj, type_):
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def _bound(core, cluster: str, count: int):
    pods = [p for p in core.list_namespaced_pod(NS, label_selector=f"ray.io/cluster={cluster}").items if p.spec.node_name]
    return {p.metadata.labels["ray.io/node-type"]: p for p in pods} if len(pods) == count else None


def test_pool_flavors_steer_ray_pods_to_their_nodes(box, sbx):
    api = sbx.api_client()
    co, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
    sbx.set_faults({"clusters": {"flavor-*": {"image_pull": True}}})
    with pool_queue(co):
        for name, gpu, tolerate in (("flavor-gpu", True, True), ("flavor-cpu", False, False),
                                    ("flavor-untolerated", True, False)):
            co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", _cluster(name, gpu, tolerate))

        # a GPU worker that tolerates the taint: gpu-a10g for its pod set, the head on a CPU worker
        wl = eventually(lambda: (w := _workload(co, "flavor-gpu")) and (_cond(w, "Admitted") or {}).get("status") == "True"
                        and w, 60, what="flavor-gpu's Workload to be admitted")
        assert {psa["name"]: set(psa["flavors"].values()) for psa in wl["status"]["admission"]["podSetAssignments"]} == \
            {"head": {"cpu-workers"}, "small-group": {"gpu-a10g"}}
        pods = eventually(lambda: _bound(core, "flavor-gpu", 2), 60, what="flavor-gpu's pods to be bound")
        assert pods["worker"].spec.node_name == "gpu-worker-0"
        assert pods["worker"].spec.node_selector == {"nvidia.com/gpu.present": "true"}
        assert pods["head"].spec.node_name in ("worker-0", "worker-1")
        assert pods["head"].spec.node_selector == {"node-role.kubernetes.io/worker": ""}
        if box.platform.kueue == "v0.12.10":  # 3.3's Kueue also labels each pod set's template with its name
            assert pods["worker"].metadata.labels["kueue.x-k8s.io/podset"] == "small-group"
        rc = co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "flavor-gpu")
        assert rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}

        # CPU only: cpu-workers, on a worker node
        pods = eventually(lambda: _bound(core, "flavor-cpu", 1), 60, what="flavor-cpu's head to be bound")
        assert pods["head"].spec.node_name in ("worker-0", "worker-1")
        assert pods["head"].spec.node_selector == {"node-role.kubernetes.io/worker": ""}

        # a GPU worker that does not tolerate gpu-a10g's taint fits no flavor: it waits, with Kueue's reasons
        message = ("couldn't assign flavors to pod set small-group: insufficient quota for nvidia.com/gpu in flavor "
                   "cpu-workers, request > maximum capacity (1 > 0), untolerated taint {nvidia.com/gpu true NoSchedule "
                   "<nil>} in flavor gpu-a10g")
        held = eventually(lambda: (c := _cond(_workload(co, "flavor-untolerated"), "QuotaReserved")) and c["status"] == "False"
                          and c, 60, what="flavor-untolerated's Workload to say why it waits")
        assert (held["reason"], held["message"]) == ("Pending", message)
        rc = co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "flavor-untolerated")
        assert rc["spec"]["suspend"] is True and "nodeSelector" not in rc["spec"]["headGroupSpec"]["template"]["spec"]
        assert core.list_namespaced_pod(NS, label_selector="ray.io/cluster=flavor-untolerated").items == []
