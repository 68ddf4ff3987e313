"""RayCluster lifecycle: build (CodeFlare SDK), create with the Kueue label, wait for
admission and for pods, report, and delete — never leaving a cluster holding quota."""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from . import kube
from .errors import AdmissionTimeout, ClusterError, ForeignCluster, InputError, PodsFailing, StartupTimeout
from .validate import Checker, label_value
from .wait import Backoff, log, poll

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_QUEUE_ANNOTATION = "kueue.x-k8s.io/default-queue"
RUN_LABEL = "kfp-ray.io/run-id"
TASK_LABEL = "kfp-ray.io/task"
MANAGED_BY = ("app.kubernetes.io/managed-by", "kfp-ray")
# Waiting reasons after which a container will not start without a change from the user.
FATAL_WAITING = {"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError",
                 "CreateContainerError"}
PROGRESS_EVERY = 15.0


@dataclass
class ClusterSpec:
    name: str
    namespace: str
    run_id: str
    task: str = "provision-ray-cluster"
    local_queue: str = ""
    num_workers: int = 1
    head_cpu: str = "1"
    head_cpu_limit: str = ""
    head_memory: str = "4Gi"
    head_memory_limit: str = ""
    worker_cpu: str = "1"
    worker_cpu_limit: str = ""
    worker_memory: str = "4Gi"
    worker_memory_limit: str = ""
    worker_gpus: int = 0
    image: str = ""
    env: dict = field(default_factory=dict)
    data_connection: str = ""
    tolerations: list = field(default_factory=list)
    node_selector: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)

    def check(self) -> None:
        """Everything that can be checked without the API."""
        c = Checker()
        c.name("cluster_name", self.name)
        c.name("namespace", self.namespace, max_len=63)
        c.not_empty("run_id", self.run_id, "pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id")
        c.at_least("num_workers", self.num_workers, 0, "give 0 (head only) or more workers")
        c.at_least("worker_gpus", self.worker_gpus, 0, "give 0 for CPU workers, or the GPUs per worker")
        for fld in ("head_cpu", "worker_cpu"):
            c.cpu(fld, getattr(self, fld))
        for fld in ("head_memory", "worker_memory"):
            c.memory(fld, getattr(self, fld))
        for fld in ("head_cpu_limit", "worker_cpu_limit"):
            if getattr(self, fld):
                c.cpu(fld, getattr(self, fld))
        for fld in ("head_memory_limit", "worker_memory_limit"):
            if getattr(self, fld):
                c.memory(fld, getattr(self, fld))
        if self.local_queue:
            c.name("local_queue", self.local_queue, max_len=63)
        if self.data_connection:
            c.name("data_connection", self.data_connection, max_len=253)
        c.env("env", self.env)
        c.labels("labels", self.labels)
        c.labels("node_selector", self.node_selector)
        if not isinstance(self.tolerations, list) or not all(isinstance(t, dict) for t in self.tolerations):
            c.fail("tolerations", "must be a list of toleration objects",
                   'give e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]')
        else:
            for i, t in enumerate(self.tolerations):
                unknown = set(t) - {"key", "operator", "value", "effect", "tolerationSeconds"}
                if unknown or t.get("operator", "Equal") not in ("Equal", "Exists"):
                    c.fail(f"tolerations[{i}]", f"{t!r} is not a toleration",
                           "use keys key/operator(Equal|Exists)/value/effect")
        c.done()


@dataclass
class Provisioned:
    name: str
    namespace: str
    dashboard_url: str
    queued_seconds: float
    starting_seconds: float
    adopted: bool


