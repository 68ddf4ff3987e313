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
from .queues import PRIORITY_CLASS_LABEL, check_priority_class, nominal_quota
from .queues import resolve_queue as _resolve_queue
from .rayclusters import (
    GONE_TIMEOUT,
    GROUP,
    RAYCLUSTER,
    RUN_LABEL,
    VERSION,
    Kind,
    being_deleted,
    get,
    kind_of,
    request_delete,
    run_of,
    wait_gone,
)
from .rayclusters import delete as delete  # re-exported: cluster.delete
from .readiness import wait_ready
from .signals import cleanup_deadline
from .validate import Checker, identity_label, label_value, quantity, task_identity
from .wait import Backoff, combine, first_line, log

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TASK_LABEL = "kfp-ray.io/task"  # which task of the run: identity_label(task_identity(name, id))
MANAGED_BY = lease.MANAGED_BY
# Attempts at create-or-adopt: a create can meet a cluster of that name being deleted.
CREATE_ATTEMPTS = 3


@dataclass
class ClusterSpec:
    name: str
    namespace: str
    run_id: str
    task_name: str = ""  # dsl.PIPELINE_TASK_NAME_PLACEHOLDER
    task_id: str = ""    # dsl.PIPELINE_TASK_ID_PLACEHOLDER
    local_queue: str = ""
    priority_class: str = ""  # a Kueue WorkloadPriorityClass: how this cluster's Workload ranks, and who preempts whom
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

    @property
    def identity(self) -> str:
        return task_identity(self.task_name, self.task_id)

    def check(self, derived_name: bool = False) -> None:
        """Everything that can be checked without the API. `derived_name`: the name comes
        from the run and task identity, so both must be given."""
        c = Checker()
        c.name("cluster_name", self.name)
        c.dns_label("namespace", self.namespace)
        c.not_empty("run_id", self.run_id, "pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id")
        if derived_name:
            why = ("without it two provision tasks of one run (parallel branches, a ParallelFor) would share one "
                   "cluster")
            c.not_empty("task_id", self.task_id, f"pass dsl.PIPELINE_TASK_ID_PLACEHOLDER as task_id ({why}), or give "
                                                 "cluster_name")
            c.not_empty("task_name", self.task_name, f"pass dsl.PIPELINE_TASK_NAME_PLACEHOLDER as task_name ({why}), "
                                                     "or give cluster_name")
        c.at_least("num_workers", self.num_workers, 0, "give 0 (head only) or more workers")
        c.at_least("worker_gpus", self.worker_gpus, 0, "give 0 for CPU workers, or the GPUs per worker")
        for fld in ("head_cpu", "worker_cpu"):
            c.cpu(fld, getattr(self, fld))
        for fld in ("head_memory", "worker_memory"):
            c.memory(fld, getattr(self, fld))
        for role in ("head", "worker"):
            for kind, check in (("cpu", c.cpu), ("memory", c.memory)):
                request, fld = getattr(self, f"{role}_{kind}"), f"{role}_{kind}_limit"
                if getattr(self, fld):
                    check(fld, getattr(self, fld))
                    c.limit_not_below(fld, getattr(self, fld), f"{role}_{kind}", request)
        if self.local_queue:
            # Kueue v0.11 (jobframework ValidateQueueName): a DNS-1123 subdomain, in a label (63 at most)
            c.dns_subdomain("local_queue", self.local_queue, max_len=63)
        if self.priority_class:  # a WorkloadPriorityClass name, in a label
            c.dns_subdomain("priority_class", self.priority_class, max_len=63)
        if self.data_connection:
            c.dns_subdomain("data_connection", self.data_connection)
        if self.image:
            c.image("image", self.image)
        c.env("env", self.env)
        c.labels("labels", self.labels)
        c.labels("node_selector", self.node_selector)
        c.tolerations("tolerations", self.tolerations)
        c.done()


@dataclass
class Provisioned:
    name: str
    namespace: str
    dashboard_url: str
    queued_seconds: float
    starting_seconds: float
    adopted: bool
    admitted: dict = field(default_factory=dict)  # usage.admitted: the usage ledger's resources


