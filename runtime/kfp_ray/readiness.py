"""Waiting for a RayCluster to be ready: *queued* until Kueue admits it, *starting* until
every pod is ready, and back to *queued* when Kueue evicts it.

Where Kueue's waitForPodsReady is on (RHOAI 2.x ships it on, timeout 5 min; on 3.x the Red
Hat build of Kueue leaves it off unless the administrator sets the Kueue CR's
gangScheduling.policy: ByWorkload), Kueue evicts an admitted workload whose pods are not all
ready in time: Workload condition Evicted, reason PodsReadyTimeout, then it suspends the
RayCluster again (spec.suspend true, KubeRay deletes the pods) and requeues it with backoff
(60 s * 2^(n-1)). Without it, only startup_timeout bounds a start, and an eviction is a
preemption or a stopped queue. RHOAI's pipeline-runner may not
read Workloads, so an eviction is seen on the RayCluster itself: suspended again after it
was admitted, or KubeRay's suspension conditions moved (Admissions); Kueue's own count where
the optional RBAC lets it be read.

A RayJob waits the same way (`RayJobTarget`, rayjobs.py): Kueue suspends and admits the
RayJob, KubeRay then creates its RayCluster, whose pods are watched as a RayCluster's."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from . import kube
from .diagnose import IMAGE_PULL_GRACE, PodTrouble, placement, pod_summary, replica_failure, unschedulable
from .errors import AdmissionTimeout, ClusterError, Evicted, PodsFailing, StartupTimeout
from .queues import KueueView
from .rayclusters import being_deleted, get, suspended
from .wait import Backoff, beat, log

MAX_EVICTIONS = 2  # the second eviction fails provisioning
PROGRESS_EVERY = 15.0
# pipeline-runner may not watch RayClusters (RHOAI's Role: create, get, list, patch, delete),
# so waits poll, one GET each, trading latency against API load:
QUEUED_POLL_CAP = 5.0  # queued (maybe for hours): 12 GETs a minute at most ...
REASON_EVERY = 60.0  # ... and why it waits (its LocalQueue and ClusterQueue) read once a minute
STARTING_POLL_CAP = 1.0  # starting: "ready" is seen within a second (no sooner than 1 s: pods take longer) ...
STARTING_FAST_S = 60.0  # ... for the first minute; then every SLOW_POLL_CAP (a long image pull)
SLOW_POLL_CAP = 5.0
PODS_EVERY = 5.0  # the pods (why they do not start) are listed this often while starting
PODS_READY_CAUSE = ("Kueue evicts a cluster whose pods are not all ready within its pods-ready timeout "
                    "(waitForPodsReady: on by default on OpenShift AI 2.x, 5 minutes; on 3.x where the administrator turned "
                    "on gang scheduling) and requeues it; the usual cause is a "
                    "Ray image whose pull takes longer than that (the RHOAI CUDA image is several GB) or pods slow "
                    "to start")
# Kueue's quota admitted the cluster, and no node has room for a pod of it (capacity is not quota).
NO_NODE_CAUSE = ("Kueue's quota admitted it, but kube-scheduler found no node for its pods (quota is not node "
                 "capacity): ")
NO_NODE_FIX = ("request no more per pod than a worker node can hold (head_cpu/worker_cpu, memory, worker_gpus; "
               "`oc describe nodes` shows each node's allocatable), add `tolerations` or a node_selector where "
               "a tainted node would take it, or ask your administrator for bigger nodes or an autoscaler")
PODS_READY_FIX = ("pre-pull the image on the nodes or mirror it to a registry close to the cluster, use a smaller "
                  "image (`image`), or ask your OpenShift AI administrator to raise Kueue's waitForPodsReady.timeout")


_SUSPEND_CONDITIONS = ("RayClusterSuspending", "RayClusterSuspended")


def _suspend_marks(rc: dict) -> dict[str, tuple]:
    """KubeRay's (v1.3+) suspension conditions, type: (status, lastTransitionTime)."""
    conds = {c.get("type"): c for c in (rc.get("status") or {}).get("conditions") or []}
    return {t: (conds[t].get("status"), conds[t].get("lastTransitionTime")) for t in _SUSPEND_CONDITIONS if t in conds}


