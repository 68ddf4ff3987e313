"""The scheduler and the kubelets of the sandbox's nodes: pods become real Ray nodes.

- Scheduling (scheduler.py decides, as kube-scheduler v1.31): a pending pod is placed on a
  node of the pool (nodepool.py) that it tolerates, matches and fits; bound, it gets event
  Scheduled "Successfully assigned <ns>/<pod> to <node>". A pod that fits nowhere stays
  Pending with PodScheduled=False/Unschedulable and the scheduler's message (event
  FailedScheduling), and is tried again after its back-off (podInitialBackoffSeconds 1 s
  doubling to podMaxBackoffSeconds 10 s), so it lands once capacity frees. Pods are tried in
  the scheduling queue's order: priority, then creation. A pod with schedulingGates waits,
  PodScheduled=False/SchedulingGated.
- Image pull (fault `image_pull`: true hits the Ray container, a name hits that container;
  `image_pull_failures: N`: the Ray container's first N pulls fail): as kubelet v1.31's image
  manager, a failed pull leaves the container waiting in ErrImagePull with the runtime's error
  (events Pulling, Failed "Failed to pull image ...", Failed "Error: ErrImagePull"); the pod is
  synced again every `kubelet_backoff_s` x1-1.5 (the pod worker's resync after an error), and
  while the image's back-off (10 s doubling to 300 s) runs, the container waits in
  ImagePullBackOff 'Back-off pulling image "<image>"' (events BackOff, Failed "Error:
  ImagePullBackOff"), else it pulls again. A sidecar that cannot be pulled leaves the pod
  Running but not Ready.
- Cold nodes (platform timing `image_pull_s_per_gib`, 0 by default: images as if pre-pulled):
  the first pod on a node that needs an image starts the node's pull, which lasts the image's
  size (image_size) times the timing; its pods wait in ContainerCreating (events Pulling, then
  Pulled "Successfully pulled image ... in 76.500s ..."), and the pull completes even if they
  are deleted, so the node is warm for the pods that come next.
- Start: `slow_start` delays container creation; init containers (CodeFlare's create-cert)
  complete at once; then the Ray container's process starts (workers once the head's GCS is
  up, as KubeRay's wait-gcs-ready init container makes them) and is Ready when Ray answers.
  Other containers (the oauth-proxy sidecar) are not Ray processes: they are marked running
  and ready, with no process behind them.
- A Ray process that dies (fault `head_crash_after`, `crash_loop`, or a crash asked through the
  control API) is restarted like a container (kuberuntime doBackOff, v1.31): the first time at
  once, then only after its back-off (10 s doubling to 300 s, counted from when it finished;
  reset after it ran 2 x 300 s), waiting meanwhile in CrashLoopBackOff "back-off 20s
  restarting failed container=<c> pod=<pod>_<ns>(<uid>)" (event BackOff); state terminated
  (exitCode, reason, times) and then lastState, restartCount counting restarts. A head restart
  restarts the cluster's workers, which lost their GCS. Each container instance has its own log
  (`?previous=true` reads the last terminated one's, as the kubelet serves it).
- Ports: the head's Ray processes listen on free ports of the pod's own address; the pod's
  container ports (gcs 6379, dashboard 8265, client 10001, metrics 8080, or what the ray
  start command says) are forwarded to them on the pod's address, and `pod_port()` tells
  the kube-proxy where a Service's targetPort really is.
- Termination (kubelet v1.31): a pod with a deletionTimestamp gets SIGTERM (Killing event),
  SIGKILL after its deletionGracePeriodSeconds, terminated container states and a final
  phase, then the kubelet deletes it with grace 0. A pod removed at once (grace 0) is
  killed with the kubelet's minimum grace of 2 s.
"""

from __future__ import annotations

import fnmatch
import os
import random
import shlex
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import quantity, rayimage
from ..apiserver import errors
from ..apiserver.errors import ApiError
from ..apiserver.store import now_rfc3339
from ..nodepool import GPU_TAINT
from ..raynode import NODE_ENV, PodProcess, RayNode, free_port, ray_env
from ..reaper import ProcSnapshot
from . import podcerts, scheduler
from .backoff import Backoff, go_duration
from .base import Controller, log, record_event

SCHEDULE_BACKOFF = (1.0, 10.0)  # kube-scheduler's podInitialBackoffSeconds, podMaxBackoffSeconds
READY_TIMEOUT = 180.0
NODE_SHUTDOWN_GRACE_S = 2.0  # the sandbox going down: each pod's grace (the sandbox's SHUTDOWN_GRACE)
MIN_GRACE = 2.0  # kuberuntime's minimumGracePeriodInSeconds
VOLUMES_DIR = "volumes"  # under the kubelet's root: each pod's secret and emptyDir volumes
TERMINAL = ("Succeeded", "Failed")  # pod phases the kubelet writes last
# The head's Ray ports: `ray start` flag -> the port Ray uses when the flag is absent.
HEAD_PORT_FLAGS = {"port": 6379, "dashboard-port": 8265, "ray-client-server-port": 10001, "metrics-export-port": 8080}
FOLD = "sandbox.kfp-ray.io/fold"  # "0": folded into another node; "k": runs k replicas' resources
MAX_BACKOFF_FACTOR = 30  # MaxContainerBackOff 300 s / backOffPeriod 10 s
SYNC_JITTER = 0.5  # pod worker: wait.Jitter(backOffPeriod, workerBackOffPeriodJitterFactor 0.5)
# What a registry without the image makes CRI-O answer, and what an unreachable one does.
PULL_NOT_FOUND = ("rpc error: code = Unknown desc = initializing source docker://{image}: reading manifest {tag} in "
                  "{repo}: manifest unknown")
PULL_UNREACHABLE = ('rpc error: code = Unknown desc = pinging container registry {registry}: Get '
                    '"https://{registry}/v2/": dial tcp: lookup {registry}: i/o timeout')
# `crash_loop`: what makes the head's `ray start` exit at once, as a bad rayStartParams value
# does (KubeRay passes them as --key=value): "Error: Invalid value for '--num-cpus': 'two' is
# not a valid integer.", exit code 2.
CRASH_LOOP_ARGS = ["--num-cpus=two"]


# Unpacked sizes (what CRI-O's "Image size" reports) for the `image_pull_s_per_gib` timing:
# the RHOAI/CodeFlare CUDA and ROCm Ray images carry the CUDA (or ROCm) runtime, cuDNN and
# Ray's dependencies; an estimate from their layers (ubi9 python base ~1 GiB, CUDA 12.x
# runtime and cuDNN ~6 GiB, Ray and its dependencies ~1.5 GiB), not read from the registry.
IMAGE_SIZES = (("-cu12", int(8.5 * 2**30)), ("cuda", int(8.5 * 2**30)), ("rocm", int(14 * 2**30)),
               ("ray", int(2.5 * 2**30)))
DEFAULT_IMAGE_SIZE = 2**30


def image_size(image: str) -> int:
    return next((size for part, size in IMAGE_SIZES if part in image.lower()), DEFAULT_IMAGE_SIZE)


