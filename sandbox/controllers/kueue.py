"""Kueue as RHOAI runs it, for RayClusters and RayJobs: webhooks, Workloads, admission, waitForPodsReady, status.

Matched against kubernetes-sigs/kueue v0.11.6 (RHOAI 2.25 pairs CodeFlare operator v1.16.0 with
Kueue v0.11.6) configured as opendatahub-io/kueue ships it (config/components/manager/
controller_manager_config.yaml: `waitForPodsReady: {enable: true, blockAdmission: false}`, no
manageJobsWithoutQueueName; config/rhoai/manager_config_patch.yaml feature gates leave
LocalQueueDefaulting off), and against v0.12.10 as the Red Hat build of Kueue 1.1 runs it for
RHOAI 3.3 (platforms.py): what a RayCluster meets there differs in three places, each read at
v0.12.10 and openshift/kueue-operator release-1.1 @ ba545a0:
- the operator scopes Kueue's webhooks to namespaces labelled kueue.openshift.io/managed=true
  (pkg/webhook/pod_webhook.go mergeNamespaceSelectors): elsewhere a RayCluster is neither
  defaulted, suspended at creation nor validated by Kueue; its reconciler still manages a
  queue-labelled one (jobframework/reconciler.go checks the namespace selector only for jobs
  without a queue name), so it runs until Kueue stops it ("Not admitted by cluster queue");
- LocalQueueDefaulting (Beta, on): jobframework.ApplyDefaultLocalQueue labels a job without a
  queue name `default` when that LocalQueue exists and no Kueue-managed owner controls it;
- waitForPodsReady is off (gangScheduling.policy unset): no PodsReady condition, no eviction.
The faults document's "platform" switch wait_for_pods_ready turns it on, as an administrator
does with the Kueue CR's `gangScheduling.policy: ByWorkload`. With it on, apis/config/v1beta1/defaults.go gives a 5 min PodsReady timeout
and requeuingStrategy {timestamp: Eviction, backoffBaseSeconds: 60, backoffMaxSeconds: 3600,
backoffLimitCount: unset = requeue forever}. Timeout and backoff base are read at run time from
the faults document's "platform" section (pods_ready_timeout_s, requeue_backoff_base_s), as is
finalizer_delay_s, how long Kueue takes to drop a Workload's finalizer.

One pass does what these Kueue parts do, from one listing of each kind:
- Webhooks (`admission`): raycluster_webhook.go and rayjob_webhook.go (mraycluster.kb.io /
  mrayjob.kb.io suspend a job with a non-empty queue-name label on create, in any namespace,
  unless an owner is a Kueue-managed job (jobframework.WorkloadShouldBeSuspended);
  vraycluster.kb.io / vrayjob.kb.io validate it, kueue_jobs.py), plus the ODH operator's
  ray-kueuelabels-validator.opendatahub.io (below), which covers rayclusters and rayjobs.
- Job reconciler (jobframework/reconciler.go ReconcileGenericJob for jobs/raycluster and
  jobs/rayjob, each kind's answers in kueue_jobs.py): one Workload per labelled top-level job
  (finalizer kueue.x-k8s.io/resource-in-use), the PodsReady condition, stop on eviction and
  release the quota once the job is not active, start when admitted (the admitted flavors'
  nodeLabels and tolerations merged into the pod templates, kueue_podset.py), stop when running
  unadmitted (templates restored from the Workload's pod sets), Finished (Succeeded/Failed, the
  job's message) once the job finished, then the finalizer dropped, and finalizers dropped when
  the job or the Workload goes. A job whose controller owner is a Kueue-managed job (the
  RayCluster KubeRay makes for a RayJob: FindAncestorJobManagedByKueue) gets no Workload; it is
  only suspended while running when its ancestor's Workload is missing or not admitted. A
  finished Workload leaves the cache: its quota is free and it counts in no queue's status
  (core/workload_controller.go).
- Workload controller (core/workload_controller.go): the PodsReady timeout eviction with
  requeueState backoff (workload.UpdateRequeueState: base * 2^(n-1), Kueue's 0.01% jitter,
  capped at 3600 s), "BackoffFinished" after requeueAt, and Inadmissible reasons.
- Scheduler (scheduler/scheduler.go nominate/admit/requeueAndUpdate, queue/cluster_queue.go
  backoff): per ClusterQueue in priority then FIFO order (an evicted Workload queues by its
  eviction time), namespaceSelector, flavor assignment (kueue_quota.py), Warning `Pending` events.
- Status: ClusterQueue (cache/clusterqueue.go inactiveReason) and LocalQueue
  (core/localqueue_controller.go) conditions and counts.

Timers (PodsReady timeout, backoff, finalizer delay) run on `clock` (monotonic by default, a
fake one in unit tests) from when this controller saw the event; the controller wakes for the
next one. Preemption within a ClusterQueue (spec.preemption.withinClusterQueue) and Workload
priority from WorkloadPriorityClasses: kueue_preemption.py. Not simulated: cohorts (so no reclaim or
borrowing preemption), admission checks, stopPolicy, scheduling.k8s.io PriorityClasses,
ResourceFlavor/ClusterQueue finalizers, Workloads rebuilt when a suspended job's pod sets change.

ORDER: what a watcher of a Kueue-managed RayJob sees. Kueue (v0.11.6 jobframework/reconciler.go
handleJobWithNoWorkload, jobs/rayjob IsActive) creates a RayJob's Workload only while its
jobDeploymentStatus is New ("") or Suspended; its scheduler admits a Workload that fits at once
and the job reconciler then sets spec.suspend false (startJob). KubeRay (v1.4.2
rayjob_controller.go) writes one status per reconcile and checks spec.suspend only in
Initializing and Running: New -> Initializing, then, still suspended, Suspending -> Suspended
(nothing to delete yet), and Suspended -> New once unsuspended. Both are watch-driven, so which
comes first is decided by milliseconds there (KubeRay's two writes against Kueue's three); the
sandbox fixes one order, the one the project takes RHOAI to show (no Suspended with free
quota), and says so in docs/sandbox.md: Kueue runs first on every change and KubeRay's RayJob controller follows in the same
thread (core.py), acting only on RayJobs this controller has seen (seen_rv). With free quota a
watcher sees "" -> Initializing -> Running -> Complete (the RayJob unsuspended while still New);
with no quota "" -> Initializing -> Suspending -> Suspended, and after admission "" ->
Initializing -> Running -> Complete.
"""