class Admissions:
    """Admissions and evictions, from successive observations of the RayCluster: what
    pipeline-runner may read. An eviction is a real suspension: spec.suspend seen true again
    after an admission, or, for one that began and ended between two polls (Kueue suspended
    it, KubeRay deleted its pods, Kueue admitted it again), KubeRay's RayClusterSuspending or
    RayClusterSuspended condition transitioning again once KubeRay had settled the admitted
    cluster on both False. Any other spec write (an autoscaler's replica change) is none. Kueue's own
    count (Workload status.requeueState.count), where readable, refines the count (_Wait.evicted).
    Without KubeRay's conditions (its RayClusterStatusConditions gate off) a whole eviction
    between two polls is not seen here: Kueue's requeue backoff (60 s and more on OpenShift AI)
    is far longer than a poll (5 s at most)."""

    def __init__(self):
        self.admitted = False
        self.marks: dict[str, tuple] | None = None  # the suspension conditions once settled after admission
        self.evictions = 0

    def observe(self, rc: dict) -> str | None:
        """'admitted', 'evicted' (suspended again), 'readmitted' (a whole eviction happened
        between observations), or None (no change)."""
        if not self.admitted:
            if suspended(rc):
                return None
            self.admitted, self.marks = True, None
            self._settle(rc)
            return "admitted"
        if suspended(rc):
            self.admitted, self.marks = False, None
            self.evictions += 1
            return "evicted"
        if self.marks is None:
            self._settle(rc)
            return None
        # Settled, both False: any transition since is a suspension begun (and, spec.suspend
        # being false again, ended).
        now = _suspend_marks(rc)
        if any(now.get(t, (None, None))[1] != self.marks[t][1] for t in _SUSPEND_CONDITIONS):
            self.marks = None
            self._settle(rc)
            self.evictions += 1
            return "readmitted"
        return None

    def _settle(self, rc: dict) -> None:
        """Take KubeRay's conditions as the admitted cluster's baseline once KubeRay has
        written both as False (it had not yet caught up with the admission before)."""
        marks = _suspend_marks(rc)
        if len(marks) == len(_SUSPEND_CONDITIONS) and all(st == "False" for st, _ in marks.values()):
            self.marks = marks


class ClusterTarget:
    """What the wait looks at: the RayCluster itself. A RayJob's target (rayjobs.py) reads
    the RayJob (queued/admitted) and the cluster KubeRay made for it (starting)."""

    kind = "RayCluster"

    def __init__(self, name: str, namespace: str):
        self.name, self.ns = name, namespace

    def read(self) -> dict | None:
        return get(self.name, self.ns)

    def ready(self, obj: dict) -> bool:
        return ((obj.get("status") or {}).get("state") or "").lower() == "ready"

    def cluster(self, obj: dict, now: float) -> dict | None:
        """The RayCluster whose pods start (for KubeRay's ReplicaFailure)."""
        return obj

    def cluster_name(self, obj: dict) -> str:
        return self.name


@dataclass
class Waited:
    queued_seconds: float
    starting_seconds: float
    evictions: int
    admitted: dict  # Kueue's record of its admission (admission()): the usage ledger's resources


def admission(wl: dict | None, rc: dict | None) -> dict:
    """Kueue's record of the admission, which usage.admitted sums: the Workload's name and
    status; where it is not readable, the pod sets (replicas, requests) of the RayCluster or
    RayJob it was made from. The
    caller adds `seen`, when this wait saw the admission (epoch seconds)."""
    if wl and wl.get("status"):
        return {"name": wl["metadata"]["name"], **wl["status"]}
    spec = (rc or {}).get("spec") or {}
    spec = spec.get("rayClusterSpec") or spec  # a RayJob's Workload is made from its cluster spec
    groups = [spec.get("headGroupSpec") or {}, *(spec.get("workerGroupSpecs") or [])]
    return {"cluster": [[g.get("replicas", 1), [(c.get("resources") or {}).get("requests") or {}
                                               for c in ((g.get("template") or {}).get("spec") or {}).get("containers") or []]]
                        for g in groups if g]}


