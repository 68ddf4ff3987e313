"""Kueue from a pipeline task: which LocalQueue to use, and Kueue's own words about a
cluster (its Workload) where this service account may read them.

RHOAI's pipeline-runner role has nothing in kueue.x-k8s.io, so every read here degrades:
the queue falls back to the one named `default`, and the waiting and eviction reasons are
inferred from the RayCluster alone."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import kube
from .errors import InputError
from .wait import log

KUEUE = ("kueue.x-k8s.io", "v1beta1")
DEFAULT_QUEUE_ANNOTATION = "kueue.x-k8s.io/default-queue"
# The LocalQueue RHOAI's operator creates in a Kueue-managed namespace (without the
# annotation), and the name Kueue's LocalQueueDefaulting gives a job without a queue.
DEFAULT_QUEUE_NAME = "default"


_local_queues: dict | None = None


@contextlib.contextmanager
def read_once():
    """Inside this block (one provisioning) a LocalQueue is read once: a refusal (403) or
    absence (404) is remembered too, so a service account that may not read Kueue objects is
    refused once, not again by each check that wants the queue."""
    global _local_queues
    _local_queues = {}
    try:
        yield
    finally:
        _local_queues = None


def read_local_queue(namespace: str, name: str) -> dict:
    memo = _local_queues if _local_queues is not None else {}
    key = (namespace, name)
    if key not in memo:
        try:
            memo[key] = kube.call(kube.custom().get_namespaced_custom_object, *KUEUE, namespace,
                                  "localqueues", name, what="read the LocalQueue")
        except Exception as exc:  # noqa: BLE001
            if not (kube.forbidden(exc) or kube.not_found(exc)):
                raise
            memo[key] = exc
    got = memo[key]
    if isinstance(got, BaseException):
        raise got
    return got


PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def check_priority_class(name: str) -> None:
    """The WorkloadPriorityClass a job names must exist: where it does not, Kueue creates no
    Workload and records no event, and the cluster would wait until admission_timeout. Checked
    where this service account may read it (pipeline-runner may not: then only logged)."""
    if not name:
        return
    try:
        kube.call(kube.custom().get_cluster_custom_object, *KUEUE, "workloadpriorityclasses", name,
                  what="read the WorkloadPriorityClass")
    except Exception as exc:  # noqa: BLE001
        if kube.not_found(exc):
            raise InputError("priority_class", f"WorkloadPriorityClass {name!r} does not exist",
                             "use one listed by `oc get workloadpriorityclasses`, or leave it empty for the "
                             "queue's default priority") from None
        if not kube.forbidden(exc):
            raise
        log(f"cannot verify WorkloadPriorityClass {name!r} (this service account may not read Kueue objects); "
            "using it as given: if it does not exist, the cluster waits until admission_timeout")


def resolve_queue(namespace: str, local_queue: str) -> str:
    """The LocalQueue to use: the given one (checked where readable); else the namespace's
    LocalQueue annotated kueue.x-k8s.io/default-queue=true, else the one named `default`."""
    co = kube.custom()
    if local_queue:
        try:
            read_local_queue(namespace, local_queue)
        except Exception as exc:  # noqa: BLE001
            if kube.not_found(exc):
                raise InputError("local_queue", f"LocalQueue {local_queue!r} does not exist in namespace {namespace!r}",
                                 f"use one listed by `oc get localqueues -n {namespace}`") from None
            if not kube.forbidden(exc):
                raise
            log(f"cannot verify LocalQueue {local_queue!r} (this service account may not read Kueue objects); "
                "using it as given: if it does not exist, the cluster waits until admission_timeout")
        return local_queue
    try:
        queues = kube.call(co.list_namespaced_custom_object, *KUEUE, namespace, "localqueues",
                           what="list LocalQueues")["items"]
    except Exception as exc:  # noqa: BLE001
        if kube.forbidden(exc):
            log(f"no local_queue given and this service account may not list LocalQueues in {namespace!r}: using the "
                f"LocalQueue named {DEFAULT_QUEUE_NAME!r} (OpenShift AI creates it); set local_queue to use another")
            return DEFAULT_QUEUE_NAME
        if kube.not_found(exc):
            raise InputError("local_queue", "Kueue is not installed (no LocalQueue API)",
                             "enable Kueue in the DataScienceCluster, or ask your administrator") from None
        raise
    name = default_queue(queues)
    if name is not None:
        log(f"no local_queue given: using {name!r}, the namespace's default LocalQueue" if annotated_default(queues, name)
            else f"no local_queue given: using the LocalQueue named {DEFAULT_QUEUE_NAME!r}")
        return name
    raise InputError("local_queue", f"no queue given and namespace {namespace!r} has no default LocalQueue "
                     f"(none annotated {DEFAULT_QUEUE_ANNOTATION}=true, none named {DEFAULT_QUEUE_NAME!r})",
                     f"set local_queue to one of: {', '.join(q['metadata']['name'] for q in queues) or '(none exist)'}")


def default_queue(queues: list[dict]) -> str | None:
    """The namespace's default LocalQueue among `queues` (LocalQueue objects): the one annotated
    DEFAULT_QUEUE_ANNOTATION=true (the first by name if several are), else the one named
    DEFAULT_QUEUE_NAME; None if neither. One rule for the task, the CLI and doctor."""
    annotated = sorted(q["metadata"]["name"] for q in queues if annotated_default(queues, q["metadata"]["name"]))
    if annotated:
        return annotated[0]
    return DEFAULT_QUEUE_NAME if any(q["metadata"]["name"] == DEFAULT_QUEUE_NAME for q in queues) else None


def annotated_default(queues: list[dict], name: str) -> bool:
    return any(q["metadata"]["name"] == name and
               str((q["metadata"].get("annotations") or {}).get(DEFAULT_QUEUE_ANNOTATION, "")).lower() == "true"
               for q in queues)


@dataclass
class Quota:
    """A ClusterQueue's nominal quota (summed over its flavors), as Kueue v0.11 reads it."""
    cluster_queue: str
    nominal: dict           # resource -> Fraction
    cohort: str             # "" when it cannot borrow


