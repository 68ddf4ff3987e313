"""KubeRay's RayCluster controller, plus what RHOAI's CodeFlare operator adds to it.

For each RayCluster:
- CodeFlare operator: the CA secret `<name>-ca-secret-<suffix>` (labelled
  ray.openshift.ai/cluster-name) and the dashboard Route `ray-dashboard-<name>`, at once,
  suspended or not (so `Cluster.apply()` finds the secret while the cluster is queued).
- KubeRay: while suspended, no pods and state `suspended`; otherwise the head Service
  `<name>-head-svc`, a head pod and the worker pods, and status as KubeRay writes it
  (state `ready` once every pod is ready, endpoints, head IPs, replica counts, conditions).
- Deleting the RayCluster deletes all of that through ownerReferences.

Worker pods beyond `max_real_workers` per cluster are "folded": their pods exist and run,
but their logical resources are added to the real worker nodes, so Ray sees the whole
cluster's CPUs/GPUs without starting a Ray process per replica on a 2-core machine.
"""

from __future__ import annotations

from fractions import Fraction

from .. import quantity
from ..apiserver.store import now_rfc3339, random_suffix
from ..certs import ca_secret_data
from ..raynode import free_port
from .base import Controller, owner_ref, set_condition
from .kueue import pod_requests

SANDBOX = "sandbox.kfp-ray.io"
POD_IP = f"{SANDBOX}/pod-ip"
FOLD = f"{SANDBOX}/fold"  # "0": folded into another node; "k": runs k replicas' resources
HEAD_PORTS = {"gcs-server": "port", "dashboard": "dashboard-port", "client": "ray-client-server-port",
              "metrics": "metrics-export-port"}