# --- preflight: API checks before anything is created ---------------------------------
def resolve_queue(spec: ClusterSpec) -> str:
    """The LocalQueue to use: the given one (checked where readable) or the namespace default."""
    co = kube.custom()
    if spec.local_queue:
        try:
            kube.call(co.get_namespaced_custom_object, "kueue.x-k8s.io", "v1beta1", spec.namespace, "localqueues",
                      spec.local_queue, what="read the LocalQueue")
        except Exception as exc:  # noqa: BLE001
            if kube.not_found(exc):
                raise InputError("local_queue", f"LocalQueue {spec.local_queue!r} does not exist in namespace "
                                 f"{spec.namespace!r}", f"use one listed by `oc get localqueues -n {spec.namespace}`") from None
            if not kube.forbidden(exc):
                raise
            log(f"cannot verify LocalQueue {spec.local_queue!r} (this service account may not read Kueue objects); "
                "using it as given: if it does not exist, the cluster waits until admission_timeout")
        return spec.local_queue
    try:
        queues = kube.call(co.list_namespaced_custom_object, "kueue.x-k8s.io", "v1beta1", spec.namespace, "localqueues",
                           what="list LocalQueues")["items"]
    except Exception as exc:  # noqa: BLE001
        if kube.forbidden(exc):
            raise InputError("local_queue", "no queue given, and this service account may not list LocalQueues to find "
                             f"the default one in {spec.namespace!r}",
                             "set local_queue (see `oc get localqueues`), or let the service account read "
                             "localqueues.kueue.x-k8s.io") from None
        if kube.not_found(exc):
            raise InputError("local_queue", "Kueue is not installed (no LocalQueue API)",
                             "enable Kueue in the DataScienceCluster, or ask your administrator") from None
        raise
    for q in queues:
        if str((q["metadata"].get("annotations") or {}).get(DEFAULT_QUEUE_ANNOTATION, "")).lower() == "true":
            return q["metadata"]["name"]
    raise InputError("local_queue", f"no queue given and namespace {spec.namespace!r} has no default LocalQueue",
                     f"set local_queue to one of: {', '.join(q['metadata']['name'] for q in queues) or '(none exist)'}")


def check_data_connection(spec: ClusterSpec) -> None:
    if not spec.data_connection:
        return
    try:
        kube.call(kube.core().read_namespaced_secret, spec.data_connection, spec.namespace, what="read the data connection")
    except Exception as exc:  # noqa: BLE001
        if kube.not_found(exc):
            raise InputError("data_connection", f"secret {spec.data_connection!r} not found in namespace {spec.namespace!r}",
                             "give the secret of a data connection (RHOAI names it aws-connection-<name>)") from None
        raise


# --- building the manifest --------------------------------------------------------------
def default_image() -> str:
    from codeflare_sdk.common.utils import constants

    return getattr(constants, "CUDA_PY311_RUNTIME_IMAGE", "") or "quay.io/modh/ray:2.52.1-py311-cu121"