from __future__ import annotations

import copy
import itertools
import random
import time
from datetime import UTC, datetime
from fractions import Fraction

from .. import quantity
from ..apiserver import errors
from ..apiserver.selectors import selector_matches
from ..platforms import platform as platform_profile
from . import kueue_podset, kueue_preemption
from .base import Controller, owner_ref, record_event, set_condition
from .kueue_jobs import (
    JOB_KINDS,
    PRIORITY_CLASS_LABEL,
    aggregate,
    cluster_pod_sets,
    immutable_priority_class,
    immutable_queue,
    validate_cluster_spec,
    validate_rayjob,
    workload_name_for,
)
from .kueue_quota import assign_flavors, missing_flavors, pod_requests, pod_set_requests, resource_groups

__all__ = ["KueueController", "pod_requests", "ray_pod_sets", "workload_name"]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"  # constants.WorkloadPriorityClassSource
MANAGED_LABEL = "kueue.openshift.io/managed"
LEGACY_MANAGED_LABEL = "kueue-managed"
DEFAULT_QUEUE_ANNOTATION = "kueue.x-k8s.io/default-queue"
DEFAULT_LOCAL_QUEUE = "default"  # constants.DefaultLocalQueueName
FINALIZER = "kueue.x-k8s.io/resource-in-use"
ODH_WEBHOOK = "ray-kueuelabels-validator.opendatahub.io"
KUEUE_WEBHOOK = "vraycluster.kb.io"
KUEUE_RAYJOB_WEBHOOK = "vrayjob.kb.io"
# Event sources, as Kueue names its recorders (jobframework/setup.go, core/core.go, cmd/kueue/main.go);
# each job kind's reconciler has its own (kueue_jobs.py: ray.io/raycluster-kueue-controller, ...).
WORKLOAD_CONTROLLER = "kueue-workload-controller"
SCHEDULER = "kueue-admission"
BACKOFF_MAX_S = 3600.0
BACKOFF_JITTER = 0.0001
NOT_READY = "Not all pods are ready or succeeded"
READY = "All pods reached readiness and the workload is running"
RECOVERING = "At least one pod has failed, waiting for recovery"
SETTLE = 4  # passes per reconcile at most: job -> Workload -> admitted -> job started, then quiet


def ray_pod_sets(rc: dict) -> list[dict]:
    """jobs/raycluster PodSets: head (1), then each worker group (replicas, 1 when unset, x numOfHosts)."""
    return cluster_pod_sets(rc.get("spec"))


def _kueue_job_owner(obj: dict) -> dict | None:
    """The controller owner reference of `obj` when it is a job kind Kueue manages here (RayCluster, RayJob)."""
    owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if owner and owner.get("apiVersion", "").startswith("ray.io/") and owner.get("kind") in ("RayCluster", "RayJob"):
        return owner
    return None


def workload_name(job: dict) -> str:
    """jobframework.GetWorkloadNameForOwnerWithGVK: <kind>-<name>-<sha1(kind, group, name, uid)[:5]>."""
    return workload_name_for(job.get("kind") or "RayCluster", job["metadata"]["name"], job["metadata"]["uid"])


