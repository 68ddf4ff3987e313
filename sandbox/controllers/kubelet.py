"""The scheduler and the kubelet of the sandbox's one node: pods become real Ray nodes.

- Scheduling: a pod that does not tolerate the node's taints (fault `taint`) stays
  Pending with PodScheduled=False/Unschedulable and the scheduler's message.
- Image pull (fault `image_pull`): the container waits in ErrImagePull/ImagePullBackOff
  with the kubelet's events.
- Start: `slow_start` delays container creation; then a Ray head or worker process
  starts (workers once the head's GCS is up, as KubeRay's wait-gcs-ready init container
  makes them) and the pod becomes Running, then Ready when Ray answers.
- A Ray process that dies (fault `head_crash_after`, or a crash asked through the
  control API) is restarted like a container: restartCount, lastState; a head restart
  restarts the cluster's workers, which lost their GCS.
- Deleting a pod stops its processes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .. import quantity
from ..apiserver.store import now_rfc3339
from ..raynode import RayNode
from .base import Controller, record_event, set_condition
from .kuberay import FOLD, HEAD_PORTS, POD_IP

NODE = "sandbox-node"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
READY_TIMEOUT = 180.0


def tolerates(pod: dict, taint: dict) -> bool:
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


class ConfigError(Exception):
    """The container's env refers to a Secret or ConfigMap (key) that does not exist."""


def container_env(store, registry, pod: dict) -> dict[str, str]:
    """Resolve the Ray container's env and envFrom as the kubelet does."""
    import base64

    ns = pod["metadata"]["namespace"]
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]

    def source(kind: str, name: str, optional: bool) -> dict | None:
        rt = registry.get("", "secrets" if kind == "secret" else "configmaps")
        obj = store.find(rt, ns, name)
        if obj is None:
            if optional:
                return None
            raise ConfigError(f'{kind} "{name}" not found')
        if kind == "secret":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})

    env: dict[str, str] = {}
    for ref in container.get("envFrom") or []:
        for key, kind in (("secretRef", "secret"), ("configMapRef", "configmap")):
            if key in ref:
                values = source(kind, ref[key]["name"], ref[key].get("optional", False)) or {}
                env.update({ref.get("prefix", "") + k: v for k, v in values.items()})
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        for key, kind in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
            ref = (item.get("valueFrom") or {}).get(key)
            if ref:
                values = source(kind, ref["name"], ref.get("optional", False))
                if values is not None and ref["key"] in values:
                    env[item["name"]] = values[ref["key"]]
                elif not ref.get("optional", False):
                    raise ConfigError(f"couldn't find key {ref['key']} in {kind.capitalize() if kind == 'secret' else 'ConfigMap'} {ns}/{ref['name']}")
    return env


