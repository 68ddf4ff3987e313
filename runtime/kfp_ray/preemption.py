"""Kueue preemption while a job runs, in both lifecycles: the budget and its cost (Preemptions),
and, for a RayCluster kfp-ray provisioned, how follow sees it (ClusterFollower) and waits for
the cluster to come back (wait_readmitted).

A preempted RayCluster (Kueue 0.11-0.13, jobframework reconciler: the Workload gets Evicted
reason Preempted, the job integration sets spec.suspend) loses its pods: KubeRay (1.4,
raycluster_controller.go) deletes them and sets state "suspended". Kueue requeues the
Workload; once quota frees it admits it again and clears spec.suspend, and KubeRay starts new
pods: a new head, whose Ray knows none of the old jobs. So the job must be submitted again,
and a job that keeps checkpoints resumes from its last one."""

from __future__ import annotations

import time

from . import jobs
from .errors import AdmissionTimeout, ClusterError, JobLost, Preempted, StartupTimeout
from .rayclusters import being_deleted, get, suspended
from .wait import Backoff, beat, first_line, log

# Ridden out this many times by default (the max_preemptions input of follow_ray_job and
# run_ray_job): a run preempted more often than that is better given up, its quota freed.
MAX_PREEMPTIONS = 3
# The RayCluster is read this often while the job runs (and whenever the dashboard fails to
# answer): 12 GETs a minute, as for a RayJob (issue 13's budget is 20 a cluster-minute).
CHECK_EVERY = 5.0
# A job says where it saved a checkpoint with a line `KFP_RAY_CHECKPOINT <where>`: the work
# since the newest one is what a preemption loses.
CHECKPOINT_PREFIX = "KFP_RAY_CHECKPOINT"


class Preemptions:
    """A run's preemptions, counted against `budget` (max_preemptions), and the seconds they
    cost: the job's run time that was lost (since its last checkpoint, where it reports
    them, else since it started) plus the wait for re-admission and a new cluster."""

    def __init__(self, name: str, budget: int, clock=time.monotonic, what: str = "the job runs again on a new cluster"):
        self.name, self.budget, self.clock, self.what = name, budget, clock, what
        self.count, self.lost_seconds = 0, 0.0
        self._since: float | None = None
        self.times: list[list[str]] = []  # [when preempted, when running again] (UTC): the report's timeline

    def preempted(self, exc: Preempted, ran_seconds: float) -> None:
        """Count one; raise Preempted past the budget (the caller frees the cluster)."""
        self.count += 1
        self.lost_seconds += ran_seconds
        if self.count > self.budget:
            raise Preempted(f"{exc}. Preempted {self.count} time{'s' if self.count > 1 else ''}, more than "
                            f"max_preemptions={self.budget}, so the run is given up. Fix: raise max_preemptions or "
                            "priority_class") from None
        self._since = self.clock()
        self.times.append([utc_now(), ""])
        log(f"{exc}. Preemption {self.count} of at most {self.budget} ridden out ({ran_seconds:.0f}s of the job lost): "
            f"waiting for Kueue to admit it again; {self.what}")

    def heading(self) -> str:
        """The job log's line before the run on a new cluster ("": the first run)."""
        return f"--- kfp-ray: preempted ({self.count}); {self.what} ---\n" if self.count else ""

    def running_again(self) -> None:
        if self._since is not None:
            self.lost_seconds += self.clock() - self._since
            self._since = None
            self.times[-1][1] = utc_now()


def utc_now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="milliseconds")


def ready_mark(rc: dict | None) -> str:
    """When the RayCluster last became ready (KubeRay's status.stateTransitionTimes): a new
    value is a new set of pods, ready again after a suspension."""
    return ((rc or {}).get("status") or {}).get("stateTransitionTimes", {}).get("ready", "") if rc else ""


def _state(rc: dict) -> str:
    return ((rc.get("status") or {}).get("state") or "").lower()


def cluster_preempted(rc: dict, mark: str) -> bool:
    """Kueue suspended the cluster since it was ready at `mark`: suspended now, or suspended
    and admitted again between two looks (ready again since). A cluster never ready (KubeRay
    1.2+ records when it became ready) was never admitted: not preempted, not follow's to judge."""
    return bool(ready_mark(rc)) and (suspended(rc) or _state(rc) == "suspended" or bool(mark and ready_mark(rc) != mark))


def cluster_suspension(rc: dict) -> str:
    """What suspended the RayCluster, in Kueue's words where this service account may read its Workload."""
    from .queues import KueueView

    name = rc["metadata"]["name"]
    try:
        ev = KueueView().eviction(rc)
    except Exception as exc:  # noqa: BLE001 - the words are a nicety; the suspension is seen
        log(f"could not read the Workload of RayCluster {name} ({type(exc).__name__}: {first_line(exc)})")
        ev = None
    if ev and ev.reason:
        return f"Kueue suspended RayCluster {name!r} while its job ran: {ev.reason}: {ev.message}"
    return (f"Kueue suspended RayCluster {name!r} while its job ran (preempted, or its queue stopped; Kueue's reason "
            "is in its Workload, which this service account may not read)")


