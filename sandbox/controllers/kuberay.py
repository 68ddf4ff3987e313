"""KubeRay's RayCluster controller, as ray-project/kuberay v1.4.2 runs it
(ray-operator/controllers/ray/raycluster_controller.go, common/service.go, common/pod.go,
utils/util.go, utils/constant.go; feature gate RayClusterStatusConditions on, its default).

Each pass, for each RayCluster (after the CodeFlare operator's part, codeflare.py):
- a RayCluster being deleted is ignored ("RayCluster is being deleted, just ignore");
- reconcileHeadService: `<name>-head-svc`, even while suspended, with KubeRay's named ports
  (the head container's ports, else client 10001, dashboard 8265, gcs-server 6379, serve 8000;
  metrics 8080 always). KubeRay 1.4 makes it headless unless ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE
  is true, and RHOAI sets nothing, so on RHOAI it is headless; here it is a ClusterIP Service
  by default (`head_cluster_ip=True`): its own loopback address, served by the kube-proxy
  (sandbox/proxy.py), publishing not-ready addresses as the headless one does. With
  `head_cluster_ip=False` it is headless as on RHOAI (clusterIP None).
- reconcilePods: while suspending, delete every pod; suspended, nothing; else one head pod
  and the workers each group wants (deleting surplus, unhealthy and workersToDelete pods).
  A failed create emits FailedToCreateHeadPod / FailedToCreateWorkerPod and ends the pass
  with a ReplicaFailure error (reason FailedCreateHeadPod / FailedCreateWorkerPod).
- calculateStatus: ReplicaFailure, replica counts, desired resources, state `ready` once
  every pod is running and ready with no reconcile error (kept afterwards), `suspended` once
  a suspended cluster has no pods (also kept until `ready`), HeadPodReady,
  RayClusterProvisioned, RayClusterSuspending / RayClusterSuspended, endpoints, head info,
  stateTransitionTimes; written only when it changed as KubeRay's inconsistency check says.
- A failing cluster is retried with controller-runtime's per-item exponential backoff
  (5 ms doubling, at most 1000 s), and at once when it or its pods or Service change.

Worker pods beyond `max_real_workers` per cluster are "folded": their pods exist and run,
but their logical resources are added to the real worker nodes, so Ray sees the whole
cluster's CPUs/GPUs without starting a Ray process per replica on a 2-core machine.
"""

from __future__ import annotations

import copy
import time
from fractions import Fraction

from .. import quantity
from ..apiserver.errors import ApiError
from ..apiserver.store import now_rfc3339
from .base import Controller, log, owner_ref, record_event
from .kubelet import FOLD
from .rayplatform import RayPlatform

RECORDER = "raycluster-controller"
MAX_INT32 = 2147483647
DEFAULT_PORTS = {"client": 10001, "gcs-server": 6379, "dashboard": 8265, "metrics": 8080, "serve": 8000}
BACKOFF_BASE, BACKOFF_MAX = 0.005, 1000.0  # controller-runtime's default item rate limiter


class ReconcileError(Exception):
    """A reconcile step failed; KubeRay logs it and requeues."""


class ReplicaFailure(ReconcileError):
    """errors.Join(ErrFailedCreateHeadPod, err): its message is "<reason>\\n<err>"."""

    def __init__(self, reason: str, cause: str):
        super().__init__(f"{reason}\n{cause}")
        self.reason = reason