# --- preflight: API checks before anything is created ---------------------------------
def resolve_queue(spec: ClusterSpec) -> str:
    """The LocalQueue to use (see queues.resolve_queue); the priority class checked with it."""
    queue = _resolve_queue(spec.namespace, spec.local_queue)
    check_priority_class(spec.priority_class)
    return queue


def check_namespace(spec: ClusterSpec) -> None:
    """The cluster must live in the task's own namespace: OpenShift AI's NetworkPolicy (KubeRay's
    `<name>-head` on 3.x, the CodeFlare operator's on 2.x) opens the head's dashboard (8265) and client (10001) ports only to pods of
    the cluster's namespace, so the submit and follow tasks could not reach it elsewhere."""
    own = kube.own_namespace()
    if own is None:
        log(f"cannot tell this task's own namespace; using namespace {spec.namespace!r} as given")
        return
    if spec.namespace != own:
        raise InputError("namespace", f"{spec.namespace!r} is not this pipeline's namespace {own!r}: OpenShift AI "
                         "lets only pods of the cluster's own namespace reach its Ray dashboard "
                         "(the cluster's NetworkPolicy), so the submit and follow tasks could not reach a cluster there",
                         f"leave namespace empty (the pipeline's own, {own!r}), or run the pipeline in the "
                         f"{spec.namespace!r} project")


def requested(spec: ClusterSpec, extra: dict | None = None) -> dict:
    """What Kueue counts for the cluster at least (v0.11 RayCluster integration: one pod set
    for the head, one per worker group; the CodeFlare webhook's sidecar only adds to it),
    plus `extra` (a RayJob's submitter pod: cpu, memory, pods)."""
    total = {"cpu": quantity(spec.head_cpu) + spec.num_workers * quantity(spec.worker_cpu),
             "memory": quantity(spec.head_memory) + spec.num_workers * quantity(spec.worker_memory),
             "pods": 1 + spec.num_workers}
    if spec.worker_gpus:
        total["nvidia.com/gpu"] = spec.num_workers * spec.worker_gpus
    for k, v in (extra or {}).items():
        total[k] = total.get(k, 0) + v
    return total


def _amount(resource: str, value) -> str:
    if resource == "memory":
        gib = value / 2**30
        return f"{float(gib):.4g}Gi"
    return f"{float(value):g}"


def check_quota(spec: ClusterSpec, queue: str, extra: dict | None = None) -> None:
    """Refuse a cluster that can never be admitted: more than its ClusterQueue's whole nominal
    quota (or a resource it does not offer). Only where the LocalQueue and ClusterQueue are
    readable (RHOAI's pipeline-runner may read no Kueue object: then admission_timeout ends
    the wait) and the ClusterQueue is in no cohort (it could borrow)."""
    quota = nominal_quota(spec.namespace, queue)
    if quota is None:
        log(f"the request is not checked against the quota of LocalQueue {queue!r}: this service account cannot read it "
            "and its ClusterQueue (RHOAI's pipeline-runner may read no Kueue object)")
        return
    if quota.cohort:
        return
    sizes = (f"head {spec.head_cpu} CPU / {spec.head_memory}, {spec.num_workers} worker(s) x {spec.worker_cpu} CPU / "
             f"{spec.worker_memory}" + (f" / {spec.worker_gpus} GPU" if spec.worker_gpus else "")
             + (", and the RayJob's submitter pod" if extra else ""))
    c = Checker()
    for resource, amount in requested(spec, extra).items():
        if resource not in quota.nominal:
            if resource != "pods":  # Kueue counts pods only where the ClusterQueue covers them
                c.fail("worker_gpus" if resource == "nvidia.com/gpu" else resource,
                       f"the cluster requests {_amount(resource, amount)} {resource} ({sizes}) but ClusterQueue "
                       f"{quota.cluster_queue!r} (behind LocalQueue {queue!r}) offers no {resource}: Kueue would never "
                       "admit it", f"request no {resource}, or use a LocalQueue whose ClusterQueue offers it")
            continue
        if amount > quota.nominal[resource]:
            field = {"cpu": "head_cpu/worker_cpu/num_workers", "memory": "head_memory/worker_memory/num_workers",
                     "pods": "num_workers", "nvidia.com/gpu": "worker_gpus/num_workers"}.get(resource, resource)
            c.fail(field, f"the cluster requests {_amount(resource, amount)} {resource} in total ({sizes}) but "
                          f"ClusterQueue {quota.cluster_queue!r} (behind LocalQueue {queue!r}) has a nominal quota of "
                          f"{_amount(resource, quota.nominal[resource])} {resource}: Kueue would never admit it",
                   "request less (fewer or smaller workers), or use a LocalQueue with more quota")
    c.done()


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