def build_manifest(spec: ClusterSpec, queue: str) -> dict:
    """The RayCluster the CodeFlare SDK builds, plus what the SDK cannot express: the queue
    label it drops when it cannot read LocalQueues, run/task labels, the data connection as
    envFrom, and a node selector for GPU workers."""
    kube.use_with_codeflare_sdk()
    from codeflare_sdk import Cluster, ClusterConfiguration
    from kubernetes.client import V1Toleration

    tolerations = [V1Toleration(key=t.get("key"), operator=t.get("operator", "Equal"), value=t.get("value"),
                                effect=t.get("effect"), toleration_seconds=t.get("tolerationSeconds"))
                   for t in spec.tolerations] or None
    config = ClusterConfiguration(
        name=spec.name, namespace=spec.namespace, num_workers=spec.num_workers,
        head_cpu_requests=spec.head_cpu, head_cpu_limits=spec.head_cpu_limit or spec.head_cpu,
        head_memory_requests=spec.head_memory, head_memory_limits=spec.head_memory_limit or spec.head_memory,
        worker_cpu_requests=spec.worker_cpu, worker_cpu_limits=spec.worker_cpu_limit or spec.worker_cpu,
        worker_memory_requests=spec.worker_memory, worker_memory_limits=spec.worker_memory_limit or spec.worker_memory,
        worker_extended_resource_requests={"nvidia.com/gpu": spec.worker_gpus} if spec.worker_gpus else {},
        image=spec.image or default_image(), envs={k: str(v) for k, v in spec.env.items()},
        labels=dict(spec.labels), local_queue=queue, worker_tolerations=tolerations)
    # The SDK prints (rather than raises) what it could not look up; we handled those above.
    with contextlib.redirect_stdout(io.StringIO()):
        body = Cluster(config).resource_yaml
    meta = body["metadata"]
    meta.setdefault("labels", {}).update({
        QUEUE_LABEL: queue, RUN_LABEL: label_value(spec.run_id), TASK_LABEL: label_value(spec.task), MANAGED_BY[0]: MANAGED_BY[1]})
    meta.setdefault("annotations", {})["kfp-ray.io/run-id"] = spec.run_id
    templates = [body["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in body["spec"].get("workerGroupSpecs", [])]
    if spec.data_connection:
        for tpl in templates:
            for c in tpl["spec"]["containers"]:
                c.setdefault("envFrom", []).append({"secretRef": {"name": spec.data_connection}})
    if spec.node_selector:
        for g in body["spec"].get("workerGroupSpecs", []):
            g["template"]["spec"].setdefault("nodeSelector", {}).update(spec.node_selector)
    return body


# --- create or adopt -------------------------------------------------------------------
def get(name: str, namespace: str) -> dict | None:
    try:
        return kube.call(kube.custom().get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
                         what=f"read RayCluster {name}")
    except Exception as exc:  # noqa: BLE001
        if kube.not_found(exc):
            return None
        raise


def _owned_by(rc: dict, run_id: str) -> bool:
    return (rc["metadata"].get("labels") or {}).get(RUN_LABEL) == label_value(run_id)


def create_or_adopt(body: dict, run_id: str) -> tuple[dict, bool]:
    """Create the RayCluster; if this run already created it (a retried task), adopt it."""
    name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
    existing = get(name, ns)
    if existing is None:
        try:
            return kube.call(kube.custom().create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body,
                             what=f"create RayCluster {name}"), False
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) != 409:  # 409: a retried create that had gone through
                raise ClusterError(f"creating RayCluster {name!r} failed: {_api_message(exc)}") from None
            existing = get(name, ns)
            if existing is None:
                raise
    if not _owned_by(existing, run_id):
        owner = (existing["metadata"].get("labels") or {}).get(RUN_LABEL) or "something other than kfp-ray"
        raise ForeignCluster(f"RayCluster {name!r} already exists in {ns!r} and belongs to {owner!r}, not to this run. "
                             "Fix: choose another cluster_name, or leave it empty to derive one from the run id")
    log(f"RayCluster {name} already exists for this run (a retried task): adopting it")
    return existing, True


def _api_message(exc: BaseException) -> str:
    import json

    body = getattr(exc, "body", None)
    try:
        return json.loads(body)["message"]
    except Exception:  # noqa: BLE001
        return f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".strip()


# --- waiting ---------------------------------------------------------------------------
class _Kueue:
    """Kueue's view of a cluster, when this service account may read it (RHOAI's
    pipeline-runner may not: then only the suspension is visible)."""

    def __init__(self):
        self.readable = True

    def describe(self, rc: dict) -> str:
        if not self.readable:
            return ""
        co, ns = kube.custom(), rc["metadata"]["namespace"]
        try:
            wls = co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads",
                                                   label_selector=f"kueue.x-k8s.io/job-uid={rc['metadata']['uid']}")["items"]
            wls = wls or [w for w in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads")["items"]
                          if any(r.get("uid") == rc["metadata"]["uid"] for r in w["metadata"].get("ownerReferences") or [])]
            parts = []
            for w in wls:
                cond = next((c for c in (w.get("status") or {}).get("conditions", []) if c["type"] == "QuotaReserved"), None)
                if cond and cond.get("message"):
                    parts.append(f"Kueue: {cond['message']}")
                queue = w["spec"].get("queueName")
                lq = co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "localqueues", queue)
                cq_name = lq["spec"]["clusterQueue"]
                cq = co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", cq_name)
                used = {r["name"]: r["total"] for f in (cq.get("status") or {}).get("flavorsUsage", []) for r in f["resources"]}
                quota = {r["name"]: str(r["nominalQuota"]) for g in cq["spec"].get("resourceGroups", [])
                         for f in g.get("flavors", []) for r in f.get("resources", [])}
                usage = ", ".join(f"{k} {used.get(k, '0')}/{v}" for k, v in quota.items())
                parts.append(f"ClusterQueue {cq_name} in use: {usage}; {cq.get('status', {}).get('pendingWorkloads', 0)} pending")
            return "; ".join(parts)
        except Exception as exc:  # noqa: BLE001
            if kube.forbidden(exc):
                self.readable = False
                log("(this service account may not read Kueue objects, so the queue's reason is not shown)")
            return ""


