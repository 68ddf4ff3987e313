"""RayCluster lifecycle: build (CodeFlare SDK), create with the Kueue label, wait for
admission and for pods, report, and delete — never leaving a cluster holding quota."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field

from . import kube, lease
from .errors import Cancelled, ClusterError, ForeignCluster, InputError
from .queues import resolve_queue as _resolve_queue
from .rayclusters import GROUP, PLURAL, RUN_LABEL, VERSION, being_deleted, delete, get, run_of, wait_gone
from .readiness import wait_ready
from .validate import Checker, label_value
from .wait import log

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TASK_LABEL = "kfp-ray.io/task"
MANAGED_BY = lease.MANAGED_BY
# Attempts at create-or-adopt: a create can meet a cluster of that name being deleted.
CREATE_ATTEMPTS = 3


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
    """The LocalQueue to use (see queues.resolve_queue)."""
    return _resolve_queue(spec.namespace, spec.local_queue)


def check_namespace(spec: ClusterSpec) -> None:
    """The cluster must live in the task's own namespace: the CodeFlare operator's
    NetworkPolicy opens the head's dashboard (8265) and client (10001) ports only to pods of
    the cluster's namespace, so the submit and follow tasks could not reach it elsewhere."""
    own = kube.own_namespace()
    if own is None:
        log(f"cannot tell this task's own namespace; using namespace {spec.namespace!r} as given")
        return
    if spec.namespace != own:
        raise InputError("namespace", f"{spec.namespace!r} is not this pipeline's namespace {own!r}: OpenShift AI's "
                         "CodeFlare operator lets only pods of the cluster's own namespace reach its Ray dashboard "
                         "(NetworkPolicy), so the submit and follow tasks could not reach a cluster there",
                         f"leave namespace empty (the pipeline's own, {own!r}), or run the pipeline in the "
                         f"{spec.namespace!r} project")


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


def build_manifest(spec: ClusterSpec, queue: str, lease_seconds: float = lease.DEFAULT_LEASE_S) -> dict:
    """The RayCluster the CodeFlare SDK builds, plus what the SDK cannot express: the queue
    label it drops when it cannot read LocalQueues, run/task labels, the data connection as
    envFrom, a node selector for GPU workers, and its lease (lease.py) of lease_seconds."""
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
    meta.setdefault("annotations", {})[lease.RUN_ID_ANNOTATION] = spec.run_id
    lease.stamp(body, lease_seconds)
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
def _owned_by(rc: dict, run_id: str) -> bool:
    return run_of(rc) == label_value(run_id)


def create_or_adopt(body: dict, run_id: str) -> tuple[dict, bool]:
    """Create the RayCluster; if this run already created it (a retried task), adopt it.
    A cluster of that name being deleted is never adopted: wait until it is gone, then
    create anew."""
    name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
    for _ in range(CREATE_ATTEMPTS):
        existing = get(name, ns)
        if existing is not None and being_deleted(existing):
            wait_gone(existing, why=" (it is being deleted, e.g. by an earlier attempt's cleanup; a new one is "
                                    "created once it is)")
            continue
        if existing is None:
            try:
                return kube.call(kube.custom().create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body,
                                 what=f"create RayCluster {name}"), False
            except Exception as exc:  # noqa: BLE001
                if getattr(exc, "status", None) != 409:  # 409: exists (a retried create, or still being deleted)
                    raise ClusterError(f"creating RayCluster {name!r} failed: {_api_message(exc)}") from None
                continue
        if not _owned_by(existing, run_id):
            owner = run_of(existing) or "something other than kfp-ray"
            raise ForeignCluster(f"RayCluster {name!r} already exists in {ns!r} and belongs to {owner!r}, not to this "
                                 "run. Fix: choose another cluster_name, or leave it empty to derive one from the run id")
        log(f"RayCluster {name} already exists for this run (a retried task): adopting it")
        return existing, True
    raise ClusterError(f"could not create RayCluster {name!r} in {ns!r}: it kept being deleted and recreated by "
                       "someone else. Fix: choose another cluster_name")


def _api_message(exc: BaseException) -> str:
    import json

    body = getattr(exc, "body", None)
    try:
        return json.loads(body)["message"]
    except Exception:  # noqa: BLE001
        return f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".strip()


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


# --- the whole provisioning -------------------------------------------------------------
def provision(spec: ClusterSpec, admission_timeout: float, startup_timeout: float,
              lease_seconds: float = lease.DEFAULT_LEASE_S, renew_every_seconds: float = lease.DEFAULT_RENEW_S) -> Provisioned:
    """Check inputs, create (or adopt) the cluster, wait for admission and pods. On any
    failure or cancellation after creation, delete the cluster before raising.

    The cluster's lease is stamped to cover admission, startup and one lease more, renewed
    every renew_every_seconds while waiting, and renewed once more when ready so that a
    whole lease covers the hand-over to the tasks that use the cluster next."""
    from .signals import sigterm_raises

    spec.check()
    c = Checker()
    c.positive_seconds("admission_timeout", admission_timeout)
    c.positive_seconds("startup_timeout", startup_timeout)
    lease.check(c, lease_seconds, renew_every_seconds)
    c.done()
    check_namespace(spec)
    check_data_connection(spec)
    queue = resolve_queue(spec)
    body = build_manifest(spec, queue, lease_seconds=admission_timeout + startup_timeout + lease_seconds)
    created = False
    with sigterm_raises():
        try:
            rc, adopted = create_or_adopt(body, spec.run_id)
            created = True
            log(f"RayCluster {spec.name} {'adopted' if adopted else 'created'} in {spec.namespace}, LocalQueue {queue}")
            # An adopted cluster's lease may be old: renew at once; a new one's was just stamped.
            renewer = lease.Renewer(spec.name, spec.namespace, lease_seconds, renew_every_seconds,
                                    first_in=0.0 if adopted else renew_every_seconds)
            waited = wait_ready(spec.name, spec.namespace, queue, admission_timeout, startup_timeout,
                                queue_note="" if spec.local_queue else ", chosen because local_queue was empty",
                                heartbeat=renewer)
            renewer.renew()
            url = dashboard_url(spec.name, spec.namespace)
            log(f"RayCluster {spec.name} is ready; dashboard {url}")
            return Provisioned(spec.name, spec.namespace, url, waited.queued_seconds, waited.starting_seconds, adopted)
        except BaseException as exc:
            if created:
                log(f"provisioning failed ({type(exc).__name__}); deleting RayCluster {spec.name} so it holds no quota")
                # A cancelled task has about 30 s before SIGKILL: ask for the deletion, wait briefly.
                cancelled = isinstance(exc, Cancelled) or not isinstance(exc, Exception)
                with contextlib.suppress(Exception):
                    delete(spec.name, spec.namespace, timeout=15.0 if cancelled else 120.0)
            raise
