"""RayCluster lifecycle: build (CodeFlare SDK), create with the Kueue label, wait for
admission and for pods, report, and delete — never leaving a cluster holding quota."""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import kube, lease
from .errors import AccessDenied, Cancelled, ClusterError, ForeignCluster, InputError
from .queues import resolve_queue as _resolve_queue
from .rayclusters import GONE_TIMEOUT, GROUP, PLURAL, RUN_LABEL, VERSION, being_deleted, get, request_delete, run_of, wait_gone
from .rayclusters import delete as delete  # re-exported: cluster.delete
from .readiness import wait_ready
from .signals import cleanup_deadline
from .validate import Checker, label_value
from .wait import Backoff, combine, first_line, log

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


@dataclass
class Creation:
    """What cleanup must know: whether a create was sent (from the moment it is: a SIGTERM
    during the call may leave it to land after), and the object once known."""
    sent: bool = False
    rc: dict | None = None

    @property
    def uid(self) -> str | None:
        return self.rc["metadata"]["uid"] if self.rc else None


def create_or_adopt(body: dict, run_id: str, creation: Creation | None = None) -> tuple[dict, bool]:
    """Create the RayCluster; if this run already created it (a retried task), adopt it.
    A cluster of that name being deleted is never adopted: wait until it is gone, then
    create anew. `creation` records the create as sent before the call, and the object."""
    name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
    creation = creation if creation is not None else Creation()
    for _ in range(CREATE_ATTEMPTS):
        existing = get(name, ns)
        if existing is not None and being_deleted(existing):
            wait_gone(existing, why=" (it is being deleted, e.g. by an earlier attempt's cleanup; a new one is "
                                    "created once it is)")
            continue
        if existing is None:
            creation.sent = True
            log(f"creating RayCluster {name} in {ns}")
            try:
                creation.rc = kube.call(kube.custom().create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                                        body, what=f"create RayCluster {name}")
                return creation.rc, False
            except AccessDenied:
                raise
            except Exception as exc:  # noqa: BLE001
                if getattr(exc, "status", None) != 409:  # 409: exists (a retried create, or still being deleted)
                    raise ClusterError(f"creating RayCluster {name!r} failed: {_api_message(exc)}") from None
                continue
        if not _owned_by(existing, run_id):
            owner = run_of(existing) or "something other than kfp-ray"
            raise ForeignCluster(f"RayCluster {name!r} already exists in {ns!r} and belongs to {owner!r}, not to this "
                                 "run. Fix: choose another cluster_name, or leave it empty to derive one from the run id")
        log(f"RayCluster {name} already exists for this run (a retried task): adopting it")
        creation.rc = existing
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
              heartbeat: Callable[[], None] | None = None, lease_seconds: float = lease.DEFAULT_LEASE_S,
              renew_every_seconds: float = lease.DEFAULT_RENEW_S) -> Provisioned:
    """Check inputs, create (or adopt) the cluster, wait for admission and pods. On any
    failure or cancellation from the moment the create is sent, delete the cluster (if it
    is this run's) before raising; when cancelled, within the grace period.

    The cluster's lease is stamped to cover admission, startup and one lease more, renewed
    every renew_every_seconds while waiting (besides `heartbeat`), and renewed once more when
    ready, so that a whole lease covers the hand-over to the tasks that use it next."""
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
    creation = Creation()
    with sigterm_raises():
        try:
            try:
                rc, adopted = create_or_adopt(body, spec.run_id, creation)
                log(f"RayCluster {spec.name} {'adopted' if adopted else 'created'} in {spec.namespace}, LocalQueue {queue}")
                # An adopted cluster's lease may be old: renew at once; a new one's was just stamped.
                renewer = lease.Renewer(spec.name, spec.namespace, lease_seconds, renew_every_seconds,
                                        first_in=0.0 if adopted else renew_every_seconds)
                waited = wait_ready(spec.name, spec.namespace, queue, admission_timeout, startup_timeout,
                                    queue_note="" if spec.local_queue else ", chosen because local_queue was empty",
                                    heartbeat=combine(renewer, heartbeat))
                renewer.renew()
                url = dashboard_url(spec.name, spec.namespace)
                log(f"RayCluster {spec.name} is ready; dashboard {url}")
                return Provisioned(spec.name, spec.namespace, url, waited.queued_seconds, waited.starting_seconds, adopted)
            except Exception as exc:
                if creation.sent or creation.rc:
                    log(f"provisioning failed ({type(exc).__name__}); deleting RayCluster {spec.name} so it holds no quota")
                    with contextlib.suppress(Exception):
                        _delete_if_ours(spec, creation, time.monotonic() + GONE_TIMEOUT)
                raise
        except Cancelled as exc:  # also while cleaning up after a failure
            if creation.sent or creation.rc:
                cleanup_cancelled(spec, creation, cleanup_deadline(exc))
            raise


def _ours(rc: dict, spec: ClusterSpec, creation: Creation) -> bool:
    return rc["metadata"]["uid"] == creation.uid if creation.uid else _owned_by(rc, spec.run_id)


def _delete_if_ours(spec: ClusterSpec, creation: Creation, deadline: float) -> None:
    """After a failure: delete the cluster this task created or adopted (looked up by name
    when the create's answer never came), and wait until it is gone."""
    rc = creation.rc or get(spec.name, spec.namespace)
    if rc is None or not _ours(rc, spec, creation):
        return
    if not being_deleted(rc):
        request_delete(spec.name, spec.namespace, rc["metadata"]["uid"])
    wait_gone(rc, max(1.0, deadline - time.monotonic()))
    log(f"deleted RayCluster {spec.name}")


def cleanup_cancelled(spec: ClusterSpec, creation: Creation, deadline: float) -> bool:
    """On SIGTERM: request the deletion at once (the object is known) or as soon as it
    exists (a create still in flight may land after the signal), then wait until it is
    gone, never past `deadline`. True when it is known gone."""
    name, ns = spec.name, spec.namespace
    log(f"cancelled: deleting RayCluster {name} now; waiting at most {max(0.0, deadline - time.monotonic()):.0f}s "
        "for it to be gone")
    requested = False
    if creation.uid:
        try:
            requested = request_delete(name, ns, creation.uid, deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - looked up again below
            log(f"deleting RayCluster {name} failed ({type(exc).__name__}: {first_line(exc)}); trying again")
    backoff = Backoff(0.1, 1.5, 1.0)
    while True:
        try:
            rc = get(name, ns, deadline=deadline)
            if rc is None and (creation.uid or requested):
                log(f"RayCluster {name} is gone")
                return True
            if rc is not None and not _ours(rc, spec, creation):
                log(f"RayCluster {name} is not this run's (another run's, or someone else's): leaving it")
                return True
            if rc is not None and not being_deleted(rc):
                requested = request_delete(name, ns, rc["metadata"]["uid"], deadline=deadline) or requested
                creation.rc = creation.rc or rc
        except Exception as exc:  # noqa: BLE001 - keep trying until the deadline
            log(f"while deleting RayCluster {name}: {type(exc).__name__}: {first_line(exc)}")
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(backoff.next(), left))
    if requested or creation.uid:
        log(f"RayCluster {name} is still being deleted as the grace period ends; its deletion is requested, and "
            "the exit handler's teardown makes sure")
    else:
        log(f"no RayCluster {name} appeared after the create request was cut short; should it land after all, the "
            "exit handler's teardown (and the lease sweeper) remove it")
    return False