def suspended(rc: dict) -> bool:
    return bool((rc.get("spec") or {}).get("suspend"))


def wait_admitted(name: str, namespace: str, timeout: float, queue: str) -> float:
    """Phase 1: until Kueue admits the cluster (it stops being suspended)."""
    started = time.monotonic()
    kueue = _Kueue()
    state = {"last": -PROGRESS_EVERY, "why": ""}

    def check():
        rc = get(name, namespace)
        if rc is None:
            raise ClusterError(f"RayCluster {name!r} disappeared while queued (deleted by someone else?)")
        if not suspended(rc):
            return True
        now = time.monotonic()
        if now - state["last"] >= PROGRESS_EVERY:
            state["last"] = now
            state["why"] = kueue.describe(rc)
            log(f"queued: waiting for Kueue admission in LocalQueue {queue} ({now - started:.0f}s)"
                + (f" - {state['why']}" if state["why"] else ""))
        return None

    def timed_out():
        return AdmissionTimeout(
            f"RayCluster {name!r} was not admitted by Kueue within {timeout:.0f}s (LocalQueue {queue!r})"
            + (f": {state['why']}" if state["why"] else "")
            + f". Fix: check that LocalQueue {queue!r} exists (`oc get localqueues -n {namespace}`), raise "
              "admission_timeout to wait longer, request fewer resources, or ask for more quota")

    poll(check, timeout, f"Kueue to admit RayCluster {name}", Backoff(0.25, 1.5, 5.0), on_timeout=timed_out)
    return time.monotonic() - started


def pod_problem(pod) -> str | None:
    """Why a pod cannot start without a change from the user, or None."""
    for cs in (pod.status.container_statuses or []) + (pod.status.init_container_statuses or []):
        waiting = cs.state.waiting if cs.state else None
        if waiting and waiting.reason in FATAL_WAITING:
            fix = ("check the image name and that the cluster can pull it (image pull secret)"
                   if "Image" in waiting.reason else "check the secrets and config maps the pod refers to (data_connection)")
            return f"pod {pod.metadata.name}: {waiting.reason}: {waiting.message or ''}. Fix: {fix}"
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and "untolerated taint" in (cond.message or ""):
            return (f"pod {pod.metadata.name} cannot be scheduled: {cond.message}. Fix: add a matching toleration "
                    "(`tolerations`, e.g. nvidia.com/gpu for GPU nodes) or a node_selector for nodes it may use")
    return None


def _pod_summary(pods) -> str:
    parts = []
    for p in pods:
        role = (p.metadata.labels or {}).get("ray.io/node-type", "pod")
        waiting = next((cs.state.waiting.reason for cs in p.status.container_statuses or []
                        if cs.state and cs.state.waiting), None)
        ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        parts.append(f"{role} {p.status.phase}{' ready' if ready else ''}{f' ({waiting})' if waiting else ''}")
    return ", ".join(parts) or "no pods yet"


def wait_started(name: str, namespace: str, timeout: float) -> float:
    """Phase 2: until every Ray pod is ready; fail at once on pods that cannot start."""
    started = time.monotonic()
    state = {"last": -PROGRESS_EVERY, "pods": "no pods yet"}
    v1 = kube.core()

    def check():
        rc = get(name, namespace)
        if rc is None:
            raise ClusterError(f"RayCluster {name!r} disappeared while starting (deleted by someone else?)")
        if ((rc.get("status") or {}).get("state") or "").lower() == "ready":
            return True
        pods = kube.call(v1.list_namespaced_pod, namespace, label_selector=f"ray.io/cluster={name}", what="list pods").items
        for pod in pods:
            problem = pod_problem(pod)
            if problem:
                raise PodsFailing(f"RayCluster {name!r} cannot start: {problem}")
        state["pods"] = _pod_summary(pods)
        now = time.monotonic()
        if now - state["last"] >= PROGRESS_EVERY:
            state["last"] = now
            log(f"starting: {state['pods']} ({now - started:.0f}s)")
        return None

    def timed_out():
        return StartupTimeout(f"RayCluster {name!r} was admitted but its pods were not ready within {timeout:.0f}s "
                              f"({state['pods']}). Fix: raise startup_timeout (large images take minutes to pull), "
                              "or check the pods' events: `oc describe pods -l ray.io/cluster=" + name + "`")

    poll(check, timeout, f"RayCluster {name} pods to be ready", Backoff(0.25, 1.5, 3.0), on_timeout=timed_out)
    return time.monotonic() - started


