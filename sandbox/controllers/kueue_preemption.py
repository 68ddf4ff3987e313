"""Kueue's classical preemption within one ClusterQueue, for the sandbox's scheduler (kueue.py).

Matched against kubernetes-sigs/kueue v0.11.6 pkg/scheduler/preemption/preemption.go (RHOAI 2.25:
red-hat-data-services/kueue rhoai-2.25 changes nothing there) and v0.12.10
pkg/scheduler/preemption/{classical,common} (the Red Hat build of Kueue 1.1: openshift/kueue-operator
release-1.1 pins that tag). For a ClusterQueue without a cohort both pick the same targets:
- candidates: Workloads holding quota in the ClusterQueue (admitted, or evicted and not yet
  released), using a resource the preemptor asks for, that spec.preemption.withinClusterQueue
  allows: LowerPriority (strictly lower priority), LowerOrNewerEqualPriority (also an equal
  priority when the preemptor was queued first); Never, the CRD's default and what RHOAI's default
  ClusterQueue keeps, allows none;
- CandidatesOrdering: already evicted first, then lower priority, then the most recent quota
  reservation, then the uid;
- minimalPreemptions: remove candidates in that order until the preemptor fits; then
  fillBackWorkloads: put back each target but the last, latest first, that it still fits without.
Not simulated (docs/sandbox.md): cohorts (reclaimWithinCohort, borrowWithinCohort), fair sharing,
and the flavor assigner's preemption mode over several flavors: the sandbox frees the targets'
usage and runs its one flavor assignment again.
"""

from __future__ import annotations

from collections.abc import Callable

# preemption.go HumanReadablePreemptionReasons
REASONS = {"InClusterQueue": "prioritization in the ClusterQueue",
           "InCohortReclamation": "reclamation within the cohort",
           "InCohortFairSharing": "Fair Sharing within the cohort",
           "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing"}
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def policy(cq: dict) -> str:
    """spec.preemption.withinClusterQueue, Never when unset (the CRD's default)."""
    return (((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue")) or "Never"


def allowed(within: str, preemptor_priority: int, preemptor_ts: str, priority: int, ts: str) -> bool:
    """findCandidates' test of one Workload of the same ClusterQueue."""
    if within == "LowerPriority":
        return priority < preemptor_priority
    if within == "LowerOrNewerEqualPriority":
        return priority < preemptor_priority or (priority == preemptor_priority and preemptor_ts < ts)
    return False


def message(preemptor: dict, reason: str = "InClusterQueue") -> str:
    """preemptionMessage: what the victim's Evicted and Preempted conditions and events say."""
    meta = preemptor["metadata"]
    uid = meta.get("uid") or "UNKNOWN"
    job_uid = (meta.get("labels") or {}).get(JOB_UID_LABEL) or "UNKNOWN"
    return f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to {REASONS[reason]}"


def targets(candidates: list[dict], order: Callable[[dict], tuple], fits: Callable[[list[dict]], bool]) -> list[dict]:
    """The Workloads to preempt so that the preemptor fits (`fits(removed)`), fewest first as
    minimalPreemptions and fillBackWorkloads choose them; [] when removing every candidate
    still leaves it pending (then nothing is preempted)."""
    removed: list[dict] = []
    for cand in sorted(candidates, key=order):
        removed.append(cand)
        if fits(removed):
            break
    else:
        return []
    for i in range(len(removed) - 2, -1, -1):  # the last one removed stays a target
        without = removed[:i] + removed[i + 1:]
        if fits(without):
            removed = without
    return removed
