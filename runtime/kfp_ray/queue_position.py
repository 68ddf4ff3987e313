"""Where a queued cluster stands in its LocalQueue, and when it may be admitted.

Kueue's own answer, the visibility API's pending workloads (visibility.kueue.x-k8s.io/v1beta1),
is not served on OpenShift AI: the Red Hat build of Kueue 1.1 (RHOAI 3.x, openshift/kueue-operator
release-1.1 pkg/configmap) and RHOAI 2.25's Kueue (config/rhoai manager_config_patch.yaml) both
turn its feature gate VisibilityOnDemand off and install no APIService. So the position is
worked out as Kueue orders a ClusterQueue's pending workloads (v0.11.6 / v0.12.10,
pkg/queue/cluster_queue.go queueOrderingFunc: higher priority first, then the older queue
timestamp: the creation time, or the eviction time of one requeued after PodsReadyTimeout), among the pending
Workloads of the same LocalQueue this service account may list (deploy/rbac-kfp-ray.yaml, part 1).
Position 0 is next in line, as the visibility API counts (positionInLocalQueue). Workloads of
other projects in the same ClusterQueue are not visible from a project: the ClusterQueue's
pendingWorkloads count says how many wait there in all.

The estimate: the rate at which the workloads ahead were admitted since this task began waiting
(positions gained per second), applied to the position left; no estimate before the first move.
"""

from __future__ import annotations

import time

from . import kube
from .queues import KUEUE
from .wait import log

STATES = ("Admitted", "QuotaReserved", "Finished")
READ_EVERY = 10.0  # Workloads are listed this often while queued (6 a minute, beside the wait's 12 reads)


def _pending(wl: dict) -> bool:
    conds = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []}
    return not any(conds.get(t) == "True" for t in STATES) and wl["spec"].get("active", True) is not False


REQUEUED_FROM_EVICTION = ("PodsReadyTimeout", "AdmissionCheck")  # workload.GetQueueOrderTimestamp's reasons


def order_key(wl: dict) -> tuple:
    """Kueue's queue order: priority (higher first), then the queue timestamp (older first): the
    creation time, or the eviction time of one evicted for PodsReadyTimeout or an AdmissionCheck
    (a preempted one keeps its creation time)."""
    conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}
    evicted = conds.get("Evicted")
    stamp = (evicted["lastTransitionTime"] if evicted and evicted.get("status") == "True"
             and evicted.get("reason") in REQUEUED_FROM_EVICTION else wl["metadata"].get("creationTimestamp", ""))
    return -int(wl["spec"].get("priority") or 0), stamp, wl["metadata"]["name"]


def position(workloads: list[dict], uid: str, queue: str) -> tuple[int, int] | None:
    """(the Workload's position among the LocalQueue's pending ones, how many are pending), or
    None when it is not pending there (admitted, or not found)."""
    pending = sorted((w for w in workloads if w["spec"].get("queueName") == queue and _pending(w)), key=order_key)
    owners = [{r.get("uid") for r in w["metadata"].get("ownerReferences") or []}
              | {(w["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid")} for w in pending]
    return next(((i, len(pending)) for i, o in enumerate(owners) if uid in o), None)


class QueuePosition:
    """Called by readiness' queued wait at each poll with the cluster (or RayJob): the phrase its
    progress lines carry ("position 2 of 3 waiting in LocalQueue q (...)"), "" when it cannot
    tell. It lists the namespace's Workloads at most every READ_EVERY seconds, and logs a line
    at once when the position moves."""

    def __init__(self, queue: str, namespace: str, clock=time.monotonic):
        self.queue, self.ns, self.clock = queue, namespace, clock
        self.readable = True
        self.first: tuple[float, int] | None = None  # (when, position) the rate is counted from
        self.last: int | None = None
        self.phrase, self.read_at = "", None
        self.seen: list[tuple[float, int, float | None]] = []  # (when, position, estimate in seconds)

    def read(self, rc: dict) -> tuple[int, int] | None:
        if not self.readable:
            return None
        try:
            wls = kube.call(kube.custom().list_namespaced_custom_object, *KUEUE, self.ns, "workloads",
                            what="list Workloads", attempts=1)["items"]
            return position(wls, rc["metadata"]["uid"], self.queue)
        except Exception as exc:  # noqa: BLE001 - only a hint (Cancelled is no Exception: it passes)
            if kube.forbidden(exc):
                self.readable = False
            return None

    def __call__(self, rc: dict) -> str:
        now = self.clock()
        if self.read_at is not None and now - self.read_at < READ_EVERY:
            return self.phrase
        self.read_at = now
        got = self.read(rc)
        if got is None:
            self.phrase = ""
            return ""
        pos, waiting = got
        moved = self.last is not None and pos != self.last
        if self.first is None or pos > self.first[1]:
            self.first = (now, pos)  # the first reading, or one of higher priority came in: count again
        estimate = self.estimate(now, pos)
        self.seen.append((now, pos, estimate))
        eta = (f"about {estimate:.0f}s to admission at the rate the ones ahead were admitted" if estimate is not None
               else "no estimate until one ahead is admitted")
        self.phrase = f"position {pos} of {waiting} waiting in LocalQueue {self.queue} ({'next in line; ' if pos == 0 else ''}{eta})"
        if moved:
            log(f"queued: now {self.phrase}, was position {self.last}")
        self.last = pos
        return self.phrase

    def estimate(self, now: float, pos: int) -> float | None:
        """Seconds until admission at the rate positions were gained since the first reading."""
        start, first = self.first
        gained = first - pos
        if gained <= 0 or now <= start:
            return None
        return (pos + 1) * (now - start) / gained  # position 0 still waits for one admission