def nominal_quota(namespace: str, local_queue: str) -> Quota | None:
    """The quota of the ClusterQueue behind a LocalQueue, where this service account may read
    the LocalQueue and the ClusterQueue (RHOAI's pipeline-runner may read neither: None)."""
    from .validate import quantity

    co = kube.custom()
    try:
        lq = read_local_queue(namespace, local_queue)
        name = (lq.get("spec") or {}).get("clusterQueue") or ""
        cq = kube.call(co.get_cluster_custom_object, *KUEUE, "clusterqueues", name, what="read the ClusterQueue")
    except Exception as exc:  # noqa: BLE001
        if kube.forbidden(exc) or kube.not_found(exc):
            return None
        raise
    nominal: dict = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                try:
                    nominal[r["name"]] = nominal.get(r["name"], 0) + quantity(r.get("nominalQuota", 0))
                except (KeyError, ValueError):
                    continue
    return Quota(name, nominal, (cq.get("spec") or {}).get("cohort") or "")


# The reason of an eviction Kueue keeps only as "Previously: <message>" once readmitted, by its
# message (v0.11 workload.go / preemption.go).
PREVIOUS_REASONS = (("PodsReadyTimeout", "Exceeded the PodsReady timeout"), ("Preempted", "Preempted to accommodate"))


@dataclass
class Eviction:
    """Kueue's record of an eviction (Workload condition Evicted, Kueue v0.11)."""
    reason: str           # e.g. PodsReadyTimeout, Preempted, InactiveWorkload
    message: str          # e.g. "Exceeded the PodsReady timeout ns/name"
    requeues: int         # status.requeueState.count: PodsReadyTimeout evictions so far
    requeue_at: str       # when Kueue will try to admit it again ("" if unknown)
    deactivated: bool     # spec.active false: Kueue gave up (requeuingBackoffLimitCount)
    ongoing: bool = False  # the Evicted condition is True: evicted now, not admitted again yet