def _image_parts(image: str) -> tuple[str, str, str]:
    """(registry, repository, tag or digest) of an image reference, for the runtime's error texts."""
    if "@" in image:
        name, _, ref = image.partition("@")
    elif ":" in image.rsplit("/", 1)[-1]:
        name, _, ref = image.rpartition(":")
    else:
        name, ref = image, "latest"
    first = name.split("/", 1)[0]
    registry = first if "/" in name and ("." in first or ":" in first or first == "localhost") else "docker.io"
    return registry, name, ref


@dataclass
class PullState:
    """One container's image pulls as the kubelet's image manager sees them."""
    reason: str = "ContainerCreating"
    message: str = ""
    next_sync: float = 0.0
    failures: int = 0
    pulled: bool = False


class ConfigError(Exception):
    """The container's env refers to a Secret or ConfigMap (key) that does not exist."""


def container_env(store, registry, pod: dict, container: dict | None = None) -> dict[str, str]:
    """Resolve a container's env and envFrom as the kubelet does (the Ray container by default)."""
    import base64

    ns = pod["metadata"]["namespace"]
    if container is None:
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

    fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": ns, "metadata.uid": pod["metadata"].get("uid", ""),
              "spec.nodeName": (pod.get("spec") or {}).get("nodeName", ""),
              "status.podIP": (pod.get("status") or {}).get("podIP", ""),
              "status.hostIP": (pod.get("status") or {}).get("hostIP", "")}
    env: dict[str, str] = {}
    for ref in container.get("envFrom") or []:
        for key, kind in (("secretRef", "secret"), ("configMapRef", "configmap")):
            if key in ref:
                values = source(kind, ref[key]["name"], ref[key].get("optional", False)) or {}
                env.update({ref.get("prefix", "") + k: v for k, v in values.items()})
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field in fields:
            env[item["name"]] = fields[field]
        for key, kind in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
            ref = (item.get("valueFrom") or {}).get(key)
            if ref:
                values = source(kind, ref["name"], ref.get("optional", False))
                if values is not None and ref["key"] in values:
                    env[item["name"]] = values[ref["key"]]
                elif not ref.get("optional", False):
                    raise ConfigError(f"couldn't find key {ref['key']} in {kind.capitalize() if kind == 'secret' else 'ConfigMap'} {ns}/{ref['name']}")
    return env


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args: a defined variable is replaced,
    $$(VAR) gives $(VAR), anything else is left as it is."""
    import re

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


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


def _start_error(exc: OSError, command: list[str]) -> str:
    """How the runtime words a container whose process cannot be exec'd. E2BIG: an argument or
    environment string over the kernel's MAX_ARG_STRLEN (128 KiB), as runc reports it (its
    `exec` of the container's first program)."""
    import errno

    if exc.errno == errno.E2BIG:
        return (f'runc create failed: unable to start container process: exec: "{command[0]}": '
                "argument list too long")
    return str(exc)


def ray_start_flags(pod: dict) -> dict[str, str]:
    """The `--flag=value` options of the Ray container's `ray start` command (KubeRay writes
    it into args from rayStartParams)."""
    c = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    text = " ".join((c.get("command") or []) + (c.get("args") or []))
    flags: dict[str, str] = {}
    if "ray start" not in text:
        return flags
    try:
        words = shlex.split(text.split("ray start", 1)[1].split(";")[0].split("&&")[0])
    except ValueError:
        return flags
    for w in words:
        if w.startswith("--"):
            k, _, v = w[2:].partition("=")
            flags[k] = v or "true"
    return flags


def head_container_ports(pod: dict) -> dict[str, int]:
    """`ray start` flag -> the port the head's process listens on inside its pod."""
    flags = ray_start_flags(pod)
    out = {}
    for flag, default in HEAD_PORT_FLAGS.items():
        try:
            out[flag] = int(flags.get(flag, default))
        except ValueError:
            out[flag] = default
    return out


class PodRuntime:
    def __init__(self, pod: dict, ip: str):
        self.uid = pod["metadata"]["uid"]
        self.ns, self.name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.cluster = (pod["metadata"].get("labels") or {}).get("ray.io/cluster", "")
        self.head = (pod["metadata"].get("labels") or {}).get("ray.io/node-type") == "head"
        self.ip = ip
        self.node: PodProcess | None = None  # a RayNode, or a command container (sandbox/container.py)
        self.thread: threading.Thread | None = None
        self.started_at: str | None = None  # containers created (the Ray one's process started)
        self.running = False  # the Ray container runs
        self.ready_at: float | None = None
        self.restarts = 0
        self.last_state: dict | None = None
        self.crashed_once = False
        self.stopping = False
        self.blocked: dict[str, tuple[str, str]] = {}  # container -> (waiting reason, message)
        self.exit_codes: dict[str, int] | None = None  # set once terminated
        self.start_error: str | None = None  # why its container could not start (StartError)
        self.kill_at: float | None = None  # SIGKILL deadline of a termination (monotonic)
        self.ports: dict[int, int] = {}  # head: container port -> the Ray process's real port
        self.terminator: threading.Thread | None = None
        self.backoff: Backoff | None = None  # restarts and image pulls, set when bound
        self.pulls: dict[str, PullState] = {}  # container -> its image pulls
        self.crash_state: dict | None = None  # the Ray container's state between a crash and its restart
        self.starts = 0  # Ray container instances started
        self.log_marks: list[int] = []  # where each instance's log begins in the pod's log file
        self.synced: tuple[str, str] | None = None  # (pod resourceVersion, status_inputs()) at the last status sync

    def status_inputs(self) -> str:
        """What the kubelet's pod status is computed from, besides the pod itself (Kubelet._pod_status)."""
        return repr((self.blocked, self.exit_codes, self.start_error, self.started_at, self.restarts, self.running,
                     self.ready_at is not None, self.last_state, self.crash_state))