def cluster_labels(name: str, node_type: str, group: str) -> dict:
    return {"ray.io/cluster": name, "ray.io/node-type": node_type, "ray.io/group": group,
            "ray.io/is-ray-node": "yes", "ray.io/identifier": f"{name}-{node_type}",
            "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}


def is_ready(pod: dict) -> bool:
    """utils.IsRunningAndReady."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])


def all_running(pods: list[dict]) -> bool:
    """utils.CheckAllPodsRunning: at least one pod, all Running, none with Ready != True."""
    if not pods:
        return False
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return False
        if any(c["type"] == "Ready" and c["status"] != "True" for c in status.get("conditions") or []):
            return False
    return True


def suspend_status(rc: dict) -> str:
    """utils.FindRayClusterSuspendStatus."""
    for c in (rc.get("status") or {}).get("conditions") or []:
        if c["type"] in ("RayClusterSuspending", "RayClusterSuspended") and c["status"] == "True":
            return c["type"]
    return ""


def set_condition(conds: list, type_: str, status: str, reason: str, message: str = "") -> None:
    """meta.SetStatusCondition: update in place (lastTransitionTime only on a status change)."""
    for c in conds:
        if c["type"] == type_:
            if c["status"] != status:
                c["status"], c["lastTransitionTime"] = status, now_rfc3339()
            c["reason"], c["message"] = reason, message
            return
    conds.append({"type": type_, "status": status, "lastTransitionTime": now_rfc3339(), "reason": reason,
                  "message": message})


def desired_replicas(group: dict) -> int:
    """utils.GetWorkerGroupDesiredReplicas (times numOfHosts)."""
    if group.get("suspend"):
        return 0
    lo, hi = group.get("minReplicas", 0) or 0, group.get("maxReplicas", MAX_INT32)
    want = group.get("replicas")
    if lo > hi:
        n = hi
    elif want is None or want < lo:
        n = lo
    elif want > hi:
        n = hi
    else:
        n = want
    return n * max(1, group.get("numOfHosts", 1) or 1)


def pod_resources(spec: dict) -> dict[str, Fraction]:
    """utils.CalculatePodResource: containers' requests, limits where a request is missing."""
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            total[k] = total.get(k, Fraction(0)) + quantity.parse(v)
    return total


def service_ports(rc: dict) -> dict[str, int]:
    """common.getServicePorts: the head container's ports, else the defaults; metrics always."""
    c0 = ((((rc.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [{}]
    ports = {p.get("name") or f"{p['containerPort']}-port": p["containerPort"] for p in c0[0].get("ports") or []}
    if not ports:
        ports = dict(DEFAULT_PORTS)
    ports.setdefault("metrics", DEFAULT_PORTS["metrics"])
    return ports


def head_service_name(rc: dict) -> str:
    custom = (((rc.get("spec") or {}).get("headGroupSpec") or {}).get("headService") or {}).get("metadata") or {}
    return custom.get("name") or f"{rc['metadata']['name']}-head-svc"


def _convert_params(params: dict) -> str:
    """common.convertParamMap (sorted, as the operator's logs show them)."""
    out = ""
    for option, arg in sorted(params.items()):
        arg = str(arg)
        if arg.lower() in ("true", "false") and option not in ("log-color", "include-dashboard"):
            if arg.lower() == "true":
                out += f" --{option} "
        else:
            out += f" --{option}={arg} "
    return out


def ray_start_command(node_type: str, params: dict, resources: dict) -> str:
    """common.generateRayStartCommand after setMissingRayStartParams."""
    params = {k: str(v) for k, v in (params or {}).items()}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if "num-cpus" not in params:
        cpu = limits.get("cpu") or requests.get("cpu")
        if cpu is not None and quantity.parse(cpu) != 0:
            params["num-cpus"] = str(int(-(-quantity.parse(cpu) // 1)))
    if "memory" not in params and limits.get("memory") is not None:
        params["memory"] = str(int(quantity.parse(limits["memory"])))
    if "num-gpus" not in params and limits.get("nvidia.com/gpu") is not None:
        params["num-gpus"] = str(int(quantity.parse(limits["nvidia.com/gpu"])))
    head = node_type == "head"
    return ("ray start --head " if head else "ray start ") + _convert_params(params)


class KubeRayController(Controller):
    name = "kuberay"

    def __init__(self, store, registry, platform=None, max_real_workers: int = 2, head_cluster_ip: bool = True):
        """`platform`: what the RHOAI release adds around KubeRay's own pass: the CodeFlare
        operator (codeflare.py, 2.x) or Red Hat's KubeRay controllers (kuberay_rhoai.py, 3.x);
        None: upstream KubeRay alone."""
        super().__init__(store, registry)
        self.platform = platform or RayPlatform(store, registry, faults=None)
        self.max_real_workers = max_real_workers
        self.head_cluster_ip = head_cluster_ip
        self.rc_t = self.rt("ray.io", "rayclusters")
        self.pod_t = self.rt("", "pods")
        self.svc_t = self.rt("", "services")
        self._retry: dict[str, tuple[int, float, tuple]] = {}  # uid -> (failures, next try, fingerprint)

    def _event(self, rc: dict, type_: str, reason: str, message: str) -> None:
        try:
            record_event(self.store, self.registry, rc, type_, reason, message, RECORDER)
        except ApiError:
            pass  # the recorder drops what it cannot write (e.g. a terminating namespace)

    def reconcile(self) -> None:
        clusters, _ = self.store.list(self.rc_t)
        live = {rc["metadata"]["uid"] for rc in clusters}
        for rc in clusters:
            try:
                self._reconcile_cluster(rc)
            except Exception:  # one cluster never stops the others
                log.exception("kuberay: RayCluster %s/%s", rc["metadata"]["namespace"], rc["metadata"]["name"])
        for uid in [u for u in self._retry if u not in live]:
            del self._retry[uid]
        self.platform.forget(live)

    # --- one cluster -------------------------------------------------------------
    def _pods(self, rc: dict, node_type: str | None = None, group: str | None = None) -> list[dict]:
        name = rc["metadata"]["name"]

        def match(p):
            labels = p["metadata"].get("labels") or {}
            return labels.get("ray.io/cluster") == name and (node_type is None or labels.get("ray.io/node-type") == node_type) \
                and (group is None or labels.get("ray.io/group") == group)
        return self.store.list(self.pod_t, rc["metadata"]["namespace"], match)[0]

    def _head_services(self, rc: dict) -> list[dict]:
        name = rc["metadata"]["name"]
        return self.store.list(self.svc_t, rc["metadata"]["namespace"], lambda s: (s["metadata"].get("labels") or {}).get(
            "ray.io/cluster") == name and (s["metadata"].get("labels") or {}).get("ray.io/node-type") == "head")[0]

    def _fingerprint(self, rc: dict) -> tuple:
        return (rc["metadata"]["resourceVersion"], tuple(sorted(p["metadata"]["resourceVersion"] for p in self._pods(rc))),
                tuple(s["metadata"]["resourceVersion"] for s in self._head_services(rc)))

    def _reconcile_cluster(self, rc: dict) -> None:
        rc = self.platform.reconcile(rc)
        if rc is None:
            return
        if rc["metadata"].get("deletionTimestamp"):
            return
        uid = rc["metadata"]["uid"]
        fingerprint = self._fingerprint(rc)
        failures, next_try, seen = self._retry.get(uid, (0, 0.0, ()))
        if failures and seen == fingerprint and time.monotonic() < next_try:
            return  # backing off, and nothing it watches changed
        err = None
        try:
            self._reconcile_head_service(rc)
            self._reconcile_pods(rc)
        except ReconcileError as exc:
            err = exc
        status = self._calculate_status(rc, err)
        if status is not None:
            self._update_status(rc, status)
        if err is None:
            self._retry.pop(uid, None)
        else:
            delay = min(BACKOFF_BASE * 2 ** failures, BACKOFF_MAX)
            self._retry[uid] = (failures + 1, time.monotonic() + delay, fingerprint)

    # --- head Service ------------------------------------------------------------
    def _reconcile_head_service(self, rc: dict) -> None:
        services = self._head_services(rc)
        if len(services) == 1:
            return
        if len(services) > 1:
            raise ReconcileError(f"{len(services)} head service found")
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        head = (rc["spec"].get("headGroupSpec") or {})
        labels = {"ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/identifier": f"{name}-head",
                  "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
        app = ((head.get("template") or {}).get("metadata") or {}).get("labels", {}).get("app.kubernetes.io/name")
        if app:
            labels["app.kubernetes.io/name"] = app
        spec = {"selector": dict(labels), "type": head.get("serviceType") or "ClusterIP",
                "ports": [{"name": n, "port": p, "appProtocol": "tcp"} for n, p in sorted(service_ports(rc).items())]}
        if spec["type"] == "ClusterIP":
            # KubeRay 1.4's default (RHOAI's too) is headless; the sandbox's stand-in is a ClusterIP
            # Service, which, like the headless one, also reaches a head that is not ready.
            spec["publishNotReadyAddresses"] = True
            if not self.head_cluster_ip:
                spec["clusterIP"] = "None"
        svc = {"metadata": {"name": head_service_name(rc), "namespace": ns, "labels": labels,
                            "annotations": dict(rc["spec"].get("headServiceAnnotations") or {}),
                            "ownerReferences": [owner_ref(rc)]}, "spec": spec}
        try:
            self.store.create(self.svc_t, svc)
        except ApiError as exc:
            self._event(rc, "Warning", "FailedToCreateService", f"Failed creating service {ns}/{svc['metadata']['name']}, {exc.message}")
            raise ReconcileError(exc.message) from None
        self._event(rc, "Normal", "CreatedService", f"Created service {ns}/{svc['metadata']['name']}")

    # --- pods --------------------------------------------------------------------
    def _delete_pod(self, rc: dict, pod: dict) -> bool:
        try:
            self.store.delete(self.pod_t, pod["metadata"]["namespace"], pod["metadata"]["name"])
            return True
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise ReconcileError(exc.message) from None

    def _reconcile_pods(self, rc: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        suspending = suspend_status(rc)
        if suspending == "RayClusterSuspending":
            doomed = [p for p in self._pods(rc) if not p["metadata"].get("deletionTimestamp")]
            for pod in doomed:
                self._delete_pod(rc, pod)
            if doomed:  # KubeRay says so on every reconcile while suspending; here once per deletion
                self._event(rc, "Normal", "DeletedPod", f"Deleted Pods for RayCluster {ns}/{name} due to suspension")
            return
        if suspending == "RayClusterSuspended" or rc["spec"].get("suspend"):
            return
        why = self.platform.pod_gate(rc, None)
        if why:
            raise ReconcileError(why)
        heads = self._pods(rc, "head")
        if len(heads) == 1:
            phase = (heads[0].get("status") or {}).get("phase")
            if phase in ("Failed", "Succeeded") and not heads[0]["metadata"].get("deletionTimestamp"):
                self._delete_pod(rc, heads[0])
                self._event(rc, "Normal", "DeletedHeadPod", f"Deleted head Pod {ns}/{heads[0]['metadata']['name']}; "
                            f"Pod status: {phase}; Pod restart policy: {heads[0]['spec'].get('restartPolicy')}")
                raise ReconcileError(f"The head Pod {heads[0]['metadata']['name']} status is {phase} which is a terminal state. "
                                     "KubeRay will delete the Pod and create new Pods in the next reconciliation if necessary.")
        elif not heads:
            self._create_pod(rc, "head", "headgroup", rc["spec"].get("headGroupSpec") or {}, 1)
        else:
            raise ReconcileError(f"{len(heads)} head pods found {[p['metadata']['name'] for p in heads]}. "
                                 "Please delete extra head pods")
        for group in rc["spec"].get("workerGroupSpecs") or []:
            self._reconcile_group(rc, group)

    def _reconcile_group(self, rc: dict, group: dict) -> None:
        ns = rc["metadata"]["namespace"]
        gname = group.get("groupName", "")
        pods = self._pods(rc, "worker", gname)
        if group.get("suspend"):
            for pod in pods:
                self._delete_pod(rc, pod)
            return
        unhealthy = [p for p in pods if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded")
                     and not p["metadata"].get("deletionTimestamp")]
        for pod in unhealthy:
            self._delete_pod(rc, pod)
            self._event(rc, "Normal", "DeletedWorkerPod", f"Deleted worker Pod {ns}/{pod['metadata']['name']}")
        if unhealthy:
            raise ReconcileError(f"delete {len(unhealthy)} unhealthy worker Pods")
        deleted = set()
        for victim in (group.get("scaleStrategy") or {}).get("workersToDelete") or []:
            pod = next((p for p in pods if p["metadata"]["name"] == victim), None)
            if pod is not None and self._delete_pod(rc, pod):
                deleted.add(victim)
                self._event(rc, "Normal", "DeletedWorkerPod", f"Deleted pod {ns}/{victim}")
        running = [p for p in pods if p["metadata"]["name"] not in deleted]
        want = desired_replicas(group)
        diff = want - len(running)
        real = min(want, self.max_real_workers)
        for k in range(diff):
            i = len(running) + k
            fold = 0 if i >= real else len(range(i, want, real))
            self._create_pod(rc, "worker", gname, group, fold)
        if diff < 0 and not rc["spec"].get("enableInTreeAutoscaling"):
            for pod in running[:-diff]:
                self._delete_pod(rc, pod)
                self._event(rc, "Normal", "DeletedWorkerPod", f"Deleted Pod {ns}/{pod['metadata']['name']}")

    def _build_pod(self, rc: dict, node_type: str, group_name: str, group: dict, fold: int) -> dict:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        template = copy.deepcopy(group.get("template") or {})
        meta = template.get("metadata") or {}
        spec = template.get("spec") or {}
        spec.setdefault("restartPolicy", "Always")
        prefix = f"{name[:50]}-head-" if node_type == "head" else f"{f'{name}-{group_name}'[:50]}-worker-"
        params = dict(group.get("rayStartParams") or {})
        if node_type == "head":
            params.setdefault("dashboard-host", "0.0.0.0")
        else:
            head_params = (rc["spec"].get("headGroupSpec") or {}).get("rayStartParams") or {}
            params.setdefault("address", f"{head_service_name(rc)}.{ns}.svc.cluster.local:{head_params.get('port', 6379)}")
        params.setdefault("metrics-export-port", "8080")
        params.setdefault("dashboard-agent-listen-port", "52365")
        params.setdefault("block", "true")
        containers = spec.get("containers") or [{}]
        ray = containers[0]
        existing = " ".join((ray.get("command") or []) + (ray.get("args") or []))
        if "ray start" not in existing:
            cmd = f"ulimit -n 65536; {ray_start_command(node_type, params, ray.get('resources') or {})}"
            ray["command"] = ["/bin/bash", "-c", "--"]
            ray["args"] = [f"{existing} && {cmd}" if existing else cmd]
        return {"metadata": {"generateName": prefix, "namespace": ns,
                             "labels": {**(meta.get("labels") or {}), **cluster_labels(name, node_type, group_name)},
                             "annotations": {**(meta.get("annotations") or {}), "ray.io/ft-enabled": "false",
                                             FOLD: str(fold)},
                             "ownerReferences": [owner_ref(rc)]},
                "spec": spec, "status": {"phase": "Pending"}}

    def _create_pod(self, rc: dict, node_type: str, group_name: str, group: dict, fold: int) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        why = self.platform.pod_gate(rc, node_type)
        if why == "WaitingForAuthentication":
            self._event(rc, "Normal", why, "Waiting for authentication resources to be ready before creating head pod")
            raise ReconcileError("waiting for authentication to be ready")
        pod = self._build_pod(rc, node_type, group_name, group, fold)
        self.platform.mutate_pod(rc, pod["spec"], node_type)
        try:
            made = self.store.create(self.pod_t, pod)
        except ApiError as exc:
            if node_type == "head":
                # The pod was built with generateName only, so the event's name is empty, as KubeRay's.
                self._event(rc, "Warning", "FailedToCreateHeadPod", f"Failed to create head Pod {ns}/, {exc.message}")
                raise ReplicaFailure("FailedCreateHeadPod", exc.message) from None
            self._event(rc, "Warning", "FailedToCreateWorkerPod",
                        f"Failed to create worker Pod for the cluster {ns}/{name}, {exc.message}")
            raise ReplicaFailure("FailedCreateWorkerPod", exc.message) from None
        if node_type == "head":
            self._event(rc, "Normal", "CreatedHeadPod", f"Created head Pod {ns}/{made['metadata']['name']}")
        else:
            self._event(rc, "Normal", "CreatedWorkerPod", f"Created worker Pod {ns}/{made['metadata']['name']}")

    # --- status ------------------------------------------------------------------
    def _calculate_status(self, rc: dict, err: Exception | None) -> dict | None:
        old = rc.get("status") or {}
        status = copy.deepcopy(old)
        conds = status.setdefault("conditions", [])
        if isinstance(err, ReplicaFailure):
            set_condition(conds, "ReplicaFailure", "True", err.reason, str(err))
        elif err is None:
            conds[:] = [c for c in conds if c["type"] != "ReplicaFailure"]
        spec = rc.get("spec") or {}
        groups = spec.get("workerGroupSpecs") or []
        status["observedGeneration"] = rc["metadata"].get("generation")
        pods = self._pods(rc)
        workers = [p for p in pods if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "worker"]
        counts = {
            "readyWorkerReplicas": sum(1 for p in workers if is_ready(p)),
            "availableWorkerReplicas": sum(1 for p in workers if (p.get("status") or {}).get("phase") == "Running"),
            "desiredWorkerReplicas": sum(desired_replicas(g) for g in groups),
            "minWorkerReplicas": sum((g.get("minReplicas", 0) or 0) * max(1, g.get("numOfHosts", 1) or 1)
                                     for g in groups if not g.get("suspend")),
            "maxWorkerReplicas": sum(min(g.get("maxReplicas", MAX_INT32), MAX_INT32) * max(1, g.get("numOfHosts", 1) or 1)
                                     for g in groups if not g.get("suspend")),
        }
        for k, v in counts.items():  # int32 with omitempty: zero is left out
            if v:
                status[k] = v
            else:
                status.pop(k, None)
        totals = pod_resources(((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {})
        for g in groups:
            if g.get("suspend"):
                continue
            per = pod_resources((g.get("template") or {}).get("spec") or {})
            n = (g.get("replicas") or 0) * max(1, g.get("numOfHosts", 1) or 1)
            for k, v in per.items():
                totals[k] = totals.get(k, Fraction(0)) + v * n
        status["desiredCPU"] = quantity.fmt("cpu", totals.get("cpu", Fraction(0)))
        status["desiredMemory"] = quantity.fmt("memory", totals.get("memory", Fraction(0)))
        status["desiredGPU"] = quantity.fmt("gpu", totals.get("nvidia.com/gpu", Fraction(0)))
        status["desiredTPU"] = quantity.fmt("tpu", totals.get("google.com/tpu", Fraction(0)))
        if err is None and len(pods) == counts["desiredWorkerReplicas"] + 1 and all_running(pods):
            status["state"] = "ready"
            status.pop("reason", None)
        heads = [p for p in pods if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "head"]
        if len(heads) > 1:
            return None  # "found multiple heads": calculateStatus fails, nothing is written
        head = heads[0] if heads else None
        if head is None:
            set_condition(conds, "HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found")
        else:
            ready = next((c for c in (head.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)
            if ready is None:
                set_condition(conds, "HeadPodReady", "False", "Unknown", "")
            else:
                reason = ready.get("reason") or ("HeadPodRunningAndReady" if ready["status"] == "True" else "Unknown")
                set_condition(conds, "HeadPodReady", ready["status"], reason, ready.get("message", ""))
        suspending = suspend_status({"status": status})
        provisioned = any(c["type"] == "RayClusterProvisioned" and c["status"] == "True" for c in conds)
        if not provisioned and suspending != "RayClusterSuspended":
            if all_running(pods):
                set_condition(conds, "RayClusterProvisioned", "True", "AllPodRunningAndReadyFirstTime",
                              "All Ray Pods are ready for the first time")
            else:
                set_condition(conds, "RayClusterProvisioned", "False", "RayClusterPodsProvisioning",
                              "RayCluster Pods are being provisioned for first time")
        suspend = bool(spec.get("suspend"))
        if suspending == "RayClusterSuspending":
            if not pods:
                set_condition(conds, "RayClusterProvisioned", "False", "RayClusterPodsProvisioning",
                              "RayCluster has been suspended")
                set_condition(conds, "RayClusterSuspending", "False", "RayClusterSuspending")
                set_condition(conds, "RayClusterSuspended", "True", "RayClusterSuspended")
        elif suspending == "RayClusterSuspended":
            if "suspend" in spec and not suspend:
                set_condition(conds, "RayClusterSuspended", "False", "RayClusterSuspended")
        else:
            set_condition(conds, "RayClusterSuspended", "False", "RayClusterSuspended")
            set_condition(conds, "RayClusterSuspending", "True" if suspend else "False", "RayClusterSuspending")
        if suspend and not pods:
            status["state"] = "suspended"
        services = self._head_services(rc)
        if services:
            endpoints = dict(status.get("endpoints") or {})
            for p in services[0]["spec"].get("ports") or []:
                if p.get("name") and p.get("targetPort") not in (None, "", 0):
                    endpoints[p["name"]] = str(p["targetPort"])
            status["endpoints"] = endpoints
        head_info = {}
        if head is not None:
            head_info.update(podIP=(head.get("status") or {}).get("podIP", ""), podName=head["metadata"]["name"])
        if services:
            ip = services[0]["spec"].get("clusterIP", "")
            head_info.update(serviceIP=(head_info.get("podIP", "") if ip == "None" else ip),
                             serviceName=services[0]["metadata"]["name"])
        else:
            return None  # "unable to find head service": calculateStatus fails
        status["head"] = {k: v for k, v in head_info.items() if v}
        now = now_rfc3339()
        status["lastUpdateTime"] = now
        if old.get("state") != status.get("state"):
            times = dict(status.get("stateTransitionTimes") or {})
            times[status.get("state", "")] = now
            status["stateTransitionTimes"] = times
        if not conds:
            status.pop("conditions")
        return status

    @staticmethod
    def _inconsistent(old: dict, new: dict) -> bool:
        keys = ("state", "reason", "readyWorkerReplicas", "availableWorkerReplicas", "desiredWorkerReplicas",
                "minWorkerReplicas", "maxWorkerReplicas", "endpoints", "head", "conditions")
        return any(old.get(k) != new.get(k) for k in keys)

    def _update_status(self, rc: dict, status: dict) -> None:
        if not self._inconsistent(rc.get("status") or {}, status):
            return

        def fn(obj):
            obj["status"] = status
        self.store.mutate(self.rc_t, rc["metadata"]["namespace"], rc["metadata"]["name"], fn, subresource="status")