def container_resources(pod: dict) -> tuple[float, float, int]:
    """Logical CPUs, GPUs and memory for `ray start`, as KubeRay derives them from the
    Ray container: limits first, requests otherwise."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    res = containers[0].get("resources") or {}
    merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    cpu = float(quantity.parse(merged.get("cpu", "1")))
    gpu = float(quantity.parse(merged.get("nvidia.com/gpu", "0")))
    mem = int(quantity.parse(merged.get("memory", "2Gi")))
    return cpu, gpu, mem


class PodRuntime:
    def __init__(self, pod: dict):
        self.uid = pod["metadata"]["uid"]
        self.ns, self.name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.cluster = pod["metadata"]["labels"].get("ray.io/cluster", "")
        self.head = pod["metadata"]["labels"].get("ray.io/node-type") == "head"
        self.node: RayNode | None = None
        self.thread: threading.Thread | None = None
        self.ready_at: float | None = None
        self.restarts = 0
        self.crashed_once = False
        self.stopping = False


class Kubelet(Controller):
    name = "kubelet"

    def __init__(self, store, registry, network, faults, root: Path):
        super().__init__(store, registry)
        self.network, self.faults, self.root = network, faults, root
        self.pod_t = self.rt("", "pods")
        self.svc_t = self.rt("", "services")
        self.pods: dict[str, PodRuntime] = {}
        self.lock = threading.Lock()
        self.stoppers: list[threading.Thread] = []
        self.terminating: dict[str, PodRuntime] = {}  # deleted pods whose processes are stopping

    # --- reconcile -------------------------------------------------------------
    def reconcile(self) -> None:
        pods, _ = self.store.list(self.pod_t)
        live = {p["metadata"]["uid"] for p in pods}
        with self.lock:
            gone = [rt for uid, rt in self.pods.items() if uid not in live]
            for rt in gone:
                del self.pods[rt.uid]
        for rt in gone:
            self._stop_runtime(rt)
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            self._reconcile_pod(pod)

    def _reconcile_pod(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        name = pod["metadata"]["labels"].get("ray.io/cluster", "")
        faults = self.faults.for_cluster(name)
        status = pod.get("status") or {}
        if not pod["spec"].get("nodeName"):
            taints = [GPU_TAINT] if faults.get("taint") else []
            untolerated = [t for t in taints if not tolerates(pod, t)]
            if untolerated:
                t = untolerated[0]
                msg = (f"0/1 nodes are available: 1 node(s) had untolerated taint {{{t['key']}: {t['value']}}}. "
                       "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
                self._set_status(pod, lambda s: s.update(phase="Pending", conditions=set_condition(
                    s.get("conditions"), "PodScheduled", "False", "Unschedulable", msg)))
                if not any(c.get("message") == msg for c in status.get("conditions") or []):
                    record_event(self.store, self.registry, pod, "Warning", "FailedScheduling", msg, "default-scheduler")
                return
            ip = pod["metadata"].get("annotations", {}).get(POD_IP) or self.network.allocate()

            def bind(p):
                p["spec"]["nodeName"] = NODE
            self.store.mutate(self.pod_t, pod["metadata"]["namespace"], pod["metadata"]["name"], bind)
            self._set_status(pod, lambda s: s.update(
                phase="Pending", hostIP="127.0.0.1", podIP=ip, podIPs=[{"ip": ip}], startTime=now_rfc3339(),
                conditions=set_condition(set_condition(s.get("conditions"), "PodScheduled", "True", "", ""),
                                         "Ready", "False", "ContainersNotReady", "containers with unready status: [ray]"),
                containerStatuses=[self._container(pod, waiting=("ContainerCreating", ""))]))
            record_event(self.store, self.registry, pod, "Normal", "Scheduled",
                         f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {NODE}",
                         "default-scheduler")
            return
        if faults.get("image_pull"):
            image = self._image(pod)
            if (status.get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {}).get("reason") != "ImagePullBackOff":
                record_event(self.store, self.registry, pod, "Warning", "Failed",
                             f'Failed to pull image "{image}": reading manifest in {image}: manifest unknown', "kubelet")
                record_event(self.store, self.registry, pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', "kubelet")
                self._set_status(pod, lambda s: s.update(containerStatuses=[self._container(
                    pod, waiting=("ImagePullBackOff", f'Back-off pulling image "{image}"'))]))
            return
        try:
            container_env(self.store, self.registry, pod)
        except ConfigError as exc:
            message = str(exc)
            waiting = (status.get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {})
            if waiting.get("message") != message:
                record_event(self.store, self.registry, pod, "Warning", "Failed", f"Error: {message}", "kubelet")
                self._set_status(pod, lambda s: s.update(containerStatuses=[self._container(
                    pod, waiting=("CreateContainerConfigError", message))]))
            return
        with self.lock:
            rt = self.pods.get(uid)
            if rt is None:
                rt = self.pods[uid] = PodRuntime(pod)
        if rt.thread is None:
            rt.thread = threading.Thread(target=self._run_pod, args=(rt, dict(pod), faults), daemon=True,
                                         name=f"pod-{rt.name}")
            rt.thread.start()
        crash_after = faults.get("head_crash_after")
        if rt.head and crash_after is not None and rt.ready_at and not rt.crashed_once \
                and time.monotonic() - rt.ready_at >= float(crash_after):
            rt.crashed_once = True
            self.crash(rt.ns, rt.cluster)

    # --- pod lifecycle ---------------------------------------------------------
    def _image(self, pod: dict) -> str:
        return ((pod["spec"].get("containers") or [{}])[0].get("image")) or "image"

    def _container(self, pod: dict, waiting=None, running=False, ready=False, restarts=0, last=None) -> dict:
        c = (pod["spec"].get("containers") or [{}])[0]
        state = {"waiting": {"reason": waiting[0], **({"message": waiting[1]} if waiting[1] else {})}} if waiting \
            else {"running": {"startedAt": now_rfc3339()}}
        out = {"name": c.get("name", "ray"), "image": c.get("image", ""), "imageID": "", "ready": ready,
               "restartCount": restarts, "started": running, "state": state}
        if last:
            out["lastState"] = last
        return out

    def _set_status(self, pod: dict, fn) -> None:
        self.store.mutate(self.pod_t, pod["metadata"]["namespace"], pod["metadata"]["name"],
                          lambda p: fn(p.setdefault("status", {})), subresource="status")

    def _run_pod(self, rt: PodRuntime, pod: dict, faults: dict) -> None:
        delay = float(faults.get("slow_start") or 0)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not rt.stopping:
            time.sleep(0.1)
        fold = int((pod["metadata"].get("annotations") or {}).get(FOLD, "1"))
        if fold == 0:  # a folded replica: its resources run on another worker node
            if self._wait_head_ready(rt):
                self._mark_running(rt, pod)
            return
        while not rt.stopping:
            if not rt.head and not self._wait_head_ready(rt):
                return
            node = self._make_node(rt, pod, fold)
            if node is None:
                return
            rt.node = node
            node.start()
            started = time.monotonic()
            while not rt.stopping and node.alive() and not node.ready() and time.monotonic() - started < READY_TIMEOUT:
                time.sleep(0.25)
            if rt.stopping:
                return
            if node.alive() and node.ready():
                rt.ready_at = time.monotonic()
                self._mark_running(rt, pod)
                while not rt.stopping and node.alive():
                    time.sleep(0.25)
            if rt.stopping:
                return
            # The container died: record it and restart, as kubelet does.
            rt.restarts += 1
            rt.ready_at = None
            last = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now_rfc3339()}}
            self._set_status(pod, lambda s, last=last: s.update(
                conditions=set_condition(s.get("conditions"), "Ready", "False", "ContainersNotReady",
                                         "containers with unready status: [ray]"),
                containerStatuses=[self._container(pod, waiting=("ContainerCreating", ""), restarts=rt.restarts, last=last)]))
            node.stop(grace=2)
            if rt.head:
                self._restart_workers(rt)

    def _mark_running(self, rt: PodRuntime, pod: dict) -> None:
        self._set_status(pod, lambda s: s.update(
            phase="Running",
            conditions=set_condition(set_condition(s.get("conditions"), "Initialized", "True", "", ""),
                                     "Ready", "True", "", ""),
            containerStatuses=[self._container(pod, running=True, ready=True, restarts=rt.restarts,
                                               last=((s.get("containerStatuses") or [{}])[0].get("lastState")))]))

    def _head_runtime(self, rt: PodRuntime) -> PodRuntime | None:
        with self.lock:
            return next((r for r in self.pods.values() if r.head and r.ns == rt.ns and r.cluster == rt.cluster), None)

    def _wait_head_ready(self, rt: PodRuntime) -> bool:
        while not rt.stopping:
            head = self._head_runtime(rt)
            if head is not None and head.ready_at is not None:
                return True
            time.sleep(0.25)
        return False

    def _make_node(self, rt: PodRuntime, pod: dict, fold: int) -> RayNode | None:
        current = self.store.find(self.pod_t, rt.ns, rt.name)
        if current is None:
            return None
        ip = current["status"]["podIP"]
        cpu, gpu, mem = container_resources(current)
        svc = self.store.find(self.svc_t, rt.ns, f"{rt.cluster}-head-svc")
        ports = {p["name"]: p["port"] for p in (svc or {}).get("spec", {}).get("ports", [])}
        try:
            env = container_env(self.store, self.registry, current)
        except ConfigError:
            return None
        if rt.head:
            return RayNode(rt.name, ip, head=True, num_cpus=cpu, num_gpus=gpu, memory=mem, root=self.root,
                           ports={flag: ports[name] for name, flag in HEAD_PORTS.items() if name in ports}, env=env)
        gcs = f"{svc['spec']['clusterIP']}:{ports['gcs-server']}"
        head = self._head_runtime(rt)
        return RayNode(rt.name, ip, head=False, num_cpus=cpu * fold, num_gpus=gpu * fold, memory=mem * fold,
                       root=self.root, gcs_address=gcs, env=env,
                       head_temp_dir=head.node.temp_dir if head is not None and head.node is not None else None)

    def _restart_workers(self, head: PodRuntime) -> None:
        with self.lock:
            workers = [r for r in self.pods.values() if not r.head and r.ns == head.ns and r.cluster == head.cluster]
        for w in workers:
            if w.node is not None:
                w.node.crash()

    def _stop_runtime(self, rt: PodRuntime) -> None:
        rt.stopping = True
        with self.lock:
            self.terminating[rt.uid] = rt

        def stop():
            try:
                if rt.thread is not None:
                    rt.thread.join(timeout=15)
                if rt.node is not None:
                    rt.node.stop()
            finally:
                with self.lock:
                    self.terminating.pop(rt.uid, None)
        t = threading.Thread(target=stop, daemon=True, name=f"stop-{rt.name}")
        t.start()
        self.stoppers.append(t)

    # --- used by the control API and the sandbox -------------------------------
    def crash(self, namespace: str, cluster: str) -> bool:
        """Kill a cluster's head Ray processes now (SIGKILL); the pod restarts them."""
        with self.lock:
            head = next((r for r in self.pods.values() if r.head and r.ns == namespace and r.cluster == cluster), None)
        if head is None or head.node is None:
            return False
        head.node.crash()
        return True

    def pod_log(self, namespace: str, name: str, params: dict) -> str:
        with self.lock:
            rt = next((r for r in self.pods.values() if r.ns == namespace and r.name == name), None)
        if rt is None or rt.node is None:
            return ""
        return rt.node.log_tail(int(params.get("tailLines") or 10000))

    def processes(self) -> list[dict]:
        """Ray processes of pods, running or still stopping after their pod was deleted."""
        with self.lock:
            runtimes = list(self.pods.values()) + list(self.terminating.values())
        out = []
        for r in runtimes:
            pids = r.node.pids() if r.node is not None else []
            if pids:
                out.append({"namespace": r.ns, "pod": r.name, "cluster": r.cluster, "pids": pids,
                            "temp_dir": str(r.node.temp_dir),
                            "terminating": r.stopping})
        return out

    def shutdown(self) -> None:
        """Stop every pod's processes and wait for them (sandbox teardown)."""
        self.stop()
        with self.lock:
            runtimes = list(self.pods.values())
            self.pods.clear()
        for rt in runtimes:
            self._stop_runtime(rt)
        for t in self.stoppers:
            t.join(timeout=30)