# Ray 2.52's drivers import the autoscaler's modules from their log thread when an autoscaler
# event arrives; racing the main thread's own import of them, that fails with "cannot import
# name 'DictCount' from partially initialized module" and breaks the Ray Client connection of
# run_ray_driver (ray-project/ray#63317, fixed after 2.52 by #63410). Ray drivers on the head
# (the Ray Client server's, the Job API's) then skip those events: the "(autoscaler +Ns)" lines a
# fixed-size KubeRay cluster has little use for. A user's own value in `env` wins.
QUIET_AUTOSCALER_EVENTS = ("RAY_SCHEDULER_EVENTS", "0")


def build_manifest(spec: ClusterSpec, queue: str, lease_seconds: float = lease.DEFAULT_LEASE_S) -> dict:
    """The RayCluster the CodeFlare SDK builds, plus what the SDK cannot express: the queue
    label it drops when it cannot read LocalQueues, run/task labels, the data connection as
    envFrom, QUIET_AUTOSCALER_EVENTS, a node selector for GPU workers, and its lease (lease.py)
    of lease_seconds."""
    kube.use_with_codeflare_sdk()
    from codeflare_sdk import Cluster, ClusterConfiguration
    from kubernetes.client import V1Toleration

    # tolerationSeconds is an int64: a KFP list input may carry it as 300.0 (protobuf numbers are doubles)
    tolerations = [V1Toleration(key=t.get("key"), operator=t.get("operator", "Equal"), value=t.get("value"),
                                effect=t.get("effect"), toleration_seconds=None if t.get("tolerationSeconds") is None
                                else int(t["tolerationSeconds"]))
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
        QUEUE_LABEL: queue, RUN_LABEL: label_value(spec.run_id), TASK_LABEL: identity_label(spec.identity),
        MANAGED_BY[0]: MANAGED_BY[1]})
    if spec.priority_class:  # Kueue reads it on the top-level job (the RayJob copies these labels)
        meta["labels"][PRIORITY_CLASS_LABEL] = spec.priority_class
    meta.setdefault("annotations", {}).update({lease.RUN_ID_ANNOTATION: spec.run_id, TASK_LABEL: spec.identity})
    lease.stamp(body, lease_seconds)
    templates = [body["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in body["spec"].get("workerGroupSpecs", [])]
    for c in (c for tpl in templates for c in tpl["spec"]["containers"]):
        if spec.data_connection:
            c.setdefault("envFrom", []).append({"secretRef": {"name": spec.data_connection}})
        env = c.setdefault("env", [])
        if not any(e.get("name") == QUIET_AUTOSCALER_EVENTS[0] for e in env):
            env.append({"name": QUIET_AUTOSCALER_EVENTS[0], "value": QUIET_AUTOSCALER_EVENTS[1]})
    if spec.node_selector:
        for g in body["spec"].get("workerGroupSpecs", []):
            g["template"]["spec"].setdefault("nodeSelector", {}).update(spec.node_selector)
    return body


# --- create or adopt -------------------------------------------------------------------
def task_of(rc: dict) -> str | None:
    return (rc["metadata"].get("labels") or {}).get(TASK_LABEL)


def owner_labels(spec: ClusterSpec) -> dict:
    """The labels that say which run and which task of it a cluster belongs to."""
    return {RUN_LABEL: label_value(spec.run_id), TASK_LABEL: identity_label(spec.identity)}


def _owned_by(rc: dict, mine: dict) -> bool:
    """This task of this run created it: run and task labels both match (a sibling task of
    the same run, e.g. another ParallelFor iteration, does not own it)."""
    return run_of(rc) == mine[RUN_LABEL] and task_of(rc) == mine[TASK_LABEL]


@dataclass
class Creation:
    """What cleanup must know: whether a create was sent (from the moment it is: a SIGTERM
    during the call may leave it to land after), and the object once known."""
    sent: bool = False
    rc: dict | None = None
    kind: Kind = RAYCLUSTER

    @property
    def uid(self) -> str | None:
        return self.rc["metadata"]["uid"] if self.rc else None


def create_or_adopt(body: dict, creation: Creation | None = None) -> tuple[dict, bool]:
    """Create the RayCluster (or RayJob: body's kind); if this very task of this run already
    created it (a retried task), adopt it. One of that name being deleted is never adopted:
    wait until it is gone, then create anew. `creation` records the create as sent before the
    call, and the object."""
    name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
    kind = kind_of(body)
    creation = creation if creation is not None else Creation()
    for _ in range(CREATE_ATTEMPTS):
        existing = get(name, ns, kind=kind)
        if existing is not None and being_deleted(existing):
            wait_gone(existing, why=" (it is being deleted, e.g. by an earlier attempt's cleanup; a new one is "
                                    "created once it is)")
            continue
        if existing is None:
            creation.sent = True
            log(f"creating {kind.name} {name} in {ns}")
            try:
                creation.rc = kube.call(kube.custom().create_namespaced_custom_object, GROUP, VERSION, ns, kind.plural,
                                        body, what=f"create {kind.name} {name}")
                return creation.rc, False
            except AccessDenied:
                raise
            except Exception as exc:  # noqa: BLE001
                if getattr(exc, "status", None) != 409:  # 409: exists (a retried create, or still being deleted)
                    raise ClusterError(f"creating {kind.name} {name!r} failed: {_api_message(exc)}") from None
                continue
        mine = {k: body["metadata"]["labels"][k] for k in (RUN_LABEL, TASK_LABEL)}
        if not _owned_by(existing, mine):
            owner, task = run_of(existing), task_of(existing)
            if owner is None:
                whose = "something other than kfp-ray"
            elif owner == mine[RUN_LABEL]:
                whose = f"another task of this run ({TASK_LABEL}={task!r}), not to this one"
            else:
                whose = f"{owner!r}, not to this run"
            field = "cluster_name" if kind.name == "RayCluster" else "job_name"
            raise ForeignCluster(f"{kind.name} {name!r} already exists in {ns!r} and belongs to {whose}. Fix: choose "
                                 f"another {field}, or leave it empty to derive one from the run and task")
        log(f"{kind.name} {name} already exists for this run (a retried task): adopting it")
        creation.rc = existing
        return existing, True
    raise ClusterError(f"could not create {kind.name} {name!r} in {ns!r}: it kept being deleted and recreated by "
                       "someone else. Fix: choose another name")


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
              renew_every_seconds: float = lease.DEFAULT_RENEW_S, derived_name: bool = False,
              image_pull_grace: float | None = None) -> Provisioned:
    """Check inputs, create (or adopt) the cluster, wait for admission and pods. On any
    failure or cancellation from the moment the create is sent, delete the cluster (if it
    is this task's) before raising; when cancelled, within the grace period.
    `derived_name`: spec.name was derived from the run and task identity.

    The cluster's lease is stamped to cover admission, startup and one lease more, renewed
    every renew_every_seconds while waiting (besides `heartbeat`), and handed on when ready
    (lease.HANDOFF_S, never less than one lease): no task renews it until the next one starts."""
    from .signals import sigterm_raises

    spec.check(derived_name=derived_name)
    c = Checker()
    c.positive_seconds("admission_timeout", admission_timeout)
    c.positive_seconds("startup_timeout", startup_timeout)
    lease.check(c, lease_seconds, renew_every_seconds)
    c.done()
    check_namespace(spec)
    check_data_connection(spec)
    from .queue_position import QueuePosition
    from .queues import read_once

    with read_once():
        queue = resolve_queue(spec)
        check_quota(spec, queue)
    body = build_manifest(spec, queue, lease_seconds=admission_timeout + startup_timeout + lease_seconds)
    creation = Creation()
    with sigterm_raises():
        try:
            try:
                rc, adopted = create_or_adopt(body, creation)
                log(f"RayCluster {spec.name} {'adopted' if adopted else 'created'} in {spec.namespace}, LocalQueue {queue}")
                # An adopted cluster's lease may be old: renew at once; a new one's was just stamped.
                renewer = lease.Renewer(spec.name, spec.namespace, lease_seconds, renew_every_seconds,
                                        first_in=0.0 if adopted else renew_every_seconds)
                waited = wait_ready(spec.name, spec.namespace, queue, admission_timeout, startup_timeout,
                                    queue_note="" if spec.local_queue else ", chosen because local_queue was empty",
                                    heartbeat=combine(renewer, heartbeat), position=QueuePosition(queue, spec.namespace),
                                    **({} if image_pull_grace is None else {"image_pull_grace": image_pull_grace}))
                renewer.hand_off()  # no task renews until the next one starts (lease.py: the hand-off)
                url = dashboard_url(spec.name, spec.namespace)
                log(f"RayCluster {spec.name} is ready; dashboard {url}")
                return Provisioned(spec.name, spec.namespace, url, waited.queued_seconds, waited.starting_seconds, adopted,
                                   waited.admitted)
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
    return rc["metadata"]["uid"] == creation.uid if creation.uid else _owned_by(rc, owner_labels(spec))


def _delete_if_ours(spec: ClusterSpec, creation: Creation, deadline: float) -> None:
    """After a failure: delete the cluster this task created or adopted (looked up by name
    when the create's answer never came), and wait until it is gone."""
    kind = creation.kind
    rc = creation.rc or get(spec.name, spec.namespace, kind=kind)
    if rc is None or not _ours(rc, spec, creation):
        return
    if not being_deleted(rc):
        request_delete(spec.name, spec.namespace, rc["metadata"]["uid"], kind=kind)
    wait_gone(rc, max(1.0, deadline - time.monotonic()))
    log(f"deleted {kind.name} {spec.name}")


def cleanup_cancelled(spec: ClusterSpec, creation: Creation, deadline: float) -> bool:
    """On SIGTERM: request the deletion at once (the object is known) or as soon as it
    exists (a create still in flight may land after the signal), then wait until it is
    gone, never past `deadline`. True when it is known gone."""
    name, ns, kind = spec.name, spec.namespace, creation.kind
    log(f"cancelled: deleting {kind.name} {name} now; waiting at most {max(0.0, deadline - time.monotonic()):.0f}s "
        "for it to be gone")
    requested = False
    if creation.uid:
        try:
            requested = request_delete(name, ns, creation.uid, deadline=deadline, kind=kind)
        except Exception as exc:  # noqa: BLE001 - looked up again below
            log(f"deleting {kind.name} {name} failed ({type(exc).__name__}: {first_line(exc)}); trying again")
    backoff = Backoff(0.1, 1.5, 1.0)
    while True:
        try:
            rc = get(name, ns, deadline=deadline, kind=kind)
            if rc is None and (creation.uid or requested):
                log(f"{kind.name} {name} is gone")
                return True
            if rc is not None and not _ours(rc, spec, creation):
                log(f"{kind.name} {name} is not this task's (another task's or run's, or someone else's): leaving it")
                return True
            if rc is not None and not being_deleted(rc):
                requested = request_delete(name, ns, rc["metadata"]["uid"], deadline=deadline, kind=kind) or requested
                creation.rc = creation.rc or rc
        except Exception as exc:  # noqa: BLE001 - keep trying until the deadline
            log(f"while deleting {kind.name} {name}: {type(exc).__name__}: {first_line(exc)}")
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(backoff.next(), left))
    if requested or creation.uid:
        log(f"{kind.name} {name} is still being deleted as the grace period ends; its deletion is requested, and "
            "the exit handler's teardown makes sure")
    else:
        log(f"no {kind.name} {name} appeared after the create request was cut short; should it land after all, the "
            "exit handler's teardown (and the lease sweeper) remove it")
    return False