class ClusterFollower(jobs.Follower):
    """jobs.Follower for a job on a RayCluster that Kueue may preempt: every CHECK_EVERY seconds,
    and whenever the dashboard does not answer or no longer knows the job, it reads the
    RayCluster, and raises Preempted when Kueue has suspended it (instead of waiting out an
    outage, or calling the job lost on a new head). Records when the job was last seen
    checkpointing (`KFP_RAY_CHECKPOINT` lines)."""

    def __init__(self, dashboard_url: str, job_id: str, timeout: float, cluster_name: str, namespace: str,
                 mark: str = "", **kwargs):
        super().__init__(dashboard_url, job_id, timeout, **kwargs)
        self.cluster_name, self.ns, self.mark = cluster_name, namespace, mark
        self._checked = -CHECK_EVERY
        self.checkpointed_at: float | None = None  # self.clock() when the last checkpoint line came
        self.checkpoint = ""

    def _poll(self) -> dict | None:
        checked = self.clock() - self._checked >= CHECK_EVERY
        if checked:
            self._check()
        try:
            info = super()._poll()
        except JobLost:
            if not checked:
                self._check()  # a new head after a preemption knows none of the old jobs
            raise
        if info is None and not checked:
            self._check()  # the head may be gone with its preempted cluster
        return info

    def _check(self) -> None:
        self._checked = self.clock()
        try:
            rc = get(self.cluster_name, self.ns, attempts=1)
        except Exception as exc:  # noqa: BLE001 - only a second opinion; the dashboard is followed
            log(f"could not read RayCluster {self.cluster_name} ({type(exc).__name__}: {first_line(exc)})")
            return
        if rc is None:
            return  # deleted: the dashboard's answer (or silence) says what became of the job
        if not self.mark:
            self.mark = ready_mark(rc)
        if cluster_preempted(rc, self.mark):
            raise Preempted(cluster_suspension(rc))

    def _emit(self, text: str) -> None:
        super()._emit(text)
        if CHECKPOINT_PREFIX in text:  # a block of lines: the newest checkpoint line counts
            lines = [ln for ln in text.splitlines() if ln.startswith(CHECKPOINT_PREFIX)]
            if lines:
                self.checkpointed_at, self.checkpoint = self.clock(), lines[-1][len(CHECKPOINT_PREFIX):].strip()

    def lost_seconds(self, started: float) -> float:
        """The job's work a preemption now loses: since its last checkpoint, else since `started`."""
        return self.clock() - max(started, self.checkpointed_at or started)


def wait_readmitted(name: str, namespace: str, mark: str, admission_timeout: float, startup_timeout: float,
                    heartbeat=None, clock=time.monotonic, sleep=time.sleep) -> None:
    """Wait until Kueue admits the preempted RayCluster again (at most admission_timeout while it
    is suspended) and its new pods are ready (at most startup_timeout once admitted): ready
    again means ready since `mark`, never the old pods KubeRay is still stopping. Raises
    AdmissionTimeout, StartupTimeout, or ClusterError when the cluster is deleted meanwhile.
    (Not readiness.wait_ready: that one, with its pod diagnosis and Kueue queue reads, would
    add about 13 KB to follow's embedded runtime, copied into each run's Workflow several times;
    these pods already started once, with the same image.)"""
    spent = {"queued": 0.0, "starting": 0.0}
    limits = {"queued": admission_timeout, "starting": startup_timeout}
    backoff, phase, last, down = Backoff(0.5, 1.5, 5.0), "", clock(), False
    while True:
        beat(heartbeat)
        rc = get(name, namespace)
        if rc is None or being_deleted(rc):
            raise ClusterError(f"RayCluster {name} was deleted while it waited to be admitted again after its "
                               "preemption")
        now = clock()
        if phase:
            spent[phase] += now - last
        last = now
        state = _state(rc)
        down = down or suspended(rc) or state == "suspended"
        if not suspended(rc) and state == "ready" and (down or ready_mark(rc) not in ("", mark)):
            return
        now_phase = "queued" if suspended(rc) else "starting"
        if now_phase != phase:
            phase = now_phase
            log(f"waiting for Kueue to admit RayCluster {name} again (at most {admission_timeout:.0f}s queued)"
                if phase == "queued" else
                f"RayCluster {name} is admitted again: waiting for its new pods (at most {startup_timeout:.0f}s)")
        if spent[phase] > limits[phase]:
            if phase == "queued":
                raise AdmissionTimeout(f"RayCluster {name} was preempted and not admitted again within "
                                       f"{admission_timeout:.0f}s. Fix: raise admission_timeout, or priority_class")
            raise StartupTimeout(f"RayCluster {name} was preempted and admitted again, but its new pods were not "
                                 f"ready within {startup_timeout:.0f}s. Fix: raise startup_timeout")
        sleep(backoff.next())