def queue_name(obj: dict) -> str:
    return (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")


def condition(obj: dict | None, type_: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def is_true(obj: dict | None, type_: str) -> bool:
    c = condition(obj, type_)
    return bool(c) and c["status"] == "True"


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(ts: str | None) -> float | None:
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp() if ts else None
    except ValueError:
        return None


def _set(obj: dict, type_: str, status: str, reason: str, message: str) -> None:
    st = obj.setdefault("status", {})
    st["conditions"] = set_condition(st.get("conditions"), type_, status, reason, message,
                                     obj["metadata"].get("generation"))


def _admission_usage(wl: dict) -> dict[tuple[str, str], Fraction]:
    """What a Workload's admission reserves, per (flavor, resource): what the cache counts."""
    used: dict[tuple[str, str], Fraction] = {}
    for psa in wl["status"]["admission"].get("podSetAssignments") or []:
        for res, q in (psa.get("resourceUsage") or {}).items():
            key = ((psa.get("flavors") or {}).get(res, ""), res)
            used[key] = used.get(key, Fraction(0)) + quantity.parse(q)
    return used


def _add_usage(into: dict[tuple[str, str], Fraction], usage: dict[tuple[str, str], Fraction], sign: int = 1) -> None:
    for key, q in usage.items():
        into[key] = into.get(key, Fraction(0)) + sign * q


def _unset_quota_reservation(obj: dict, reason: str, message: str) -> None:
    """workload.UnsetQuotaReservationWithCondition: QuotaReserved False, admission cleared, and
    Admitted synced (False/NoReservation only if it was True)."""
    _set(obj, "QuotaReserved", "False", reason, message)
    obj["status"].pop("admission", None)
    if is_true(obj, "Admitted"):
        _set(obj, "Admitted", "False", "NoReservation", "The workload has no reservation")


class KueueController(Controller):
    name = "kueue"

    def __init__(self, store, registry, faults, clock=time.monotonic, platform=None):
        """`platform`: the release's profile (platforms.py; None: the default)."""
        super().__init__(store, registry)
        self.faults = faults
        self.platform = platform or platform_profile(None)
        self.clock = clock
        self.rc_t = self.rt("ray.io", "rayclusters")
        self.rj_t = self.rt("ray.io", "rayjobs")
        self.wl_t = self.rt("kueue.x-k8s.io", "workloads")
        self.lq_t = self.rt("kueue.x-k8s.io", "localqueues")
        self.cq_t = self.rt("kueue.x-k8s.io", "clusterqueues")
        self.rf_t = self.rt("kueue.x-k8s.io", "resourceflavors")
        self.wpc_t = self.rt("kueue.x-k8s.io", "workloadpriorityclasses")
        self.ns_t = self.rt("", "namespaces")
        # Timers by Workload uid, on self.clock: when it was admitted, when its backoff ends,
        # when its finalizer became removable.
        self._admitted_at: dict[str, float] = {}
        self._requeue_at: dict[str, float] = {}
        self._dropping: dict[str, float] = {}
        self._wake: float | None = None
        self._wls: dict[tuple, dict] = {}
        # Creation order by Workload uid: the tie-break for equal creationTimestamps (whole
        # seconds), which no later status write may change (a resourceVersion would).
        self._created: dict[str, int] = {}
        self._seq = itertools.count()
        self.seen_rv = 0

    # --- webhooks --------------------------------------------------------------
    def _namespace_labels(self, namespace: str | None) -> dict:
        ns = self.store.find(self.ns_t, None, namespace) if namespace else None
        return (ns or {}).get("metadata", {}).get("labels") or {}

    def namespace_managed(self, namespace: str | None) -> bool:
        """The ODH webhook's test: kueue.openshift.io/managed=true or the legacy kueue-managed=true."""
        labels = self._namespace_labels(namespace)
        return labels.get(MANAGED_LABEL) == "true" or labels.get(LEGACY_MANAGED_LABEL) == "true"

    def webhooks_apply(self, namespace: str | None) -> bool:
        """Whether Kueue's own webhooks see objects in `namespace`: everywhere on 2.x; on 3.x only
        where the namespace carries kueue.openshift.io/managed=true (the legacy label does not count)."""
        return not self.platform.kueue_opt_in or self._namespace_labels(namespace).get(MANAGED_LABEL) == "true"

    def wait_for_pods_ready(self) -> bool:
        return self.faults.switch("wait_for_pods_ready", self.platform.wait_for_pods_ready)

    def _default_local_queue(self, obj: dict) -> None:
        """jobframework.ApplyDefaultLocalQueue (LocalQueueDefaulting): no queue name, no Kueue-managed
        controller owner, and a LocalQueue named `default` in the namespace: queue it there."""
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(QUEUE_LABEL, ""):
            return
        if _kueue_job_owner(obj) is not None:
            return  # IsOwnerManagedByKueueForObject: the owner's kind is an enabled integration
        if self.store.find(self.lq_t, meta.get("namespace"), DEFAULT_LOCAL_QUEUE) is None:
            return
        meta.setdefault("labels", {})[QUEUE_LABEL] = DEFAULT_LOCAL_QUEUE

    def managed_ancestor(self, obj: dict) -> dict | None:
        """jobframework.FindAncestorJobManagedByKueue (manageJobsWithoutQueueName off): the topmost
        controller owner that is a Kueue job kind with a queue name, walking up the chain."""
        found, current, seen = None, obj, set()
        while True:
            owner = _kueue_job_owner(current)
            uid = current["metadata"].get("uid")
            if owner is None or uid in seen:
                return found
            seen.add(uid)
            rt = self.rc_t if owner["kind"] == "RayCluster" else self.rj_t
            parent = self.store.find(rt, obj["metadata"].get("namespace"), owner["name"])
            if parent is None:
                return found  # Kueue errors (ErrWorkloadOwnerNotFound); the sandbox treats it as top level
            if queue_name(parent):
                found = parent
            current = parent

    def admission(self, op: str, rt, obj: dict, old: dict | None) -> None:
        if rt.key not in (self.rc_t.key, self.rj_t.key):
            return
        meta = obj["metadata"]
        kueue_webhooks = self.webhooks_apply(meta.get("namespace"))
        # Mutating webhooks run before validating ones: Kueue's mraycluster.kb.io / mrayjob.kb.io
        # (CREATE only; LocalQueueDefaulting first where it is on, then
        # jobframework.WorkloadShouldBeSuspended: a queue name is enough unless an owner is a
        # Kueue-managed job).
        if op == "CREATE" and kueue_webhooks and self.platform.queue_defaulting:
            self._default_local_queue(obj)
        labels = meta.get("labels") or {}
        queue = labels.get(QUEUE_LABEL, "")
        if op == "CREATE" and kueue_webhooks and queue and self.managed_ancestor(obj) is None:
            obj.setdefault("spec", {})["suspend"] = True
        # opendatahub-operator internal/webhook/kueue/validating.go (ray-kueuelabels-validator,
        # rayclusters and rayjobs, CREATE/UPDATE, skipped for objects being deleted), as last
        # shipped before aca9ac0c1.
        if not meta.get("deletionTimestamp") and self.namespace_managed(meta.get("namespace")):
            if QUEUE_LABEL not in labels:
                raise errors.webhook_denied(
                    ODH_WEBHOOK, f'Kueue label validation failed: missing required label "{QUEUE_LABEL}"')
            if not queue:
                raise errors.webhook_denied(
                    ODH_WEBHOOK, f'Kueue label validation failed: label "{QUEUE_LABEL}" is set but empty')
        if queue and kueue_webhooks:  # Kueue's vraycluster.kb.io / vrayjob.kb.io: ValidateCreate / ValidateUpdate
            if rt.key == self.rc_t.key:
                name, errs = KUEUE_WEBHOOK, self._validate_ray_cluster(obj)
            else:
                name, errs = KUEUE_RAYJOB_WEBHOOK, validate_rayjob(obj)
            errs = immutable_queue(op, obj, old) + immutable_priority_class(op, obj, old, self._kueue_at_least(0, 12)) + errs
            if errs:
                raise errors.webhook_denied(name, aggregate(errs))

    @staticmethod
    def _validate_ray_cluster(obj: dict) -> list[str]:
        return validate_cluster_spec(obj.get("spec"), "spec")

    # --- one pass ----------------------------------------------------------------
    def reconcile(self) -> None:
        """Passes until one writes nothing (at most SETTLE): what Kueue's watch-driven parts do
        within milliseconds of a job's creation (the job reconciler creates its Workload, the
        scheduler admits it, the job reconciler starts the job) is done before KubeRay's RayJob
        controller, which follows this one (base.Controller.follow), takes its next step.
        `seen_rv`: every object at or below it was seen by the last pass (rayjob.py acts on
        no RayJob Kueue has not seen: ORDER below)."""
        for _ in range(SETTLE):
            before = self.seen_rv = self.store.rv
            self._pass()
            if self.store.rv == before:
                break

    def _pass(self) -> None:
        now = self.clock()
        self._wake = None
        jobs = [JOB_KINDS["rayclusters"](o) for o in self.store.list(self.rc_t)[0]] + \
            [JOB_KINDS["rayjobs"](o) for o in self.store.list(self.rj_t)[0]]
        self._wls = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in self.store.list(self.wl_t)[0]}
        lqs = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in self.store.list(self.lq_t)[0]}
        cqs = {q["metadata"]["name"]: q for q in self.store.list(self.cq_t)[0]}
        flavors = {f["metadata"]["name"]: f for f in self.store.list(self.rf_t)[0]}
        namespaces = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self.store.list(self.ns_t)[0]}
        missing = {name: missing_flavors(cq, flavors) for name, cq in cqs.items()}
        inactive = {name for name, m in missing.items() if m}
        self._forget({w["metadata"]["uid"] for w in self._wls.values()})
        unseen = [w for w in self._wls.values() if w["metadata"]["uid"] not in self._created]
        for wl in sorted(unseen, key=lambda w: int(w["metadata"]["resourceVersion"])):
            self._created[wl["metadata"]["uid"]] = next(self._seq)

        owned: dict[str, list[tuple]] = {}
        for key, wl in self._wls.items():
            for ref in wl["metadata"].get("ownerReferences") or []:
                owned.setdefault(ref["uid"], []).append(key)
        live = set()
        for job in jobs:
            live.add(job.obj["metadata"]["uid"])
            if job.obj["metadata"].get("deletionTimestamp"):
                ancestor = None  # being deleted: dropFinalizers comes first
            else:
                ancestor = self.managed_ancestor(job.obj)
            if ancestor is not None:
                self._reconcile_child(job, ancestor)
            elif queue_name(job.obj):  # the job reconciler ignores a job without a queue name
                self._reconcile_job(job, [self._wls[k] for k in owned.get(job.obj["metadata"]["uid"], [])
                                          if k in self._wls], now)
        for key in list(self._wls):
            wl = self._wls.get(key)
            if wl is None:
                continue
            refs = wl["metadata"].get("ownerReferences") or []
            if (refs and not any(r["uid"] in live for r in refs)) or (not refs and wl["metadata"].get("deletionTimestamp")):
                self._drop_finalizer(wl, now)  # job gone (job reconciler), or an ownerless Workload deleted
                continue
            self._reconcile_workload(wl, now, lqs, cqs, inactive)
        usage = self._schedule(now, lqs, cqs, inactive, flavors, namespaces)
        workloads = list(self._wls.values())
        for name, cq in cqs.items():
            self._cq_status(cq, usage.get(name, {}), workloads, lqs, missing[name])
        for lq in lqs.values():
            cq_name = (lq.get("spec") or {}).get("clusterQueue")
            self._lq_status(lq, cqs.get(cq_name), cq_name in inactive, workloads)
        # Wake for the next timer, else resync as usual.
        self.resync = Controller.resync if self._wake is None else \
            max(0.02, min(Controller.resync, self._wake - self.clock()))

    def _timer(self, at: float) -> None:
        self._wake = at if self._wake is None else min(self._wake, at)

    def _forget(self, uids: set[str]) -> None:
        for timers in (self._admitted_at, self._requeue_at, self._dropping, self._created):
            for uid in [u for u in timers if u not in uids]:
                del timers[uid]

    def _write_status(self, wl: dict, fn) -> dict | None:
        """Read-modify-write a Workload's status; keeps this pass's view current."""
        key = (wl["metadata"]["namespace"], wl["metadata"]["name"])
        new = self.store.mutate(self.wl_t, key[0], key[1], lambda o: (o.setdefault("status", {}), fn(o)),
                                subresource="status")
        if new is None:
            self._wls.pop(key, None)
        else:
            self._wls[key] = new
        return new

    # --- job reconciler (jobframework/reconciler.go, jobs/raycluster) --------------
    def _reconcile_job(self, job, wls: list[dict], now: float) -> None:
        rc = job.obj
        if rc["metadata"].get("deletionTimestamp"):
            for wl in wls:  # dropFinalizers: the job is being deleted
                self._drop_finalizer(wl, now)
            return
        wl = next((w for w in wls if w["metadata"].get("deletionTimestamp")), wls[0] if wls else None)
        active = job.active()
        if wl is not None and is_true(wl, "Finished"):
            self._drop_finalizer(wl, now)  # finalizeJob, then workload.RemoveFinalizer
            return
        if wl is not None and wl["metadata"].get("deletionTimestamp"):
            self._stop_job(job, "Workload is deleted", wl)
            self._drop_finalizer(wl, now)
            return
        message, success, finished = job.finished()
        if finished:
            if wl is not None:
                reason = "Succeeded" if success else "Failed"
                if self._write_status(wl, lambda o: _set(o, "Finished", "True", reason, message)) is not None:
                    self._event(rc, "Normal", "FinishedWorkload", f"Workload '{wl['metadata']['namespace']}/"
                                f"{wl['metadata']['name']}' is declared finished", job.recorder)
            return
        if wl is None:
            if not active:  # handleJobWithNoWorkload waits until no pods are active
                self._create_workload(job)
            return
        if self.wait_for_pods_ready():  # reconciler.go step 5: only with waitForPodsReady
            status, reason, message = self._pods_ready(wl, job.pods_ready())
            current = condition(wl, "PodsReady")
            if not current or (current["status"], current["reason"]) != (status, reason):
                self._write_status(wl, lambda o: _set(o, "PodsReady", status, reason, message))
                return
        evicted = condition(wl, "Evicted")
        if evicted and evicted["status"] == "True":
            self._stop_job(job, evicted["message"], wl)
            if is_true(wl, "QuotaReserved") and not active:
                def release(o):
                    # Requeued is True only for preemption; PodsReadyTimeout waits for its backoff.
                    _set(o, "Requeued", "True" if evicted["reason"] == "Preempted" else "False",
                         evicted["reason"], evicted["message"])
                    _unset_quota_reservation(o, "Pending", evicted["message"])
                self._write_status(wl, release)
            return
        if job.suspended():
            if is_true(wl, "Admitted"):
                self._start_job(job, wl)
            elif self._kueue_at_least(0, 12) and not is_true(wl, "QuotaReserved") and \
                    (rc["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL, "") != wl["spec"].get("priorityClassName", ""):
                self._match_priority(job, wl)
            elif wl["spec"].get("queueName") != queue_name(rc):
                self.store.mutate(self.wl_t, wl["metadata"]["namespace"], wl["metadata"]["name"],
                                  lambda o: o["spec"].update(queueName=queue_name(rc)))
            return
        if not is_true(wl, "Admitted"):
            self._stop_job(job, "Not admitted by cluster queue", wl)

    def _match_priority(self, job, wl: dict) -> None:
        """v0.12 updateWorkloadToMatchJob, for a suspended job whose priority-class label changed."""
        priority = self._priority(job)
        if priority is None:
            return
        ns, name = wl["metadata"]["namespace"], wl["metadata"]["name"]

        def match(o):
            for key in ("priorityClassName", "priorityClassSource"):
                o["spec"].pop(key, None)
            o["spec"].update(priority)
        if self.store.mutate(self.wl_t, ns, name, match) is not None:
            self._event(job.obj, "Normal", "UpdatedWorkload", f"Updated not matching Workload for suspended job: {ns}/{name}",
                        job.recorder)

    def _kueue_at_least(self, major: int, minor: int) -> bool:
        have = tuple(int(x) for x in self.platform.kueue.lstrip("v").split(".")[:2])
        return have >= (major, minor)

    def _reconcile_child(self, job, ancestor: dict) -> None:
        """ReconcileGenericJob for a job whose ancestor Kueue manages: no Workload of its own; while
        running and not finished, suspended if the ancestor's Workload is missing or not admitted."""
        if job.finished()[2] or job.suspended():
            return
        uid = ancestor["metadata"]["uid"]
        wl = next((w for w in self._wls.values() if any(r["uid"] == uid for r in w["metadata"].get("ownerReferences") or [])),
                  None)
        if wl is None or not is_true(wl, "Admitted"):
            self._set_suspend(job, True)
            self._event(job.obj, "Normal", "Suspended", "Kueue managed child job suspended", job.recorder)

    def _event(self, obj: dict, type_: str, reason: str, message: str, component: str) -> None:
        try:
            record_event(self.store, self.registry, obj, type_, reason, message, component)
        except errors.ApiError:
            pass  # the recorder drops what it cannot write

    def _job_rt(self, job):
        return self.rc_t if job.plural == "rayclusters" else self.rj_t

    def _set_suspend(self, job, value: bool) -> None:
        rt = self._job_rt(job)
        self.store.mutate(rt, job.obj["metadata"]["namespace"], job.obj["metadata"]["name"],
                          lambda o: o.setdefault("spec", {}).update(suspend=value))
        job.obj.setdefault("spec", {})["suspend"] = value

    @staticmethod
    def _pods_ready(wl: dict, ready: bool) -> tuple[str, str, str]:
        """jobframework generatePodsReadyCondition."""
        if not is_true(wl, "Admitted"):
            return "False", "WaitForStart", NOT_READY
        current = condition(wl, "PodsReady")
        if ready:
            recovered = current and current["reason"] in ("WaitForRecovery", "Recovered")
            return "True", "Recovered" if recovered else "Started", READY
        if current and (current["status"] == "True" or current["reason"] == "WaitForRecovery"):
            return "False", "WaitForRecovery", RECOVERING
        return "False", "WaitForStart", NOT_READY

    def _priority(self, job) -> dict | None:
        """jobframework prepareWorkload / ExtractPriority: the kueue.x-k8s.io/priority-class label's
        WorkloadPriorityClass; None while it does not exist (Kueue then creates no Workload and no
        event, and retries with backoff: the job stays suspended). Without the label, priority 0
        (the sandbox serves no scheduling.k8s.io PriorityClass for a pod template to name)."""
        name = (job.obj["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL, "")
        if not name:
            return {"priority": 0}
        wpc = self.store.find(self.wpc_t, None, name)
        if wpc is None:
            return None
        return {"priorityClassName": name, "priority": int(wpc.get("value") or 0), "priorityClassSource": WPC_SOURCE}

    def _create_workload(self, job) -> None:
        rc = job.obj
        priority = self._priority(job)
        if priority is None:
            return
        wl = {
            "metadata": {"name": workload_name_for(job.kind, rc["metadata"]["name"], rc["metadata"]["uid"]),
                         "namespace": rc["metadata"]["namespace"],
                         "labels": {"kueue.x-k8s.io/job-uid": rc["metadata"]["uid"]},
                         "finalizers": [FINALIZER], "ownerReferences": [owner_ref(rc)]},
            "spec": {"queueName": queue_name(rc), "podSets": job.pod_sets(), **priority, "active": True},
        }
        try:
            created = self.store.create(self.wl_t, wl)
        except errors.ApiError:
            return
        self._wls[(created["metadata"]["namespace"], created["metadata"]["name"])] = created
        self._created[created["metadata"]["uid"]] = next(self._seq)
        self._event(rc, "Normal", "CreatedWorkload",
                    f"Created Workload: {created['metadata']['namespace']}/{created['metadata']['name']}", job.recorder)

    def _start_job(self, job, wl: dict) -> None:
        """startJob: one write that unsuspends the job with each admitted flavor's nodeLabels and
        tolerations merged into its pod sets' templates (kueue_podset.py). A flavor gone since
        admission: retried on a later pass; a conflict: the Workload Finished/FailedToStart."""
        admission = wl["status"]["admission"]
        flavors = {f["metadata"]["name"]: f for f in self.store.list(self.rf_t)[0]}
        try:
            infos = [kueue_podset.from_assignment(psa, flavors, self._podset_label())
                     for psa in admission.get("podSetAssignments") or []]
        except KeyError:
            return
        meta = job.obj["metadata"]

        def run(o):
            started = copy.deepcopy(o)
            job.run_with_pod_sets_info(started, infos)  # raises before `o` is touched
            o.clear()
            o.update(started)
        try:
            new = self.store.mutate(self._job_rt(job), meta["namespace"], meta["name"], run)
        except kueue_podset.PodSetError as e:
            why = str(e)
            self._write_status(wl, lambda o: _set(o, "Finished", "True", "FailedToStart", why))
            return
        if new is None:
            return
        job.obj = new
        self._event(new, "Normal", "Started", f"Admitted by clusterQueue {admission['clusterQueue']}", job.recorder)

    def _podset_label(self) -> bool:
        """Whether this Kueue labels started pod templates kueue.x-k8s.io/podset (v0.12 on)."""
        return self._kueue_at_least(0, 12)

    def _stop_job(self, job, message: str, wl: dict | None = None) -> None:
        """stopJob: suspend (KubeRay then deletes the pods) with the pod templates as the Workload
        recorded them (RestorePodSetsInfo), and say why, unless already suspended."""
        if job.suspended():
            return
        infos = [kueue_podset.from_pod_set(ps) for ps in wl["spec"].get("podSets") or []] if wl else None
        meta = job.obj["metadata"]

        def stop(o):
            o.setdefault("spec", {})["suspend"] = True
            if infos is not None:
                job.restore_pod_sets_info(o, infos)
        new = self.store.mutate(self._job_rt(job), meta["namespace"], meta["name"], stop)
        if new is not None:
            job.obj = new
        self._event(job.obj, "Normal", "Stopped", message, job.recorder)

    def _drop_finalizer(self, wl: dict, now: float) -> None:
        """workload.RemoveFinalizer, finalizer_delay_s after it became due (when Kueue gets to it)."""
        if FINALIZER not in (wl["metadata"].get("finalizers") or []):
            return
        uid = wl["metadata"]["uid"]
        since = self._dropping.setdefault(uid, now)
        due = since + self.faults.platform("finalizer_delay_s")
        if now < due:
            self._timer(due)
            return
        ns, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
        new = self.store.mutate(self.wl_t, ns, name, lambda o: o["metadata"].update(
            finalizers=[f for f in o["metadata"].get("finalizers") or [] if f != FINALIZER]))
        self._dropping.pop(uid, None)
        if new is None or self.store.find(self.wl_t, ns, name) is None:
            self._wls.pop((ns, name), None)
        else:
            self._wls[(ns, name)] = new

    # --- workload controller (core/workload_controller.go) --------------------------
    def _reconcile_workload(self, wl: dict, now: float, lqs: dict, cqs: dict, inactive: set) -> None:
        if wl["metadata"].get("deletionTimestamp") or is_true(wl, "Finished"):
            return
        requeued = condition(wl, "Requeued")
        if requeued and requeued["status"] == "False" and requeued["reason"] in ("PodsReadyTimeout", "AdmissionCheck"):
            at = self._requeue_deadline(wl, now)
            if at is not None and now < at:
                self._timer(at)
                return

            def finished(o):
                (o["status"].get("requeueState") or {}).pop("requeueAt", None)
                _set(o, "Requeued", "True", "BackoffFinished", "The workload backoff was finished")
            self._requeue_at.pop(wl["metadata"]["uid"], None)
            self._write_status(wl, finished)
            return
        if is_true(wl, "QuotaReserved"):
            if self.wait_for_pods_ready():
                self._pods_ready_timeout(wl, now)
            return
        queue = wl["spec"].get("queueName", "")
        lq = lqs.get((wl["metadata"]["namespace"], queue))
        message = None
        if lq is None:
            message = f"LocalQueue {queue} doesn't exist"
        else:
            cq = (lq.get("spec") or {}).get("clusterQueue")
            if cq not in cqs:
                message = f"ClusterQueue {cq} doesn't exist"
            elif cq in inactive:
                message = f"ClusterQueue {cq} is inactive"
        if message:
            current = condition(wl, "QuotaReserved")
            if not current or (current["status"], current["reason"], current["message"]) != ("False", "Inadmissible", message):
                self._write_status(wl, lambda o: _unset_quota_reservation(o, "Inadmissible", message))

    def _requeue_deadline(self, wl: dict, now: float) -> float | None:
        uid = wl["metadata"]["uid"]
        if uid not in self._requeue_at:
            at = _epoch(((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt"))
            if at is None:
                return None
            self._requeue_at[uid] = now + (at - time.time())
        return self._requeue_at[uid]

    def _pods_ready_timeout(self, wl: dict, now: float) -> None:
        """reconcileNotReadyTimeout: an admitted Workload whose pods are not ready in time is evicted."""
        if wl["spec"].get("active") is False or is_true(wl, "Evicted") or not is_true(wl, "Admitted"):
            return
        pods_ready = condition(wl, "PodsReady")
        if pods_ready and (pods_ready["status"] == "True" or pods_ready["reason"] not in ("WaitForStart", "PodsReady")):
            return  # ready, or waiting for recovery (no recoveryTimeout in RHOAI's config)
        uid = wl["metadata"]["uid"]
        due = self._admitted_at.setdefault(uid, now) + self.faults.platform("pods_ready_timeout_s")
        if now < due:
            self._timer(due)
            return
        ns, name = wl["metadata"]["namespace"], wl["metadata"]["name"]
        count = int(((wl.get("status") or {}).get("requeueState") or {}).get("count") or 0) + 1
        base = self.faults.platform("requeue_backoff_base_s")
        backoff = min(base * 2 ** (count - 1) * (1 + random.uniform(0, BACKOFF_JITTER)), BACKOFF_MAX_S)
        message = f"Exceeded the PodsReady timeout {ns}/{name}"

        def evict(o):
            o["status"]["requeueState"] = {"count": count, "requeueAt": _rfc3339(time.time() + backoff)}
            _set(o, "Evicted", "True", "PodsReadyTimeout", message)
        if self._write_status(wl, evict) is None:
            return
        self._requeue_at[uid] = now + backoff
        record_event(self.store, self.registry, wl, "Normal", "EvictedDueToPodsReadyTimeout", message,
                     WORKLOAD_CONTROLLER)

    # --- scheduler (scheduler/scheduler.go) -------------------------------------------
    def _schedule(self, now, lqs, cqs, inactive, flavors, namespaces) -> dict[str, dict]:
        """Admit pending Workloads; returns each ClusterQueue's usage per (flavor, resource)."""
        usage: dict[str, dict[tuple[str, str], Fraction]] = {name: {} for name in cqs}
        pending: dict[str, list[dict]] = {name: [] for name in cqs}
        for wl in self._wls.values():
            admission = (wl.get("status") or {}).get("admission")
            if is_true(wl, "Finished"):
                continue  # out of the cache: its quota is free
            if is_true(wl, "QuotaReserved") and admission:  # the cache counts what the admission recorded
                _add_usage(usage.setdefault(admission["clusterQueue"], {}), _admission_usage(wl))
                continue
            lq = lqs.get((wl["metadata"]["namespace"], wl["spec"].get("queueName", "")))
            cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
            if lq is None or cq_name not in cqs or cq_name in inactive or wl["metadata"].get("deletionTimestamp") \
                    or wl["spec"].get("active") is False or not self._backoff_expired(wl, now):
                continue
            pending[cq_name].append(wl)
        for cq_name, cq in cqs.items():
            strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            for wl in sorted(pending[cq_name], key=self._queue_order):
                owner = (wl["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
                if self.faults.for_cluster(owner).get("never_admit"):
                    self._pending(wl, "couldn't assign flavors to pod set head: the sandbox holds this workload "
                                      "in the queue (fault never_admit)")
                    if strict:
                        break
                    continue
                if not selector_matches((cq.get("spec") or {}).get("namespaceSelector"),
                                        namespaces.get(wl["metadata"]["namespace"])):
                    self._pending(wl, "Workload namespace doesn't match ClusterQueue selector")
                    continue  # never blocks a StrictFIFO queue (queue/cluster_queue.go requeueIfNotPresent)
                assigned, message = assign_flavors(cq, wl, usage[cq_name], flavors)
                if assigned is None:
                    victims = self._preemption_targets(cq, wl, usage[cq_name], flavors)
                    if victims:  # scheduler.go: not admitted this cycle, requeued at once
                        self._preempt(wl, victims)
                        message += f". Pending the preemption of {len(victims)} workload(s)"
                    self._pending(wl, message)
                    if strict:
                        break
                    continue
                for ps in assigned:
                    for res, val in ps["usage"].items():
                        key = (ps["flavors"][res], res)
                        usage[cq_name][key] = usage[cq_name].get(key, Fraction(0)) + val
                self._admit(wl, cq_name, assigned, now)
        return usage

    def _preemption_targets(self, cq: dict, wl: dict, used: dict, flavors: dict) -> list[dict]:
        """The Workloads of this ClusterQueue whose quota `wl` may take (kueue_preemption.py)."""
        within = kueue_preemption.policy(cq)
        if within == "Never":
            return []
        cq_name = cq["metadata"]["name"]
        wanted = {res for ps in wl["spec"]["podSets"] for res in pod_set_requests(cq, ps)}
        prio, ts = wl["spec"].get("priority") or 0, self._queue_order(wl)[1]
        candidates = [w for w in self._wls.values() if w is not wl and self._reserving(w)
                      and w["status"]["admission"]["clusterQueue"] == cq_name
                      and any(res in wanted for _, res in _admission_usage(w))
                      and kueue_preemption.allowed(within, prio, ts, w["spec"].get("priority") or 0, self._queue_order(w)[1])]
        if not candidates:
            return []

        def order(w):  # CandidatesOrdering: evicted, then lower priority, then the latest reservation
            uid = w["metadata"]["uid"]  # (then Kueue's uid; here creation order, for repeatable tests)
            return (not is_true(w, "Evicted"), w["spec"].get("priority") or 0, -self._admitted_at.get(uid, 0.0),
                    -self._created.get(uid, 0))

        def fits(removed):
            freed = dict(used)
            for w in removed:
                _add_usage(freed, _admission_usage(w), -1)
            return assign_flavors(cq, wl, freed, flavors)[0] is not None
        return kueue_preemption.targets(candidates, order, fits)

    def _preempt(self, preemptor: dict, victims: list[dict]) -> None:
        """IssuePreemptions: each target not yet evicted gets Evicted (Preempted) and Preempted
        (InClusterQueue) in one status write, and events on its Workload; the job reconciler then
        stops its job and releases the quota once KubeRay has stopped it."""
        msg = kueue_preemption.message(preemptor)
        for victim in victims:
            if is_true(victim, "Evicted"):
                continue  # "Preemption ongoing": still counted

            def evict(o):
                _set(o, "Evicted", "True", "Preempted", msg)
                _set(o, "Preempted", "True", "InClusterQueue", msg)
            written = self._write_status(victim, evict)
            if written is None:
                continue
            if self._kueue_at_least(0, 12):  # workload.Evict reports the eviction (v0.12)
                record_event(self.store, self.registry, written, "Normal", "EvictedDueToPreempted", msg, SCHEDULER)
            record_event(self.store, self.registry, written, "Normal", "Preempted", msg, SCHEDULER)

    def _backoff_expired(self, wl: dict, now: float) -> bool:
        """queue.ClusterQueue.backoffWaitingTimeExpired."""
        requeued = condition(wl, "Requeued")
        if requeued and requeued["status"] == "False":
            return False
        at = self._requeue_deadline(wl, now)
        return at is None or now >= at

    def _queue_order(self, wl: dict):
        """Priority, then workload.Ordering.GetQueueOrderTimestamp (eviction time after a PodsReady
        timeout, requeuingStrategy.timestamp Eviction), then creation."""
        evicted = condition(wl, "Evicted")
        ts = evicted["lastTransitionTime"] if evicted and evicted["status"] == "True" \
            and evicted["reason"] == "PodsReadyTimeout" else wl["metadata"]["creationTimestamp"]
        return -(wl["spec"].get("priority") or 0), ts, wl["metadata"]["creationTimestamp"], \
            self._created.get(wl["metadata"]["uid"], 0)

    def _pending(self, wl: dict, message: str) -> None:
        """requeueAndUpdate: QuotaReserved False/Pending with the reason, and a Warning `Pending` event
        (the sandbox retries every pass, so it writes only when the message changes)."""
        current = condition(wl, "QuotaReserved")
        if current and (current["status"], current["reason"], current["message"]) == ("False", "Pending", message):
            return
        if self._write_status(wl, lambda o: _unset_quota_reservation(o, "Pending", message)) is not None:
            record_event(self.store, self.registry, wl, "Warning", "Pending", message[:1021] + "..."
                         if len(message) > 1024 else message, SCHEDULER)

    def _admit(self, wl: dict, cq_name: str, assigned: list[dict], now: float) -> None:
        """workload.SetQuotaReservation + SyncAdmittedCondition (no admission checks)."""
        admission = {"clusterQueue": cq_name, "podSetAssignments": [
            {"name": ps["name"], "count": ps["count"], "flavors": dict(sorted(ps["flavors"].items())),
             "resourceUsage": {k: quantity.fmt(k, v) for k, v in sorted(ps["usage"].items())}}
            for ps in assigned]}

        def fn(o):
            o["status"]["admission"] = admission
            _set(o, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}")
            for type_ in ("Evicted", "Preempted"):
                old = condition(o, type_)
                if old:
                    keep = old["message"].startswith("Previously: ") and self._kueue_at_least(0, 12)  # preservePreviousMessage
                    old.update(status="False", reason="QuotaReserved", message=old["message"] if keep else "Previously: " + old["message"],
                               lastTransitionTime=_rfc3339(time.time()))
            _set(o, "Admitted", "True", "Admitted", "The workload is admitted")
        admitted = self._write_status(wl, fn)
        if admitted is None:
            return
        self._admitted_at[wl["metadata"]["uid"]] = now
        requeued = condition(wl, "Requeued")
        queued_since = _epoch(requeued["lastTransitionTime"] if requeued else wl["metadata"]["creationTimestamp"])
        waited = max(0.0, time.time() - (queued_since or time.time()))
        record_event(self.store, self.registry, admitted, "Normal", "QuotaReserved",
                     f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was {waited:.0f}s", SCHEDULER)
        record_event(self.store, self.registry, admitted, "Normal", "Admitted",
                     f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s", SCHEDULER)

    # --- queue status --------------------------------------------------------------
    @staticmethod
    def _flavor_usage(cq: dict | None, used: dict[tuple[str, str], Fraction], borrowed: bool) -> list[dict]:
        """Per flavor and covered resource, the quantity in use, as Kueue reports it."""
        return [{"name": name, "resources": [
            {"name": res, "total": quantity.fmt(res, used.get((name, res), Fraction(0))),
             **({"borrowed": "0"} if borrowed else {})} for res in quotas]}
            for group in resource_groups(cq or {}) for name, quotas in group["flavors"]]

    @staticmethod
    def _reserving(w: dict) -> bool:
        return is_true(w, "QuotaReserved") and bool((w.get("status") or {}).get("admission")) and not is_true(w, "Finished")

    def _cq_status(self, cq: dict, used: dict, workloads: list[dict], lqs: dict, missing: list[str]) -> None:
        name = cq["metadata"]["name"]
        reserving = [w for w in workloads if self._reserving(w) and w["status"]["admission"]["clusterQueue"] == name]
        pending = sum(1 for w in workloads if not self._reserving(w) and not is_true(w, "Finished")
                      and ((lqs.get((w["metadata"]["namespace"], w["spec"].get("queueName"))) or {}).get("spec") or {})
                      .get("clusterQueue") == name)
        if missing:  # cache/clusterqueue.go inactiveReason; Go prints the slice as [a b]
            active = ("False", "FlavorNotFound",
                      f"Can't admit new workloads: references missing ResourceFlavor(s): [{' '.join(missing)}].")
        else:
            active = ("True", "Ready", "Can admit new workloads")
        flavors = self._flavor_usage(cq, used, borrowed=True)
        status = {"flavorsReservation": flavors, "flavorsUsage": flavors, "pendingWorkloads": pending,
                  "reservingWorkloads": len(reserving),
                  "admittedWorkloads": sum(1 for w in reserving if is_true(w, "Admitted")),
                  "conditions": set_condition((cq.get("status") or {}).get("conditions"), "Active", *active)}
        if cq.get("status") != status:
            self.store.mutate(self.cq_t, None, name, lambda o: o.update(status=status), subresource="status")

    def _lq_status(self, lq: dict, cq: dict | None, cq_inactive: bool, workloads: list[dict]) -> None:
        ns, name = lq["metadata"]["namespace"], lq["metadata"]["name"]
        wls = [w for w in workloads if w["metadata"]["namespace"] == ns and w["spec"].get("queueName") == name
               and not is_true(w, "Finished")]
        reserving = [w for w in wls if self._reserving(w)]
        used: dict[tuple[str, str], Fraction] = {}
        for w in reserving:
            _add_usage(used, _admission_usage(w))
        flavors = self._flavor_usage(cq, used, borrowed=False)
        if cq is None:  # core/localqueue_controller.go
            active = ("False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
        elif cq_inactive:
            active = ("False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
        else:
            active = ("True", "Ready", "Can submit new workloads to localQueue")
        status = {"pendingWorkloads": len(wls) - len(reserving), "reservingWorkloads": len(reserving),
                  "admittedWorkloads": sum(1 for w in reserving if is_true(w, "Admitted")),
                  "flavorsReservation": flavors, "flavorUsage": flavors,
                  "flavors": [{"name": f["name"], "resources": [r["name"] for r in f["resources"]]} for f in flavors],
                  "conditions": set_condition((lq.get("status") or {}).get("conditions"), "Active", *active)}
        if lq.get("status") != status:
            self.store.mutate(self.lq_t, ns, name, lambda o: o.update(status=status), subresource="status")