def dashboard_url(name: str, namespace: str) -> str:
    """The dashboard through the head Service: reachable from a pipeline pod, no Route or
    OAuth proxy needed."""
    try:
        svc = kube.call(kube.core().read_namespaced_service, f"{name}-head-svc", namespace, what="read the head Service")
    except Exception as exc:  # noqa: BLE001
        if kube.not_found(exc):
            return f"http://{name}-head-svc.{namespace}.svc:8265"
        raise
    port = next((p.port for p in svc.spec.ports or [] if p.name == "dashboard"), 8265)
    host = svc.spec.cluster_ip if svc.spec.cluster_ip and svc.spec.cluster_ip != "None" else f"{name}-head-svc.{namespace}.svc"
    return f"http://{host}:{port}"


# --- delete ---------------------------------------------------------------------------
def delete(name: str, namespace: str, timeout: float = 120.0) -> float | None:
    """Delete a RayCluster and wait (bounded) until it is gone. Returns its lifetime in
    seconds, or None if it did not exist. Already gone is success."""
    rc = get(name, namespace)
    if rc is None:
        return None
    lifetime = age_seconds(rc)
    try:
        kube.call(kube.custom().delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
                  what=f"delete RayCluster {name}")
    except Exception as exc:  # noqa: BLE001
        if not kube.not_found(exc):
            raise
    poll(lambda: True if get(name, namespace) is None else None, timeout, f"RayCluster {name} to be deleted",
         Backoff(0.2, 1.5, 2.0))
    log(f"deleted RayCluster {name} (lived {lifetime:.0f}s)")
    return lifetime


def age_seconds(rc: dict) -> float:
    created = rc["metadata"].get("creationTimestamp")
    if not created:
        return 0.0
    t = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - t).total_seconds())


def clusters_of_run(namespace: str, run_id: str) -> list[str]:
    items = kube.call(kube.custom().list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                      label_selector=f"{RUN_LABEL}={label_value(run_id)}", what="list the run's RayClusters")["items"]
    return [rc["metadata"]["name"] for rc in items]


# --- the whole provisioning -------------------------------------------------------------
def provision(spec: ClusterSpec, admission_timeout: float, startup_timeout: float) -> Provisioned:
    """Check inputs, create (or adopt) the cluster, wait for admission and pods. On any
    failure or cancellation after creation, delete the cluster before raising."""
    from .signals import sigterm_raises

    spec.check()
    c = Checker()
    c.positive_seconds("admission_timeout", admission_timeout)
    c.positive_seconds("startup_timeout", startup_timeout)
    c.done()
    check_data_connection(spec)
    queue = resolve_queue(spec)
    body = build_manifest(spec, queue)
    created = False
    with sigterm_raises():
        try:
            rc, adopted = create_or_adopt(body, spec.run_id)
            created = True
            log(f"RayCluster {spec.name} {'adopted' if adopted else 'created'} in {spec.namespace}, LocalQueue {queue}")
            queued = wait_admitted(spec.name, spec.namespace, admission_timeout, queue)
            log(f"admitted by Kueue after {queued:.1f}s; starting pods")
            starting = wait_started(spec.name, spec.namespace, startup_timeout)
            url = dashboard_url(spec.name, spec.namespace)
            log(f"RayCluster {spec.name} ready after {starting:.1f}s; dashboard {url}")
            return Provisioned(spec.name, spec.namespace, url, round(queued, 2), round(starting, 2), adopted)
        except BaseException as exc:
            if created:
                log(f"provisioning failed ({type(exc).__name__}); deleting RayCluster {spec.name} so it holds no quota")
                with contextlib.suppress(Exception):
                    delete(spec.name, spec.namespace)
            raise