def cluster_labels(name: str, node_type: str, group: str) -> dict:
    return {"ray.io/cluster": name, "ray.io/node-type": node_type, "ray.io/group": group,
            "ray.io/is-ray-node": "yes", "ray.io/identifier": f"{name}-{node_type}",
            "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


class KubeRayController(Controller):
    name = "kuberay"

    def __init__(self, store, registry, network, max_real_workers: int = 2):
        super().__init__(store, registry)
        self.network = network
        self.max_real_workers = max_real_workers
        self.rc_t = self.rt("ray.io", "rayclusters")
        self.pod_t = self.rt("", "pods")
        self.svc_t = self.rt("", "services")
        self.secret_t = self.rt("", "secrets")
        self.route_t = self.rt("route.openshift.io", "routes")
        self.net: dict[str, dict] = {}  # cluster uid -> {"ip": ..., "ports": {...}}

    def reconcile(self) -> None:
        clusters, _ = self.store.list(self.rc_t)
        live = set()
        for rc in clusters:
            live.add(rc["metadata"]["uid"])
            if not rc["metadata"].get("deletionTimestamp"):
                self._reconcile(rc)
        for uid in list(self.net):
            if uid not in live:
                del self.net[uid]

    def _network(self, rc: dict) -> dict:
        uid = rc["metadata"]["uid"]
        if uid not in self.net:
            self.net[uid] = {"ip": self.network.allocate(),
                             "ports": {name: free_port() for name in HEAD_PORTS}}
        return self.net[uid]

    def _owned(self, rt, rc: dict) -> list[dict]:
        items, _ = self.store.list(rt, rc["metadata"]["namespace"])
        uid = rc["metadata"]["uid"]
        return [o for o in items if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]

    def _reconcile(self, rc: dict) -> None:
        ns = rc["metadata"]["namespace"]
        net = self._network(rc)
        self._ensure_ca_secret(rc)
        self._ensure_route(rc, net)
        pods = self._owned(self.pod_t, rc)
        if (rc.get("spec") or {}).get("suspend"):
            for pod in pods:
                self._delete(self.pod_t, ns, pod["metadata"]["name"])
            self._write_status(rc, {"state": "suspended", "conditions": self._conditions(rc, suspended=True)})
            return
        self._ensure_service(rc, net)
        head = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if not head:
            head = [self._create_pod(rc, "head", "headgroup", (rc["spec"].get("headGroupSpec") or {}).get("template") or {},
                                     {POD_IP: net["ip"], FOLD: "1"})]
        workers = []
        for group in rc["spec"].get("workerGroupSpecs") or []:
            gname = group.get("groupName", "workers")
            want = self._replicas(group)
            have = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
                    and p["metadata"]["labels"].get("ray.io/group") == gname]
            for extra in have[want:]:
                self._delete(self.pod_t, ns, extra["metadata"]["name"])
            have = have[:want]
            real = min(want, self.max_real_workers)
            for i in range(len(have), want):
                fold = 0 if i >= real else len(range(i, want, real))
                have.append(self._create_pod(rc, "worker", gname, group.get("template") or {}, {FOLD: str(fold)}))
            workers += have
        self._write_status(rc, self._status(rc, net, head[0], workers))

    @staticmethod
    def _replicas(group: dict) -> int:
        want = group.get("replicas", group.get("minReplicas", 0)) or 0
        lo, hi = group.get("minReplicas", 0) or 0, group.get("maxReplicas")
        want = max(want, lo)
        return min(want, hi) if hi is not None else want

    def _delete(self, rt, ns, name) -> None:
        try:
            self.store.delete(rt, ns, name)
        except Exception:
            pass

    # --- owned objects ---------------------------------------------------------
    def _ensure_ca_secret(self, rc: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        if any(s["metadata"]["name"].startswith(f"{name}-ca-secret-") for s in self._owned(self.secret_t, rc)):
            return
        self.store.create(self.secret_t, {
            "metadata": {"name": f"{name}-ca-secret-{random_suffix()}", "namespace": ns,
                         "labels": {"ray.openshift.ai/cluster-name": name},
                         "ownerReferences": [owner_ref(rc)]},
            "type": "Opaque", "data": ca_secret_data()})

    def _ensure_route(self, rc: dict, net: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        if self.store.find(self.route_t, ns, f"ray-dashboard-{name}"):
            return
        self.store.create(self.route_t, {
            "metadata": {"name": f"ray-dashboard-{name}", "namespace": ns,
                         "labels": {"ray.io/cluster-name": name, "ray.io/cluster-namespace": ns},
                         "ownerReferences": [owner_ref(rc)]},
            "spec": {"host": f"{net['ip']}:{net['ports']['dashboard']}",
                     "to": {"kind": "Service", "name": f"{name}-head-svc"}, "port": {"targetPort": "dashboard"}}})

    def _ensure_service(self, rc: dict, net: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        if self.store.find(self.svc_t, ns, f"{name}-head-svc"):
            return
        self.store.create(self.svc_t, {
            "metadata": {"name": f"{name}-head-svc", "namespace": ns,
                         "labels": {"ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/identifier": f"{name}-head",
                                    "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"},
                         "ownerReferences": [owner_ref(rc)]},
            "spec": {"type": "ClusterIP", "clusterIP": net["ip"], "clusterIPs": [net["ip"]],
                     "selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                     "ports": [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP", "appProtocol": "tcp"}
                               for port_name, port in sorted(net["ports"].items())]}})

    def _create_pod(self, rc: dict, node_type: str, group: str, template: dict, annotations: dict) -> dict:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        meta = template.get("metadata") or {}
        prefix = f"{name}-head-" if node_type == "head" else f"{name}-{group}-worker-"
        spec = dict(template.get("spec") or {})
        spec.setdefault("restartPolicy", "Always")
        pod = {"metadata": {"name": prefix + random_suffix(), "namespace": ns,
                            "labels": {**(meta.get("labels") or {}), **cluster_labels(name, node_type, group)},
                            "annotations": {**(meta.get("annotations") or {}), **annotations},
                            "ownerReferences": [owner_ref(rc)]},
               "spec": spec, "status": {"phase": "Pending", "qosClass": "Burstable"}}
        return self.store.create(self.pod_t, pod)

    # --- status ----------------------------------------------------------------
    def _conditions(self, rc: dict, suspended: bool = False, head_ready: bool = False, all_ready: bool = False) -> list:
        conds = (rc.get("status") or {}).get("conditions") or []
        gen = rc["metadata"].get("generation")
        conds = set_condition(conds, "RayClusterSuspended", "True" if suspended else "False",
                              "RayClusterSuspended" if suspended else "RayClusterNotSuspended",
                              "RayCluster is suspended" if suspended else "", gen)
        if suspended:
            return conds
        conds = set_condition(conds, "HeadPodReady", "True" if head_ready else "False",
                              "HeadPodRunningAndReady" if head_ready else "HeadPodNotReady",
                              "" if head_ready else "Head pod is not ready yet", gen)
        provisioned = all_ready or any(c["type"] == "RayClusterProvisioned" and c["status"] == "True" for c in conds)
        return set_condition(conds, "RayClusterProvisioned", "True" if provisioned else "False",
                             "AllPodRunningAndReadyFirstTime" if provisioned else "RayClusterPodsProvisioning",
                             "All Ray Pods are ready for the first time" if provisioned
                             else "RayCluster Pods are being provisioned for first time", gen)

    def _status(self, rc: dict, net: dict, head: dict, workers: list[dict]) -> dict:
        name = rc["metadata"]["name"]
        head_ready = is_ready(head)
        ready_workers = sum(1 for w in workers if is_ready(w))
        all_ready = head_ready and ready_workers == len(workers)
        totals: dict[str, Fraction] = {}
        groups = [(1, (rc["spec"].get("headGroupSpec") or {}).get("template"))] + [
            (self._replicas(g), g.get("template")) for g in rc["spec"].get("workerGroupSpecs") or []]
        for count, template in groups:
            for k, v in pod_requests(template).items():
                totals[k] = totals.get(k, Fraction(0)) + v * count
        was_ready = (rc.get("status") or {}).get("state") == "ready"
        status = {
            "desiredWorkerReplicas": len(workers), "readyWorkerReplicas": ready_workers,
            "availableWorkerReplicas": ready_workers,
            "minWorkerReplicas": sum((g.get("minReplicas") or 0) for g in rc["spec"].get("workerGroupSpecs") or []),
            "maxWorkerReplicas": sum((g.get("maxReplicas") or 0) for g in rc["spec"].get("workerGroupSpecs") or []),
            "desiredCPU": quantity.fmt("cpu", totals.get("cpu", Fraction(0))),
            "desiredMemory": quantity.fmt("memory", totals.get("memory", Fraction(0))),
            "desiredGPU": quantity.fmt("gpu", totals.get("nvidia.com/gpu", Fraction(0))),
            "desiredTPU": quantity.fmt("tpu", totals.get("google.com/tpu", Fraction(0))),
            "endpoints": {k: str(v) for k, v in net["ports"].items()},
            "head": {"podIP": (head.get("status") or {}).get("podIP", ""), "podName": head["metadata"]["name"],
                     "serviceIP": net["ip"], "serviceName": f"{name}-head-svc"},
            "observedGeneration": rc["metadata"].get("generation"),
            "conditions": self._conditions(rc, head_ready=head_ready, all_ready=all_ready),
        }
        # KubeRay leaves `state` unset until every pod is ready, and keeps `ready` after.
        if all_ready or was_ready:
            status["state"] = "ready"
        return status

    def _write_status(self, rc: dict, status: dict) -> None:
        old = rc.get("status") or {}
        if old == {**status, **{k: old[k] for k in ("stateTransitionTimes", "lastUpdateTime") if k in old}}:
            return

        def fn(obj):
            new = dict(status)
            times = dict((obj.get("status") or {}).get("stateTransitionTimes") or {})
            if new.get("state") and new["state"] != (obj.get("status") or {}).get("state"):
                times[new["state"]] = now_rfc3339()
            if times:
                new["stateTransitionTimes"] = times
            new["lastUpdateTime"] = now_rfc3339()
            obj["status"] = new
        self.store.mutate(self.rc_t, rc["metadata"]["namespace"], rc["metadata"]["name"], fn, subresource="status")