class Kubelet(Controller):
    name = "kubelet"

    def __init__(self, store, registry, network, faults, root: Path, forwarder=None):
        super().__init__(store, registry)
        self.network, self.faults, self.root = network, faults, root
        self.forwarder = forwarder  # gives pods their container ports (sandbox/proxy.py)
        self.pod_t = self.rt("", "pods")
        self.node_t = self.rt("", "nodes")
        self.queue: dict[str, tuple[int, float]] = {}  # unschedulable pod uid -> (attempts, next try, monotonic)
        self.node_images: dict[str, dict[str, tuple[float, float]]] = {}  # node -> image -> pull (began, done)
        self.pull_waiters: set[tuple[str, str]] = set()  # (pod uid, container) waiting for its node's pull
        self.svc_t = self.rt("", "services")
        self.secret_t = self.rt("", "secrets")
        self.volume_root = root / VOLUMES_DIR  # each pod's secret and emptyDir volumes (podcerts.py)
        self.pods: dict[str, PodRuntime] = {}
        self.lock = threading.Lock()
        self.stoppers: list[threading.Thread] = []
        self.terminating: dict[str, PodRuntime] = {}  # pods whose processes are stopping
        # What a non-Ray pod's container gets (sandbox/container.py), set by the sandbox once its
        # API serves: (host, port) of the API, the CA that signed it, and the token of a
        # service account (None: the account has no token here).
        self.api_endpoint: tuple[str, int] | None = None
        self.ca_pem: bytes = b""
        self.service_account_token = None  # (namespace, name) -> str | None

    def _event(self, pod: dict, type_: str, reason: str, message: str, component: str = "kubelet") -> None:
        try:
            record_event(self.store, self.registry, pod, type_, reason, message, component)
        except ApiError:
            pass  # e.g. the namespace is terminating: the recorder drops it

    # --- reconcile -------------------------------------------------------------
    def reconcile(self) -> None:
        live = set(self.store.select(self.pod_t, lambda p: p["metadata"]["uid"]))
        # A finished pod is the kubelet's again only once it is deleted: its status, which the
        # kubelet wrote last, is final. Copying every finished pod of a session on every pass
        # (a pipeline run leaves a dozen) was most of the sandbox's CPU in long sessions.
        pods, _ = self.store.list(self.pod_t, match=_in_kubelets_hands)
        with self.lock:
            gone = [rt for uid, rt in self.pods.items() if uid not in live]
        for rt in gone:  # removed without us (grace 0, or a terminated pod's final delete)
            self._terminate(rt, None, MIN_GRACE)
        for uid in set(self.queue) - live:
            self.queue.pop(uid, None)
        self._schedule_pending(pods)
        for pod in pods:
            try:
                if pod["metadata"].get("deletionTimestamp"):
                    self._begin_termination(pod)
                elif pod["spec"].get("nodeName"):
                    self._reconcile_pod(pod)
            except Exception:  # one pod never stops the others
                log.exception("kubelet: pod %s/%s", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _reconcile_pod(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        faults = self.faults.for_cluster(pod["metadata"].get("labels", {}).get("ray.io/cluster", ""))
        with self.lock:
            rt = self.pods.get(uid)
        if rt is None:  # bound by an earlier kubelet pass that is gone (never here), or by hand
            rt = self._adopt(pod)
        if rt.exit_codes is not None:  # terminated: its containers are done with images and env
            self._refresh(rt)
            return
        rt.blocked = self._blocked(pod, faults, rt)
        self._refresh(rt)
        if self._ray_blocked(pod, rt):
            return
        if rt.thread is None:
            rt.thread = threading.Thread(target=self._run_pod, args=(rt, dict(pod), faults), daemon=True,
                                         name=f"pod-{rt.name}")
            rt.thread.start()
        crash_after = faults.get("head_crash_after")
        if rt.head and crash_after is not None and rt.ready_at and not rt.crashed_once \
                and time.monotonic() - rt.ready_at >= float(crash_after):
            rt.crashed_once = True
            self.crash(rt.ns, rt.cluster)

    # --- scheduling --------------------------------------------------------------
    def _schedule_pending(self, pods: list[dict]) -> None:
        """One pass of the scheduling queue: every pending pod whose back-off is over, in
        priority then creation order, against the nodes less what is bound (and what this pass
        binds)."""
        pending = [p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
                   and (p.get("status") or {}).get("phase", "Pending") == "Pending"]
        if not pending:
            return
        now = time.monotonic()
        ready = [p for p in pending if self.queue.get(p["metadata"]["uid"], (0, 0.0))[1] <= now]
        if not ready:
            return
        nodes = sorted(self.store.list(self.node_t)[0], key=lambda n: n["metadata"]["name"])
        usage = scheduler.node_usage(pods)
        ready.sort(key=lambda p: (-int(p["spec"].get("priority") or 0), p["metadata"].get("creationTimestamp", ""),
                                  p["metadata"]["name"]))
        for pod in ready:
            try:
                self._schedule(pod, nodes, usage, now)
            except Exception:  # one pod never stops the others
                log.exception("scheduler: pod %s/%s", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _schedule(self, pod: dict, nodes: list[dict], usage: dict, now: float) -> None:
        uid = pod["metadata"]["uid"]
        status = pod.get("status") or {}
        if pod["spec"].get("schedulingGates"):
            self._unschedulable(pod, status, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
            return
        cluster = (pod["metadata"].get("labels") or {}).get("ray.io/cluster", "")
        if self.faults.for_cluster(cluster).get("taint"):  # this cluster's pods see the CPU workers GPU-tainted
            nodes = [n if (n.get("spec") or {}).get("taints") else {**n, "spec": {**(n.get("spec") or {}),
                     "taints": [dict(GPU_TAINT)]}} for n in nodes]
        decision = scheduler.place(pod, nodes, usage)
        if decision.node is None:
            attempts, _ = self.queue.get(uid, (0, 0.0))
            low, high = SCHEDULE_BACKOFF
            self.queue[uid] = (attempts + 1, now + min(high, low * 2 ** attempts))
            self._unschedulable(pod, status, "Unschedulable", decision.message, event=True)
            return
        self.queue.pop(uid, None)
        used, count = usage.get(decision.node, ({}, 0))
        for k, v in scheduler.pod_requests(pod).items():
            used[k] = used.get(k, 0) + v
        usage[decision.node] = (used, count + 1)

        def bind(p):
            p["spec"]["nodeName"] = decision.node
        self.store.mutate(self.pod_t, pod["metadata"]["namespace"], pod["metadata"]["name"], bind)
        pod["spec"]["nodeName"] = decision.node
        self._adopt(pod)
        self._event(pod, "Normal", "Scheduled",
                    f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {decision.node}",
                    "default-scheduler")

    def _unschedulable(self, pod: dict, status: dict, reason: str, msg: str, event: bool = False) -> None:
        """PodScheduled=False as the scheduler's failure handler writes it; FailedScheduling
        once per new message (the event recorder counts repeats of one)."""
        if any(c.get("type") == "PodScheduled" and c.get("message") == msg for c in status.get("conditions") or []):
            return
        self._set_status(pod, lambda s: s.update(phase="Pending", conditions=[
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
             "lastTransitionTime": now_rfc3339(), "reason": reason, "message": msg}]))
        if event:
            self._event(pod, "Warning", "FailedScheduling", msg, "default-scheduler")

    def _adopt(self, pod: dict) -> PodRuntime:
        ip = (pod.get("status") or {}).get("podIP") or self.network.allocate()
        rt = PodRuntime(pod, ip)
        base = self.faults.platform("kubelet_backoff_s")
        rt.backoff = Backoff(base, base * MAX_BACKOFF_FACTOR)
        with self.lock:
            self.pods[rt.uid] = rt
        self._set_status(pod, lambda s: s.update(hostIP="127.0.0.1", hostIPs=[{"ip": "127.0.0.1"}], podIP=ip,
                                                 podIPs=[{"ip": ip}], startTime=s.get("startTime") or now_rfc3339()))
        pod.setdefault("status", {}).update(podIP=ip)
        self._refresh(rt)
        return rt

    def _blocked(self, pod: dict, faults: dict, rt: PodRuntime) -> dict[str, tuple[str, str]]:
        """Containers that cannot be created: image not pulled, or env that does not resolve."""
        spec = pod["spec"]
        containers = spec.get("containers") or []
        everything = (spec.get("initContainers") or []) + containers
        pull = faults.get("image_pull")
        out: dict[str, tuple[str, str]] = {}
        for c in everything:
            ray = bool(containers) and c is containers[0]
            permanent = (pull is True and ray) or (isinstance(pull, str) and c.get("name") == pull)
            transient = int(faults.get("image_pull_failures") or 0) if ray else 0
            state = rt.pulls.get(c["name"])
            if state is None and not permanent and not transient:
                waiting = self._pull_to_node(pod, c, faults)
                if waiting:
                    out[c["name"]] = waiting
                continue  # present on the node (no pull fault ever hit it)
            state = rt.pulls.setdefault(c["name"], PullState())
            if not state.pulled:
                self._sync_pull(pod, rt, c, state, permanent, transient)
            if not state.pulled:
                out[c["name"]] = (state.reason, state.message)
        for c in containers:
            if c["name"] in out:
                continue
            try:
                container_env(self.store, self.registry, pod, c)
            except ConfigError as exc:
                out[c["name"]] = ("CreateContainerConfigError", str(exc))
        old = {s["name"]: (s.get("state") or {}).get("waiting", {}) for s in
               ((pod.get("status") or {}).get("containerStatuses") or []) + ((pod.get("status") or {}).get("initContainerStatuses") or [])}
        for name, (reason, message) in out.items():
            if reason == "CreateContainerConfigError" and old.get(name, {}).get("message") != message:
                self._event(pod, "Warning", "Failed", f"Error: {message}")
        return out

    def _pull_to_node(self, pod: dict, c: dict, faults: dict) -> tuple[str, str] | None:
        """A cold node pulls the image once, in `image_pull_s_per_gib` per GiB of it (0: at once;
        the cluster fault `image_pull_s` sets the time of a pull its pod starts);
        every pod of that node that needs it meanwhile waits in ContainerCreating, and the pull
        goes on if they are deleted (the node is warm for the next ones). None once present."""
        image = c.get("image") or "image"
        node = pod["spec"]["nodeName"]
        now = time.monotonic()
        with self.lock:
            pulls = self.node_images.setdefault(node, {})
            first = image not in pulls
            if first:
                took = faults.get("image_pull_s")
                if isinstance(took, dict):
                    took = next((v for glob, v in took.items() if fnmatch.fnmatchcase(node, glob)), None)
                if took is None:
                    took = image_size(image) / 2**30 * self.faults.platform("image_pull_s_per_gib")
                pulls[image] = (now, now + float(took))
            began, done = pulls[image]
        key = (pod["metadata"]["uid"], c["name"])
        if first or key not in self.pull_waiters:
            if done > now:
                self.pull_waiters.add(key)
                self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"')
            return ("ContainerCreating", "") if done > now else None
        if done > now:
            return "ContainerCreating", ""
        self.pull_waiters.discard(key)
        took = done - began
        self._event(pod, "Normal", "Pulled", f'Successfully pulled image "{image}" in {took:.3f}s ({took:.3f}s including '
                                             f"waiting). Image size: {image_size(image)} bytes.")
        return None

    def _sync_pull(self, pod: dict, rt: PodRuntime, c: dict, state: PullState, permanent: bool, transient: int) -> None:
        """One pod sync of a container whose image is not there (images.EnsureImageExists, v1.31)."""
        now = time.monotonic()
        if now < state.next_sync:
            return
        base = self.faults.platform("kubelet_backoff_s")
        state.next_sync = now + base * random.uniform(1.0, 1.0 + SYNC_JITTER)
        image = c.get("image") or "image"
        key = f"{rt.uid}_{image}"
        if rt.backoff.in_backoff_since_update(key, now):
            state.reason, state.message = "ImagePullBackOff", f'Back-off pulling image "{image}"'
            self._event(pod, "Normal", "BackOff", f'Back-off pulling image "{image}"')
            self._event(pod, "Warning", "Failed", "Error: ImagePullBackOff")
            return
        self._event(pod, "Normal", "Pulling", f'Pulling image "{image}"')
        if not permanent and state.failures >= transient:
            state.pulled = True
            self._event(pod, "Normal", "Pulled", f'Successfully pulled image "{image}" in 1.2s (1.2s including waiting). '
                                                 "Image size: 2147483648 bytes.")
            return
        state.failures += 1
        registry, repo, tag = _image_parts(image)
        err = (PULL_NOT_FOUND if permanent else PULL_UNREACHABLE).format(image=image, registry=registry, repo=repo, tag=tag)
        rt.backoff.next(key, now)
        state.reason, state.message = "ErrImagePull", err
        self._event(pod, "Warning", "Failed", f'Failed to pull image "{image}": {err}')
        self._event(pod, "Warning", "Failed", "Error: ErrImagePull")

    def _ray_blocked(self, pod: dict, rt: PodRuntime) -> bool:
        """The Ray container cannot start: it (or an init container) is blocked."""
        spec = pod["spec"]
        ray = (spec.get("containers") or [{}])[0].get("name")
        return ray in rt.blocked or any(c["name"] in rt.blocked for c in spec.get("initContainers") or [])

    # --- status ----------------------------------------------------------------
    def _pod_status(self, rt: PodRuntime, pod: dict) -> dict:
        spec, old = pod["spec"], pod.get("status") or {}
        containers, inits = spec.get("containers") or [], spec.get("initContainers") or []
        ray = containers[0]["name"] if containers else None
        old_states = {s["name"]: s for s in (old.get("containerStatuses") or []) + (old.get("initContainerStatuses") or [])}
        blocked_init = next((c["name"] for c in inits if c["name"] in rt.blocked), None)
        done = rt.exit_codes is not None

        def status(c, state, ready=False, restarts=0, last=None, started=None):
            out = {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": ready,
                   "restartCount": restarts, "started": bool(started), "state": state}
            if last:
                out["lastState"] = last
            if "running" in state or "terminated" in state:
                out["containerID"] = f"cri-o://{rt.uid[:8]}{c['name']}"
            return out

        def waiting(reason, message=""):
            return {"waiting": {"reason": reason, **({"message": message} if message else {})}}

        init_statuses, initialized = [], blocked_init is None
        for i, c in enumerate(inits):
            if blocked_init is not None and inits.index(next(x for x in inits if x["name"] == blocked_init)) < i:
                init_statuses.append(status(c, waiting("PodInitializing")))
            elif c["name"] in rt.blocked:
                init_statuses.append(status(c, waiting(*rt.blocked[c["name"]])))
            else:
                prev = (old_states.get(c["name"]) or {}).get("state", {}).get("terminated")
                init_statuses.append(status(c, {"terminated": prev or {
                    "exitCode": 0, "reason": "Completed", "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}}))
        main = []
        for c in containers:
            name = c["name"]
            if done:
                code = rt.exit_codes.get(name, 0)
                prev = (old_states.get(name) or {}).get("state", {})
                reason = "Completed" if code == 0 else "Error" if rt.started_at else "ContainerStatusUnknown"
                failed_start = rt.start_error if name == ray else None
                if failed_start:
                    reason = "StartError"
                # a terminated state is written once, as the kubelet's: later syncs keep its times
                ended = prev.get("terminated") or {}
                main.append(status(c, {"terminated": {
                    "exitCode": code, "reason": reason, **({"message": failed_start} if failed_start else {}),
                    "startedAt": ended.get("startedAt") or (prev.get("running") or {}).get(
                        "startedAt", rt.started_at or now_rfc3339()),
                    "finishedAt": ended.get("finishedAt") or now_rfc3339()}}, restarts=rt.restarts if name == ray else 0))
            elif not initialized:
                main.append(status(c, waiting("PodInitializing")))
            elif name in rt.blocked:
                main.append(status(c, waiting(*rt.blocked[name]), restarts=rt.restarts if name == ray else 0,
                                   last=rt.last_state if name == ray else None))
            elif name == ray:
                if rt.running:
                    main.append(status(c, {"running": {"startedAt": rt.started_at}}, ready=rt.ready_at is not None,
                                       restarts=rt.restarts, last=rt.last_state, started=True))
                elif rt.crash_state is not None and "waiting" in rt.crash_state:  # CrashLoopBackOff
                    main.append(status(c, {"waiting": rt.crash_state["waiting"]}, restarts=rt.restarts,
                                       last={"terminated": rt.crash_state["terminated"]}))
                elif rt.crash_state is not None:  # exited, about to restart
                    main.append(status(c, {"terminated": rt.crash_state["terminated"]}, restarts=rt.restarts,
                                       last=rt.last_state))
                else:
                    main.append(status(c, waiting("ContainerCreating"), restarts=rt.restarts, last=rt.last_state))
            elif rt.started_at:  # a sidecar: no process, running once the pod's containers start
                main.append(status(c, {"running": {"startedAt": rt.started_at}}, ready=True, started=True))
            else:
                main.append(status(c, waiting("ContainerCreating")))
        unready = [s["name"] for s in main if not s["ready"]]
        if done:
            phase = "Succeeded" if all(s["state"]["terminated"]["exitCode"] == 0 for s in main) else "Failed"
        elif any("running" in s["state"] for s in main):
            phase = "Running"
        else:
            phase = "Pending"
        old_conds = {c["type"]: c for c in old.get("conditions") or []}

        def cond(type_, ok, reason="", message=""):
            prev = old_conds.get(type_)
            status_ = "True" if ok else "False"
            c = {"type": type_, "status": status_, "lastProbeTime": None,
                 "lastTransitionTime": prev["lastTransitionTime"] if prev and prev["status"] == status_ else now_rfc3339()}
            if not ok and reason:
                c["reason"] = reason
                if message:
                    c["message"] = message
            return c

        incomplete = [c["name"] for c in inits if c["name"] == blocked_init or
                      (blocked_init is not None and inits.index(c) > [x["name"] for x in inits].index(blocked_init))]
        ready_reason, ready_msg = ("PodCompleted", "") if done else (
            "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
        conditions = [
            cond("PodReadyToStartContainers", not done),
            cond("Initialized", initialized, "ContainersNotInitialized",
                 f"containers with incomplete status: [{' '.join(incomplete)}]"),
            cond("Ready", not unready, ready_reason, ready_msg),
            cond("ContainersReady", not unready, ready_reason, ready_msg),
            cond("PodScheduled", True),
        ]
        out = {**old, "phase": phase, "conditions": conditions, "containerStatuses": main,
               "qosClass": old.get("qosClass") or _qos(pod)}
        if inits:
            out["initContainerStatuses"] = init_statuses
        return out

    def _refresh(self, rt: PodRuntime) -> None:
        """Write the pod's status as the kubelet's status manager would, if it changed.

        _pod_status is a function of the stored pod and rt's state, and its result, once
        written, is its own fixed point (timestamps are taken only where the old status has
        none). So when neither has changed since the last sync, the status is what it would
        write: every kubelet pass syncs every pod, and a copy of each pod per pass was most of
        the sandbox's CPU in long sessions."""
        if rt.exit_codes is not None:  # terminal (_pod_status): the address goes before the phase is written
            self._free_address(rt)
        state = rt.status_inputs()
        with self.store.lock:
            if rt.synced is not None and rt.synced == (self.store.resource_version(self.pod_t, rt.ns, rt.name), state):
                return
            current = self.store.find(self.pod_t, rt.ns, rt.name)
            if current is None or current["metadata"]["uid"] != rt.uid or not current["spec"].get("nodeName"):
                return
            new = self._pod_status(rt, current)
            if new != current.get("status"):
                current["status"] = new
                current = self.store.update(self.pod_t, current, subresource="status", check_rv=False)
            rt.synced = (current["metadata"]["resourceVersion"], state)

    def _set_status(self, pod: dict, fn) -> None:
        self.store.mutate(self.pod_t, pod["metadata"]["namespace"], pod["metadata"]["name"],
                          lambda p: fn(p.setdefault("status", {})), subresource="status")

    # --- pod lifecycle ---------------------------------------------------------
    def _run_pod(self, rt: PodRuntime, pod: dict, faults: dict) -> None:
        delay = float(faults.get("slow_start") or 0)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not rt.stopping:
            time.sleep(0.1)
        if not rt.cluster:  # not a Ray pod: a pipeline task's, say
            self._run_container(rt, pod)
            return
        fold = int((pod["metadata"].get("annotations") or {}).get(FOLD, "1"))
        if fold == 0:  # a folded replica: its resources run on another worker node
            if self._wait_head_ready(rt):
                rt.started_at, rt.running, rt.ready_at = now_rfc3339(), True, time.monotonic()
                self._refresh(rt)
            return
        while not rt.stopping:
            if not rt.head and not self._wait_head_ready(rt):
                return
            node = self._make_node(rt, pod, fold)
            if node is None or rt.stopping:
                return
            if rt.crash_state is not None:  # a restart: the crashed instance becomes lastState
                rt.last_state, rt.crash_state = {"terminated": rt.crash_state["terminated"]}, None
                rt.restarts += 1
            rt.node = node
            rt.log_marks.append(node.log_size())
            rt.starts += 1
            node.start()
            rt.started_at, rt.running = now_rfc3339(), True
            self._open_ports(rt)
            self._refresh(rt)
            started = time.monotonic()
            while not rt.stopping and node.alive() and not node.ready() and time.monotonic() - started < READY_TIMEOUT:
                time.sleep(0.25)
            if rt.stopping:
                return
            if node.alive() and node.ready():
                rt.ready_at = time.monotonic()
                self._refresh(rt)
                while not rt.stopping and node.alive():
                    time.sleep(0.25)
            if rt.stopping:
                return
            # The container died: record it, and restart it as the kubelet does.
            finished_at, finished = now_rfc3339(), time.monotonic()
            rt.ready_at, rt.running = None, False
            self._close_ports(rt)
            node.stop(grace=2)
            code = node.exit_code()
            rt.crash_state = {"terminated": {"exitCode": 137 if code is None else code, "reason": "Error",
                                             "startedAt": rt.started_at, "finishedAt": finished_at,
                                             "containerID": f"cri-o://{rt.uid[:8]}{rt.starts}"}}
            self._refresh(rt)
            if rt.head:
                self._restart_workers(rt)
            self._back_off(rt, pod, finished)

    def _run_container(self, rt: PodRuntime, pod: dict) -> None:
        """A pod whose first container is a command, not a Ray node: it runs once, as a process
        with the pod's env and mounts (sandbox/container.py), and the pod ends Succeeded or
        Failed with its exit code (restartPolicy Never, as Argo's step pods and RayJob
        submitters; the sandbox does not restart other pods' containers). A container whose
        image is a Ray image (rayimage.is_ray_image) runs in the sandbox's Ray image: its bin,
        with the `ray` command, first on PATH."""
        from ..container import ContainerProcess

        current = self.store.find(self.pod_t, rt.ns, rt.name)
        if current is None:
            return
        container = (current["spec"].get("containers") or [{}])[0]
        try:
            env = container_env(self.store, self.registry, current, container)
        except ConfigError:
            return  # waits in CreateContainerConfigError (_blocked)
        if rayimage.is_ray_image(container.get("image") or "") and "PATH" not in env:
            # a Ray image (the RayJob submitter's is the head's): its `ray` and python first on PATH
            env["PATH"] = rayimage.with_ray_cli(container.get("image")) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
        if self.api_endpoint is not None:
            env |= {"KUBERNETES_SERVICE_HOST": self.api_endpoint[0], "KUBERNETES_SERVICE_PORT": str(self.api_endpoint[1]),
                    "KUBERNETES_SERVICE_PORT_HTTPS": str(self.api_endpoint[1])}
        command = [_expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
        if not command:
            self._cannot_start(rt, current, container, "the sandbox cannot run an image's own entrypoint: "
                               "give the container a command")
            return
        account = None
        if current["spec"].get("automountServiceAccountToken", True) is not False:
            name = current["spec"].get("serviceAccountName") or "default"
            token = self.service_account_token(rt.ns, name) if self.service_account_token else None
            account = {"ca.crt": self.ca_pem, "namespace": rt.ns.encode(), **({"token": token.encode()} if token else {})}
        try:
            process = ContainerProcess(rt.name, self.root, command, env, service_account=account,
                                       workdir=container.get("workingDir", ""), hosts=self._hosts(rt))
            rt.node = process
            rt.log_marks.append(process.log_size())
            rt.starts += 1
            process.start()
        except OSError as exc:
            self._cannot_start(rt, current, container, _start_error(exc, command))
            return
        rt.started_at, rt.running, rt.ready_at = now_rfc3339(), True, time.monotonic()
        self._event(current, "Normal", "Started", f"Started container {container.get('name', '')}")
        self._refresh(rt)
        wait = 0.05
        while not rt.stopping and process.alive():
            time.sleep(wait)
            wait = min(wait * 1.5, 0.5)
        if rt.stopping:
            return  # termination (_finish) records how it ended
        rt.running, rt.ready_at = False, None
        code = process.exit_code()
        rt.exit_codes = {c["name"]: (code or 0) if c is container else 0 for c in current["spec"].get("containers") or []}
        self._refresh(rt)

    def _hosts(self, rt: PodRuntime) -> str:
        """The pod's /etc/hosts: the machine's, then each Service's names (cluster DNS)."""
        try:
            lines = [Path("/etc/hosts").read_text().rstrip("\n")]
        except OSError:
            lines = ["127.0.0.1 localhost"]
        svcs, _ = self.store.list(self.svc_t, None)
        for s in svcs:
            ip, name, ns = s["spec"].get("clusterIP"), s["metadata"]["name"], s["metadata"]["namespace"]
            if ip and ip != "None":
                short = [name] if ns == rt.ns else []
                lines.append(" ".join([ip, f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", *short]))
        return "\n".join(lines) + "\n"

    def _cannot_start(self, rt: PodRuntime, pod: dict, container: dict, why: str) -> None:
        """A container that could not be created: the pod fails (exit code 128), and says why."""
        rt.exit_codes = {container.get("name", ""): 128}
        rt.start_error = why
        self._event(pod, "Warning", "Failed", f"Error: {why}")
        self._refresh(rt)

    def _free_address(self, rt: PodRuntime) -> None:
        """A pod in a terminal phase (Succeeded, Failed: every way there sets rt.exit_codes, and
        _refresh calls this before it writes the phase) gives its address back while the pod
        object stays, its status.podIP unchanged; a deleted pod at the latest in _finish. The
        kubelet stops a terminal pod's sandbox and the CNI frees the IP (kubelet pod_workers:
        KillPod -> StopPodSandbox -> CNI DEL), and OpenShift's OVN-Kubernetes releases a
        completed pod's IP at once (go-controller pkg/ovn: util.PodCompleted). Without it, a
        sandbox that has run ~250 pipeline task pods would have no address left for the next."""
        with self.lock:  # once, whichever thread writes the status first
            ip, rt.ip = rt.ip, ""  # nor may _finish free it again once it is another pod's
        if ip:
            self.network.release(ip)

    def _back_off(self, rt: PodRuntime, pod: dict, finished: float) -> None:
        """kuberuntime doBackOff: restart at once unless the container is in its back-off
        (counted from when it finished); then wait in CrashLoopBackOff until it ends and the
        pod worker syncs the pod again."""
        ray = (pod["spec"].get("containers") or [{}])[0].get("name", "ray")
        key = f"{rt.uid}_{ray}"
        while not rt.stopping and rt.backoff.in_backoff_since(key, finished):
            delay = rt.backoff.get(key)
            who = f"{rt.name}_{rt.ns}({rt.uid})"
            waiting = {"reason": "CrashLoopBackOff",
                       "message": f"back-off {go_duration(delay)} restarting failed container={ray} pod={who}"}
            if rt.crash_state.get("waiting") != waiting:
                rt.crash_state = {**rt.crash_state, "waiting": waiting}
                self._refresh(rt)
                self._event(pod, "Warning", "BackOff", f"Back-off restarting failed container {ray} in pod {who}")
            # the pod worker retries a failed sync after wait.Jitter(backOffPeriod, 0.5)
            base = self.faults.platform("kubelet_backoff_s")
            resync = time.monotonic() + base * random.uniform(1.0, 1.0 + SYNC_JITTER)
            while not rt.stopping and time.monotonic() < resync:
                time.sleep(min(0.1, max(0.01, resync - time.monotonic())))
        rt.backoff.next(key, finished)

    def _open_ports(self, rt: PodRuntime) -> None:
        if self.forwarder is None:
            return
        for port, real in rt.ports.items():
            self.forwarder.listen(("pod", rt.uid), rt.ip, port, lambda real=real: (rt.ip, real))

    def _close_ports(self, rt: PodRuntime) -> None:
        if self.forwarder is not None:
            self.forwarder.close(("pod", rt.uid))

    def _head_runtime(self, rt: PodRuntime) -> PodRuntime | None:
        with self.lock:
            return next((r for r in self.pods.values() if r.head and r.ns == rt.ns and r.cluster == rt.cluster
                         and not r.stopping), None)

    def _wait_head_ready(self, rt: PodRuntime) -> bool:
        while not rt.stopping:
            head = self._head_runtime(rt)
            if head is not None and head.ready_at is not None:
                return True
            time.sleep(0.25)
        return False

    def _head_services(self, rt: PodRuntime) -> list[dict]:
        """The Services KubeRay put in front of the head of rt's cluster."""
        def head_of_cluster(s):
            labels = s["metadata"].get("labels") or {}
            return labels.get("ray.io/cluster") == rt.cluster and labels.get("ray.io/node-type") == "head"

        return self.store.list(self.svc_t, rt.ns, head_of_cluster)[0]

    def _gcs_address(self, rt: PodRuntime, head: PodRuntime) -> str | None:
        """Where a worker finds the GCS: the head Service's port for it (through the kube-proxy),
        or, for a headless Service, the head pod's address (its forwarded container port). If
        the forwarder could not take that address (another process on this machine holds the
        port on every address), the head's real GCS port, so a worker never joins a stranger."""
        head_pod = self.store.find(self.pod_t, head.ns, head.name)
        if head_pod is None or not head.ports:
            return None
        gcs = head_container_ports(head_pod)["port"]
        svcs = self._head_services(rt)
        candidates = []
        for svc in svcs:
            ip = svc["spec"].get("clusterIP")
            port = next((p["port"] for p in svc["spec"].get("ports") or [] if p.get("targetPort", p["port"]) == gcs), None)
            if ip and ip != "None" and port:
                candidates.append((ip, port))
        candidates.append((head.ip, gcs))
        for ip, port in candidates:
            if self.forwarder is not None and self.forwarder.listening(ip, port):
                return f"{ip}:{port}"
        if self.forwarder is not None:
            log.warning("kubelet: %s reaches the GCS of %s directly: its Service/pod port is not forwarded", rt.name, head.name)
        return f"{head.ip}:{head.ports[gcs]}"

    def _make_node(self, rt: PodRuntime, pod: dict, fold: int) -> RayNode | None:
        current = self.store.find(self.pod_t, rt.ns, rt.name)
        if current is None:
            return None
        cpu, gpu, mem = container_resources(current)
        try:
            env = container_env(self.store, self.registry, current)
        except ConfigError:
            return None
        mounts = self._volumes(rt, current)
        if mounts is None:
            return None
        env = podcerts.map_paths(env, mounts)  # RAY_USE_TLS and RAY_TLS_*: Ray runs with mTLS, as on RHOAI
        if rt.head:
            ports = head_container_ports(current)
            real = {flag: free_port() for flag in ports}
            rt.ports = {ports[flag]: real[flag] for flag in ports}
            crash = self.faults.for_cluster(rt.cluster).get("crash_loop")
            failing = crash is True or (not isinstance(crash, bool) and isinstance(crash, int) and rt.starts < crash)
            return RayNode(rt.name, rt.ip, head=True, num_cpus=cpu, num_gpus=gpu, memory=mem, root=self.root,
                           ports=real, env=env, extra_args=CRASH_LOOP_ARGS if failing else None, image=_image(current))
        head = self._head_runtime(rt)
        gcs = self._gcs_address(rt, head) if head is not None else None
        if gcs is None:
            return None
        return RayNode(rt.name, rt.ip, head=False, num_cpus=cpu * fold, num_gpus=gpu * fold, memory=mem * fold,
                       root=self.root, gcs_address=gcs, env=env, image=_image(current),
                       head_temp_dir=head.node.temp_dir if head.node is not None else None)

    def _volumes(self, rt: PodRuntime, pod: dict) -> dict[str, str] | None:
        """The Ray container's secret and emptyDir volumes, and CodeFlare's create-cert
        (podcerts.py): mount path -> directory here. None: the pod was deleted while a
        secret it mounts was missing (the kubelet retries the mount until then)."""
        ips = [s["spec"]["clusterIP"] for s in self._head_services(rt) if s["spec"].get("clusterIP") not in (None, "", "None")]

        def read_secret(name):
            secret = self.store.find(self.secret_t, rt.ns, name)
            return None if secret is None else secret.get("data") or {}

        wait, warned = 0.1, False
        while not rt.stopping:
            try:
                return podcerts.prepare(pod, self.volume_root / rt.uid, read_secret, rt.ip, ips)
            except podcerts.CertificateLacksPodIP:
                pass  # the mTLS controller reissues it within a pass
            except podcerts.MissingSecret as exc:
                if not warned:
                    self._event(pod, "Warning", "FailedMount", str(exc))
                    warned = True
            time.sleep(wait)
            wait = min(wait * 2, 2.0)
        return None

    def _restart_workers(self, head: PodRuntime) -> None:
        with self.lock:
            workers = [r for r in self.pods.values() if not r.head and r.ns == head.ns and r.cluster == head.cluster]
        for w in workers:
            if w.node is not None:
                w.node.crash()

    # --- termination -----------------------------------------------------------
    def _begin_termination(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            rt = self.pods.get(uid)
        if rt is None:  # never bound here: nothing runs, finish at once
            rt = PodRuntime(pod, (pod.get("status") or {}).get("podIP") or "")
            with self.lock:
                self.pods[uid] = rt
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        self._terminate(rt, pod, grace)

    def _terminate(self, rt: PodRuntime, pod: dict | None, grace: float) -> None:
        """SIGTERM now, SIGKILL at the grace deadline; a shorter grace later moves the deadline."""
        deadline = time.monotonic() + max(grace, MIN_GRACE)
        if rt.terminator is not None:
            rt.kill_at = min(rt.kill_at or deadline, deadline)
            return
        rt.kill_at = deadline
        rt.stopping = True
        with self.lock:
            self.terminating[rt.uid] = rt
        if pod is not None and rt.node is not None and rt.node.alive():
            ray = (pod["spec"].get("containers") or [{}])[0].get("name", "ray")
            self._event(pod, "Normal", "Killing", f"Stopping container {ray}")
        rt.terminator = threading.Thread(target=self._finish, args=(rt, pod is not None), daemon=True,
                                         name=f"stop-{rt.name}")
        rt.terminator.start()
        self.stoppers.append(rt.terminator)

    def _finish(self, rt: PodRuntime, delete: bool) -> None:
        try:
            if rt.thread is not None:
                rt.thread.join(timeout=15)
            node = rt.node
            code = 137  # a container that never ran: ContainerStatusUnknown
            if node is not None:
                node.terminate()
                wait = 0.05
                while node.alive() and time.monotonic() < (rt.kill_at or 0):
                    time.sleep(wait)
                    wait = min(wait * 1.5, 0.5)
                code = node.exit_code()
                node.stop(grace=0)  # SIGKILL whatever is left, and clean up
                code = code if code is not None else node.exit_code()
            elif rt.running:  # a folded replica: no process of its own
                code = 0
            self._close_ports(rt)
            rt.running, rt.ready_at = False, None
            rt.exit_codes = {}
            pod = self.store.find(self.pod_t, rt.ns, rt.name)
            if pod is not None and pod["metadata"]["uid"] == rt.uid:
                ray = (pod["spec"].get("containers") or [{}])[0].get("name")
                rt.exit_codes = {c["name"]: (code or 0) if c["name"] == ray else (0 if rt.started_at else 137)
                                 for c in pod["spec"].get("containers") or []}
                self._refresh(rt)
                if delete:
                    try:
                        self.store.delete(self.pod_t, rt.ns, rt.name, grace_period_seconds=0,
                                          preconditions={"uid": rt.uid})
                    except ApiError:
                        pass  # gone or replaced meanwhile
        except Exception:
            log.exception("kubelet: terminating %s/%s", rt.ns, rt.name)
        finally:
            with self.lock:
                self.terminating.pop(rt.uid, None)
                if self.pods.get(rt.uid) is rt:
                    del self.pods[rt.uid]
            shutil.rmtree(self.volume_root / rt.uid, ignore_errors=True)
            self._free_address(rt)

    # --- used by the control API, the kube-proxy and the sandbox ----------------
    def pod_port(self, pod: dict, port: int) -> tuple[str, int] | None:
        """Where the pod's container port really listens (the kube-proxy's backend)."""
        with self.lock:
            rt = self.pods.get(pod["metadata"]["uid"])
        if rt is None or rt.stopping or port not in rt.ports or not rt.running:
            return None
        return rt.ip, rt.ports[port]

    def crash(self, namespace: str, cluster: str) -> bool:
        """Kill a cluster's head Ray processes now (SIGKILL); the pod restarts them."""
        with self.lock:
            head = next((r for r in self.pods.values() if r.head and r.ns == namespace and r.cluster == cluster
                         and not r.stopping), None)
        if head is None or head.node is None:
            return False
        head.node.crash()
        return True

    def pod_log(self, namespace: str, name: str, params: dict) -> str:
        """The Ray container's log: its current instance's, or with previous=true the last
        terminated instance's (400 when there is none, as the kubelet answers)."""
        with self.lock:
            rt = next((r for r in self.pods.values() if r.ns == namespace and r.name == name), None)
        previous = str(params.get("previous", "")).lower() in ("true", "1")
        marks = list(rt.log_marks) if rt is not None else []
        if previous and len(marks) < 2:
            container = params.get("container") or "ray"
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        if rt is None or rt.node is None:
            return ""
        marks = marks or [0]
        if previous:
            begin, end = marks[-2], marks[-1]
        else:
            begin, end = marks[-1], None
        try:
            with open(rt.node.log_path, "rb") as fh:
                fh.seek(begin)
                data = fh.read() if end is None else fh.read(end - begin)
        except OSError:
            return ""
        # as the kubelet serves it: the bytes as written (a reader following the log can tell a
        # line still being written), the whole log unless tailLines asks for its end
        text = data.decode(errors="replace")
        if params.get("tailLines"):
            text = "".join(text.splitlines(keepends=True)[-int(params["tailLines"]):])
        return text

    def _runtime(self, namespace: str, name: str) -> PodRuntime | None:
        with self.lock:
            return next((r for r in self.pods.values() if r.ns == namespace and r.name == name), None)

    def follow_log(self, namespace: str, name: str, params: dict, gone) -> Iterator[bytes]:
        """`logs -f`: the current instance's log as pod_log serves it, then what that instance
        writes, until it ends (the kubelet's follow stops when the container exits) or
        `gone()` says the reader left. previous=true: the old log, not followed."""
        rt = self._runtime(namespace, name)
        if str(params.get("previous", "")).lower() in ("true", "1") or rt is None or rt.node is None:
            yield self.pod_log(namespace, name, params).encode()
            return
        node, begin = rt.node, (rt.log_marks or [0])[-1]
        try:
            fh = open(node.log_path, "rb")
        except OSError:
            return
        with fh:
            fh.seek(begin)
            first = fh.read()
            if params.get("tailLines"):
                first = b"".join(first.splitlines(keepends=True)[-int(params["tailLines"]):])
            yield first
            wait = 0.05
            while True:
                ended = not node.alive() or rt.node is not node  # read what it wrote before it ended
                data = fh.read()
                if data:
                    wait = 0.05
                    yield data
                elif ended or gone():
                    return
                else:
                    time.sleep(wait)
                    wait = min(wait * 2, 0.5)

    def exec_target(self, namespace: str, name: str, container: str) -> tuple[dict[str, str], str, list[str]]:
        """(env, working directory, command prefix) a command exec'd in the pod's container runs
        with: the container's own env as its process has it (the Ray container: Ray's, with mTLS
        paths, and RAY_ADDRESS naming its GCS, as KubeRay sets it in every Ray container), and,
        where the container has mounts of its own (a task pod's /s3, its service account), an
        nsenter into its mount namespace. Raises LookupError when the container does not run
        (CRI-O: container not found)."""
        rt = self._runtime(namespace, name)
        pod = self.store.find(self.pod_t, namespace, name)
        node = rt.node if rt is not None else None
        if rt is None or pod is None or rt.stopping or not rt.running:
            raise LookupError(container)
        containers = pod["spec"].get("containers") or [{}]
        if isinstance(node, RayNode) and container == containers[0].get("name"):
            gcs = f"{node.ip}:{node.ports['port']}" if node.head else node.gcs_address or ""
            rayimage.with_ray_cli()  # the image's `ray` command on its PATH, as RHOAI's image has it
            env = ray_env({**node.env, NODE_ENV: str(node.temp_dir), "RAY_ADDRESS": gcs})
            return env, str(node.temp_dir), _enter_mounts(node)
        spec = next((c for c in containers if c.get("name") == container), None)
        if node is None or spec is None or (container != containers[0].get("name") and isinstance(node, RayNode)):
            raise LookupError(container)  # a sidecar the sandbox runs no process for
        tmp = str(node.temp_dir / "tmp")
        from ..container import base_env

        env = {**base_env(tmp), **node.env}
        return env, spec.get("workingDir") or tmp, _enter_mounts(node)

    def pod_pids(self, namespace: str, name: str) -> list[int] | None:
        """The processes of a pod's running container (None: the pod runs nothing here)."""
        rt = self._runtime(namespace, name)
        if rt is None or rt.node is None or not rt.running:
            return None
        return rt.node.pids()

    def processes(self) -> list[dict]:
        """Ray processes of pods, running or still stopping after their pod was deleted."""
        with self.lock:
            runtimes = list({id(r): r for r in list(self.pods.values()) + list(self.terminating.values())}.values())
        out, snapshot = [], ProcSnapshot()
        for r in runtimes:
            pids = r.node.pids(snapshot) if r.node is not None else []
            if pids:
                out.append({"namespace": r.ns, "pod": r.name, "cluster": r.cluster, "pids": pids,
                            "temp_dir": str(r.node.temp_dir), "terminating": r.stopping})
        return out

    def shutdown(self) -> None:
        """Stop every pod's processes and wait for them (sandbox teardown): the node goes down,
        so pods already terminating (a deleted run's, with 30 s of grace) get no more time than
        the others: their processes may have left the container's process group (a launcher
        that signals its command's group), where only this stop reaches them."""
        self.stop()
        with self.lock:
            runtimes = list({id(r): r for r in [*self.pods.values(), *self.terminating.values()]}.values())
        for rt in runtimes:
            self._terminate(rt, None, NODE_SHUTDOWN_GRACE_S)
        for t in list(self.stoppers):
            t.join(timeout=30)
        shutil.rmtree(self.volume_root, ignore_errors=True)


def _enter_mounts(node: PodProcess) -> list[str]:
    """`nsenter` into the container's mount namespace when its process has one of its own."""
    proc = node.proc
    if proc is None or proc.poll() is not None:
        return []
    try:
        if os.readlink(f"/proc/{proc.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            return []
    except OSError:
        return []
    return ["nsenter", f"--mount=/proc/{proc.pid}/ns/mnt", "--"]


def _in_kubelets_hands(pod: dict) -> bool:
    """Not finished (Succeeded or Failed), or being deleted."""
    return bool(pod["metadata"].get("deletionTimestamp")) or (pod.get("status") or {}).get("phase") not in TERMINAL


def _qos(pod: dict) -> str:
    """The pod's QoS class, as the apiserver computes it from its containers' resources."""
    resources = [c.get("resources") or {} for c in (pod.get("spec") or {}).get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"

    def guaranteed(r: dict) -> bool:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        return all(k in limits and quantity.parse(requests.get(k, limits[k])) == quantity.parse(limits[k])
                   for k in ("cpu", "memory"))
    return "Guaranteed" if all(guaranteed(r) for r in resources) else "Burstable"


def _image(pod: dict) -> str:
    """The Ray container's image (KubeRay's RayContainerIndex 0): which Python's Ray image the node runs."""
    return ((pod["spec"].get("containers") or [{}])[0]).get("image") or ""