class _Wait:
    def __init__(self, name, namespace, queue, admission_timeout, startup_timeout, queue_note, clock, sleep,
                 heartbeat=None, image_pull_grace=IMAGE_PULL_GRACE, target=None, position=None):
        self.heartbeat, self.position = heartbeat, position
        self.target = target or ClusterTarget(name, namespace)
        self.kind = self.target.kind
        self.cluster_name = name
        self.name, self.ns, self.queue, self.queue_note = name, namespace, queue, queue_note
        self.budget = {"queued": float(admission_timeout), "starting": float(startup_timeout)}
        self.spent = {"queued": 0.0, "starting": 0.0}
        self.phase = "queued"
        self.clock, self.sleep = clock, sleep
        self.kueue = KueueView()
        self.trouble = PodTrouble(pull_grace=image_pull_grace, clock=clock)
        self.admissions = Admissions()
        self.requeue_baseline: int | None = None
        self.pods = "no pods yet"
        self.unplaced: list = []  # scheduling.Unschedulable of the pods last seen unscheduled
        self.why = ""
        self.last_progress = -PROGRESS_EVERY
        self.pods_listed: float | None = None
        self.reason_read = -REASON_EVERY
        self.said_blind = False
        self.kueue_read = -PODS_EVERY

    # --- the loop ------------------------------------------------------------------
    def run(self) -> Waited:
        backoff = Backoff(0.25, 1.5, QUEUED_POLL_CAP)
        last = self.clock()
        while True:
            beat(self.heartbeat)
            rc = self.target.read()
            now = self.clock()
            self.spent[self.phase] += now - last
            last = now
            if rc is None:
                raise ClusterError(f"{self.kind} {self.name!r} disappeared while {self.phase} (deleted by someone else?)")
            if being_deleted(rc):
                raise ClusterError(f"{self.kind} {self.name!r} is being deleted (by someone else?) while {self.phase}")
            if self.requeue_baseline is None:
                ev = self.kueue.eviction(rc)
                self.requeue_baseline = ev.requeues if ev else 0
            event, record = self.admissions.observe(rc), None
            if event is None:
                record = self.kueue_readmitted(rc, now)
                event = "readmitted" if record else None
            if event == "admitted":
                log(f"admitted by Kueue after {self.spent['queued']:.1f}s queued; starting pods")
                self.phase, backoff = "starting", Backoff(STARTING_POLL_CAP, 1.0, STARTING_POLL_CAP,
                                                          later=(STARTING_FAST_S, SLOW_POLL_CAP))
                self.pods_listed = now  # the first look at the pods after PODS_EVERY
            elif event in ("evicted", "readmitted"):
                self.evicted(rc, readmitted=event == "readmitted", ev=record)
                if event == "evicted":
                    self.phase, backoff = "queued", Backoff(0.25, 1.5, QUEUED_POLL_CAP)
                    self.last_progress = -PROGRESS_EVERY
                    self.reason_read = -REASON_EVERY
            if self.phase == "starting" and self.started(rc, now):
                return Waited(round(self.spent["queued"], 2), round(self.spent["starting"], 2), self.admissions.evictions,
                              admission(self.kueue.workload(rc), rc)
                              | {"seen": time.time() - self.spent["starting"]})
            if self.phase == "queued":
                self.queued(rc, now)
            left = self.budget[self.phase] - self.spent[self.phase]
            if left <= 0:
                if self.phase == "starting":
                    self.look_at_pods(now)  # what they are doing now, for the message
                raise self.timed_out()
            self.sleep(min(backoff.next(), left))

    def kueue_readmitted(self, rc: dict, now: float):
        """The Workload's eviction record (queues.Eviction) when Kueue's own record (where this service account may read it) has
        more evictions, all over, than the RayCluster showed: one that began and ended
        between two polls. Only for a cluster without KubeRay's suspension conditions (they
        are the witness where present: two witnesses of one eviction, seen at different
        polls, would count it twice). Read every PODS_EVERY seconds while starting."""
        if (self.phase != "starting" or not self.kueue.readable or now - self.kueue_read < PODS_EVERY
                or _suspend_marks(rc)):
            return None
        self.kueue_read = now
        ev = self.kueue.eviction(rc)
        return ev if ev and not ev.ongoing and self._new_requeues(ev) else None

    def _new_requeues(self, ev) -> bool:
        """Kueue counted more requeues since this wait began than the evictions seen."""
        return ev.requeues - (self.requeue_baseline or 0) > self.admissions.evictions

    # --- phases --------------------------------------------------------------------
    def queued(self, rc: dict, now: float) -> None:
        where = self.position(rc) if self.position else ""  # queue_position: it says a move itself, at once
        if now - self.last_progress < PROGRESS_EVERY:
            return
        self.last_progress = now
        if now - self.reason_read >= REASON_EVERY:
            self.reason_read = now
            self.why = self.kueue.waiting_reason(rc)
        ev = self.kueue.eviction(rc) if self.admissions.evictions else None
        if ev and ev.deactivated:
            raise Evicted(f"Kueue deactivated {self.kind} {self.name!r}'s Workload after {ev.requeues} requeues "
                          f"({ev.reason}: {ev.message}): it will not be admitted again. {PODS_READY_CAUSE}. "
                          f"Fix: {PODS_READY_FIX}")
        log(f"queued: waiting for Kueue admission in LocalQueue {self.queue} ({self.spent['queued']:.0f}s)"
            + (f" - {where}" if where else "") + (f" - {self.why}" if self.why else "")
            + ("" if self.kueue.readable else self.blind()))

    def blind(self) -> str:
        """Said on each queued line while Kueue is unreadable (RHOAI's pipeline-runner): the
        suspended cluster is all it sees, whether the queue is full or does not exist. The
        first line says how to tell."""
        if self.said_blind:
            return " - a missing LocalQueue would look the same (see above)"
        self.said_blind = True
        return (f" - this service account may not read Kueue, so a LocalQueue that does not exist and a full one look "
                f"the same from here: check `oc get localqueue {self.queue} -n {self.ns}` (or `kfp-ray doctor`), set "
                "local_queue to a queue that exists, or let pipeline-runner read Kueue (deploy/rbac-kfp-ray.yaml, "
                "part 1) to see Kueue's own reason")

    def started(self, rc: dict, now: float) -> bool:
        self.cluster_name = self.target.cluster_name(rc)
        if self.target.ready(rc):
            log(f"RayCluster {self.cluster_name} ready after {self.spent['starting']:.1f}s starting{self.nodes_note()}")
            return True
        problem = replica_failure(self.target.cluster(rc, now) or {})
        if problem and not problem.transient:
            raise PodsFailing(f"RayCluster {self.cluster_name!r} cannot start: {problem}")
        if self.pods_listed is not None and now - self.pods_listed < PODS_EVERY and not self.trouble.suspect:
            return False
        self.look_at_pods(now)
        if now - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = now
            note = (" - KubeRay waits for the head's OAuth ServiceAccount (the platform creates it)"
                    if problem else "")
            log(f"starting: {self.pods} ({self.spent['starting']:.0f}s){note}")
        return False

    def look_at_pods(self, now: float) -> None:
        """List the pods: PodsFailing if one cannot start; else what they are doing (self.pods)."""
        self.pods_listed = now
        pods = kube.call(kube.core().list_namespaced_pod, self.ns, label_selector=f"ray.io/cluster={self.cluster_name}",
                         what="list pods").items if self.cluster_name else []
        trouble = self.trouble.check(pods, self.previous_log)
        if trouble:
            raise PodsFailing(f"RayCluster {self.cluster_name!r} cannot start: {trouble}")
        self.pods = pod_summary(pods)
        if pods:  # kept across an eviction, which deletes the pods: the cause outlives them
            self.unplaced = [v for v in map(unschedulable, pods) if v is not None]

    def nodes_note(self) -> str:
        """'; pods on nodes: head worker-0, worker gpu-worker-0' (where GPU workers landed, for the
        record); '' when the pods cannot be read."""
        try:
            pods = kube.call(kube.core().list_namespaced_pod, self.ns, label_selector=f"ray.io/cluster={self.cluster_name}",
                             what="list pods", attempts=2).items
        except Exception:  # noqa: BLE001 - only a note on the ready line
            return ""
        return f"; pods on nodes: {placement(pods)}" if pods else ""

    def previous_log(self, pod, container: str, lines: int = 20) -> str:
        """The last lines of a crashed container's previous instance (pipeline-runner may read
        pods/log); '' when unreadable. Redacted: the pod has the data connection's keys."""
        from .redact import redact

        try:
            text = kube.call(kube.core().read_namespaced_pod_log, pod.metadata.name, self.ns, container=container,
                             previous=True, tail_lines=lines, what=f"read the log of {pod.metadata.name}")
        except Exception:  # noqa: BLE001 - only a hint for the message
            return ""
        return redact(text or "")

    def evicted(self, rc: dict, readmitted: bool, ev=None) -> None:
        """`ev`: the Workload's record when the caller has just read it."""
        ev = ev or self.kueue.eviction(rc)
        if ev and self._new_requeues(ev):
            self.admissions.evictions = ev.requeues - (self.requeue_baseline or 0)
        count = self.admissions.evictions
        if ev and ev.reason:
            said = f"Kueue evicted it: {ev.reason}: {ev.message}"
        else:
            said = ("it was suspended again after Kueue had admitted it: Kueue evicted it (most likely because its pods were "
                    "not all ready within Kueue's pods-ready timeout, where waitForPodsReady is on, or because a "
                    "higher-priority workload preempted it; this service account may not read the Workload for Kueue's "
                    "exact reason)")
        if readmitted:
            said += " and admitted it again"
        log(f"{self.kind} {self.name}: {said}; pods were: {self.pods}")
        if count >= MAX_EVICTIONS:
            pods_ready = not ev or ev.reason in ("", "PodsReadyTimeout")
            cause = PODS_READY_CAUSE if pods_ready else f"Kueue's last reason: {ev.reason}: {ev.message}"
            fix = PODS_READY_FIX if pods_ready else ("ask your administrator why Kueue evicts it (preemption, "
                                                     "stopped queues), or run when the queue is less busy")
            if pods_ready and self.unplaced:  # not slow pods: pods that no node took
                cause, fix = NO_NODE_CAUSE + self.unplaced[0].waiting_for(), NO_NODE_FIX
            raise Evicted(f"{self.kind} {self.name!r} was evicted by Kueue {count} times, so it is given up. {cause}. "
                          f"Its pods were: {self.pods}. Fix: {fix}")
        budgets = ", ".join(f"{k} {self.budget[k] - self.spent[k]:.0f}s left" for k in ("queued", "starting"))
        requeue = f" at {ev.requeue_at}" if ev and ev.requeue_at else " after a backoff"
        log(f"eviction {count} of {MAX_EVICTIONS} tolerated: Kueue requeues it{requeue}; waiting for admission "
            f"again ({budgets})")

    def timed_out(self) -> ClusterError:
        if self.phase == "queued":
            return AdmissionTimeout(
                f"{self.kind} {self.name!r} was not admitted by Kueue within {self.budget['queued']:.0f}s "
                f"(LocalQueue {self.queue!r}{self.queue_note})" + (f": {self.why}" if self.why else "")
                + ("" if self.kueue.readable else ": this service account may not read Kueue, so it cannot tell a "
                   "LocalQueue that does not exist from a full one")
                + f". Fix: check that LocalQueue {self.queue!r} exists (`oc get localqueues -n {self.ns}`), raise "
                  "admission_timeout to wait longer, request fewer resources, or ask for more quota")
        fix = (NO_NODE_FIX if self.unplaced else "raise startup_timeout (large images take minutes to pull), or check "
               f"the pods' events: `oc describe pods -l ray.io/cluster={self.cluster_name}`")
        return StartupTimeout(
            f"{self.kind} {self.name!r} was admitted but its pods were not ready within {self.budget['starting']:.0f}s "
            f"({self.pods}). Fix: {fix}")


def wait_ready(name: str, namespace: str, queue: str, admission_timeout: float, startup_timeout: float,
               queue_note: str = "", clock=time.monotonic, sleep=time.sleep,
               heartbeat: Callable[[], None] | None = None, image_pull_grace: float = IMAGE_PULL_GRACE,
               target: ClusterTarget | None = None, position=None) -> Waited:
    """Wait until the RayCluster is ready. admission_timeout bounds the time spent queued,
    startup_timeout the time spent starting, each summed over evictions; the second
    eviction fails, and so do pods that cannot start (diagnose.PodTrouble: at once, or once
    an image pull failure or a crash loop persists). Raises AdmissionTimeout,
    StartupTimeout, Evicted, PodsFailing. heartbeat (e.g. a lease renewal) is called once
    per poll; its failures are logged. `target`: what to read (default: the RayCluster
    `name`; rayjobs.RayJobTarget for a RayJob). `position`: a queue_position.QueuePosition,
    called each queued poll, whose phrase each queued line carries."""
    return _Wait(name, namespace, queue, admission_timeout, startup_timeout, queue_note, clock, sleep, heartbeat,
                 image_pull_grace, target, position).run()