class KueueView:
    """Kueue's view of one cluster, while this service account may read it."""

    def __init__(self):
        self.readable = True
        self._said_unreadable = False

    def _forbidden(self) -> None:
        self.readable = False
        if not self._said_unreadable:
            self._said_unreadable = True
            log("(this service account may not read Kueue objects, so Kueue's own reasons are not shown)")

    def workload(self, rc: dict) -> dict | None:
        """The cluster's Workload (Kueue labels it with the job's uid), or None."""
        if not self.readable:
            return None
        co, ns, uid = kube.custom(), rc["metadata"]["namespace"], rc["metadata"]["uid"]
        try:
            wls = kube.call(co.list_namespaced_custom_object, *KUEUE, ns, "workloads", what="list Workloads", attempts=1,
                            label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
            if not wls:
                wls = [w for w in kube.call(co.list_namespaced_custom_object, *KUEUE, ns, "workloads",
                                            what="list Workloads", attempts=1)["items"]
                       if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or [])]
        # Only a hint: never fail provisioning over it. (Cancelled is no Exception: it passes.)
        except Exception as exc:  # noqa: BLE001
            if kube.forbidden(exc):
                self._forbidden()
            return None
        return wls[0] if wls else None

    def eviction(self, rc: dict) -> Eviction | None:
        """Kueue's latest eviction of the cluster's Workload, current or previous (after
        re-admission Kueue keeps it as Evicted=False, message "Previously: ...")."""
        wl = self.workload(rc)
        if wl is None:
            return None
        status = wl.get("status") or {}
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Evicted"), None)
        requeue = status.get("requeueState") or {}
        if cond is None and not requeue:
            return None
        message = (cond or {}).get("message", "")
        reason = (cond or {}).get("reason", "")
        if message.startswith("Previously: "):  # readmitted: the condition's reason is now QuotaReserved
            message = message[len("Previously: "):]
            reason = next((r for r, start in PREVIOUS_REASONS if message.startswith(start)), reason)
        return Eviction(reason, message, int(requeue.get("count") or 0), requeue.get("requeueAt") or "",
                        (wl.get("spec") or {}).get("active") is False, (cond or {}).get("status") == "True")

    def waiting_reason(self, rc: dict) -> str:
        """Why the Workload waits (QuotaReserved's message) and its ClusterQueue's usage."""
        wl = self.workload(rc)
        if wl is None:
            return ""
        co, ns = kube.custom(), rc["metadata"]["namespace"]
        parts = []
        cond = next((c for c in (wl.get("status") or {}).get("conditions", []) if c["type"] == "QuotaReserved"), None)
        if cond and cond.get("status") != "True" and cond.get("message"):
            parts.append(f"Kueue: {cond['message']}")
        try:
            lq = kube.call(co.get_namespaced_custom_object, *KUEUE, ns, "localqueues", wl["spec"].get("queueName"),
                           what="read the LocalQueue", attempts=1)
            cq_name = lq["spec"]["clusterQueue"]
            cq = kube.call(co.get_cluster_custom_object, *KUEUE, "clusterqueues", cq_name, what="read the ClusterQueue",
                           attempts=1)
        except Exception as exc:  # noqa: BLE001 - only a hint (Cancelled is no Exception: it passes)
            if kube.forbidden(exc):
                self._forbidden()
            return "; ".join(parts)
        used = {r["name"]: r["total"] for f in (cq.get("status") or {}).get("flavorsUsage", []) for r in f["resources"]}
        quota = {r["name"]: str(r["nominalQuota"]) for g in cq["spec"].get("resourceGroups", [])
                 for f in g.get("flavors", []) for r in f.get("resources", [])}
        usage = ", ".join(f"{k} {used.get(k, '0')}/{v}" for k, v in quota.items())
        parts.append(f"ClusterQueue {cq_name} in use: {usage}; {cq.get('status', {}).get('pendingWorkloads', 0)} pending")
        return "; ".join(parts)
