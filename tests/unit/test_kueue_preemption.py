"""Kueue's preemption within a ClusterQueue and WorkloadPriorityClass priorities (sandbox/controllers/
kueue_preemption.py), pass by pass with a fake clock: the unit tests play KubeRay."""

from __future__ import annotations

import pytest

from kfp_ray_sandbox.apiserver import errors
from kfp_ray_sandbox.controllers import kueue_preemption
from tests.helpers import raycluster
from tests.unit.test_kueue import NS, cond, create, events, make_kueue, rc, set_ray_state, settle, workload

WPC = ("kueue.x-k8s.io", "workloadpriorityclasses")


def priority_class(ctl, name, value):
    ctl.store.create(ctl.rt(*WPC), {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                                    "metadata": {"name": name}, "value": value, "description": f"{name} priority"})


def with_priorities(platform=None, within="LowerPriority"):
    ctl = make_kueue(platform=platform)
    for name, value in (("low", 100), ("high", 1000)):
        priority_class(ctl, name, value)
    if within:
        ctl.store.mutate(ctl.cq_t, None, "cluster-queue",
                         lambda o: o["spec"].update(preemption={"withinClusterQueue": within}))
    return ctl


def cluster(name, cpu, priority=None):
    body = raycluster(name, workers=0, cpu=cpu)
    if priority:
        body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    return body


def run_ready(ctl, name):
    """KubeRay: an admitted cluster's pods start and it is ready."""
    assert rc(ctl, name)["spec"]["suspend"] is False
    set_ray_state(ctl, name, "ready")
    settle(ctl)


@pytest.mark.parametrize("platform", ["rhoai-3.3", "rhoai-2.25"])
def test_a_higher_priority_cluster_preempts_a_running_lower_one_which_is_readmitted_when_it_goes(platform):
    ctl = with_priorities(platform)
    create(ctl, cluster("low", "6", "low"))  # 6 of 9 cpu
    settle(ctl)
    low = workload(ctl, "low")
    assert (low["spec"]["priority"], low["spec"]["priorityClassName"], low["spec"]["priorityClassSource"]) == \
        (100, "low", "kueue.x-k8s.io/workloadpriorityclass")
    run_ready(ctl, "low")

    create(ctl, cluster("high", "6", "high"))
    settle(ctl)
    high, low = workload(ctl, "high"), workload(ctl, "low")
    msg = (f"Preempted to accommodate a workload (UID: {high['metadata']['uid']}, "
           f"JobUID: {rc(ctl, 'high')['metadata']['uid']}) due to prioritization in the ClusterQueue")
    assert (cond(low, "Evicted")["status"], cond(low, "Evicted")["reason"], cond(low, "Evicted")["message"]) == \
        ("True", "Preempted", msg)
    assert (cond(low, "Preempted")["status"], cond(low, "Preempted")["reason"]) == ("True", "InClusterQueue")
    assert cond(low, "QuotaReserved")["status"] == "True"  # held until KubeRay has stopped the cluster
    assert rc(ctl, "low")["spec"]["suspend"] is True and ("Normal", "Stopped", msg) in events(ctl, "low")
    wl_events = events(ctl, low["metadata"]["name"])
    assert ("Normal", "Preempted", msg) in wl_events
    assert (("Normal", "EvictedDueToPreempted", msg) in wl_events) == (platform == "rhoai-3.3")  # workload.Evict, v0.12
    pending = cond(high, "QuotaReserved")
    assert pending["reason"] == "Pending" and pending["message"].endswith(". Pending the preemption of 1 workload(s)")
    assert pending["message"].startswith("couldn't assign flavors to pod set head: insufficient unused quota for cpu")

    set_ray_state(ctl, "low", "suspended")  # KubeRay deleted its pods
    settle(ctl)
    low, high = workload(ctl, "low"), workload(ctl, "high")
    requeued = cond(low, "Requeued")
    assert (requeued["status"], requeued["reason"], requeued["message"]) == ("True", "Preempted", msg)
    assert cond(low, "QuotaReserved")["status"] == "False"  # and queued again at once: the quota's message
    assert cond(low, "Admitted")["reason"] == "NoReservation" and "requeueState" not in low["status"]  # no backoff
    assert cond(high, "Admitted")["status"] == "True" and rc(ctl, "high")["spec"]["suspend"] is False
    run_ready(ctl, "high")

    ctl.store.delete(ctl.rc_t, NS, "high")  # the high-priority work is done
    settle(ctl)
    ctl.clock.advance(60)
    settle(ctl)
    low = workload(ctl, "low")
    assert cond(low, "Admitted")["status"] == "True" and rc(ctl, "low")["spec"]["suspend"] is False
    assert (cond(low, "Evicted")["status"], cond(low, "Evicted")["message"]) == ("False", "Previously: " + msg)
    assert cond(low, "Preempted")["reason"] == "QuotaReserved"
    started = [e for e in ctl.store.list(ctl.rt("", "events"), NS)[0]
               if e["involvedObject"]["name"] == "low" and e["reason"] == "Started"]
    assert [e["count"] for e in started] == [2]  # started, preempted, started again


def test_equal_or_lower_priority_never_preempts_and_the_default_policy_never_does():
    ctl = with_priorities()
    create(ctl, cluster("first", "6", "high"))
    settle(ctl)
    run_ready(ctl, "first")
    create(ctl, cluster("same", "6", "high"))
    create(ctl, cluster("lower", "6", "low"))
    settle(ctl)
    assert cond(workload(ctl, "first"), "Evicted") is None
    assert "Pending the preemption" not in cond(workload(ctl, "same"), "QuotaReserved")["message"]

    ctl = with_priorities(within=None)  # RHOAI's default ClusterQueue: withinClusterQueue Never
    create(ctl, cluster("low", "6", "low"))
    settle(ctl)
    run_ready(ctl, "low")
    create(ctl, cluster("high", "6", "high"))
    settle(ctl)
    assert cond(workload(ctl, "low"), "Evicted") is None and rc(ctl, "low")["spec"]["suspend"] is False


def test_the_fewest_lowest_latest_workloads_are_preempted():
    ctl = with_priorities()
    for name, prio in (("a", "low"), ("b", "low"), ("c", "high")):  # 3 cpu each: the 9 cpu are full
        create(ctl, cluster(name, "3", prio))
        settle(ctl)
        run_ready(ctl, name)
        ctl.clock.advance(5)
    priority_class(ctl, "top", 5000)
    create(ctl, cluster("urgent", "3", "top"))
    settle(ctl)
    evicted = {n for n in "abc" if cond(workload(ctl, n), "Evicted")}
    assert evicted == {"b"}  # lowest priority, most recently admitted; one is enough
    assert cond(workload(ctl, "urgent"), "QuotaReserved")["message"].endswith("Pending the preemption of 1 workload(s)")


def test_a_missing_priority_class_creates_no_workload_until_it_exists():
    ctl = with_priorities()
    create(ctl, cluster("early", "1", "nightly"))
    settle(ctl)
    assert workload(ctl, "early") is None and rc(ctl, "early")["spec"]["suspend"] is True
    assert [e for e in events(ctl, "early") if e[1] != "Suspended"] == []  # Kueue only logs it
    priority_class(ctl, "nightly", 10)
    settle(ctl)
    assert workload(ctl, "early")["spec"]["priority"] == 10


@pytest.mark.parametrize("platform", ["rhoai-3.3", "rhoai-2.25"])
def test_the_priority_class_label_changes_only_as_each_kueue_allows(platform):
    ctl = with_priorities(platform)
    body = create(ctl, cluster("waiting", "12", "low"))  # over the quota: stays suspended
    settle(ctl)
    new = {**body, "metadata": {**body["metadata"], "labels": {**body["metadata"]["labels"],
                                                               "kueue.x-k8s.io/priority-class": "high"}}}
    if platform == "rhoai-2.25":  # v0.11.6: immutable
        with pytest.raises(errors.ApiError, match=r'priority-class\]: Invalid value: "high": field is immutable'):
            ctl.admission("UPDATE", ctl.rc_t, new, body)
        return
    ctl.admission("UPDATE", ctl.rc_t, new, body)  # v0.12.10: may change while suspended
    ctl.store.mutate(ctl.rc_t, NS, "waiting", lambda o: o["metadata"]["labels"].update(new["metadata"]["labels"]))
    settle(ctl)
    wl = workload(ctl, "waiting")
    assert (wl["spec"]["priority"], wl["spec"]["priorityClassName"]) == (1000, "high")
    assert ("Normal", "UpdatedWorkload", f"Updated not matching Workload for suspended job: {NS}/{wl['metadata']['name']}") \
        in events(ctl, "waiting")


def test_targets_are_the_minimal_set_and_none_when_even_all_would_not_do():
    cands = [{"n": n, "size": s} for n, s in (("x", 1), ("y", 4), ("z", 2))]

    def fits_when(need):
        return lambda removed: sum(c["size"] for c in removed) >= need
    order = [c["n"] for c in cands].index
    assert [c["n"] for c in kueue_preemption.targets(cands, lambda c: order(c["n"]), fits_when(4))] == ["y"]  # x put back
    assert [c["n"] for c in kueue_preemption.targets(cands, lambda c: order(c["n"]), fits_when(6))] == ["y", "z"]
    assert kueue_preemption.targets(cands, lambda c: order(c["n"]), fits_when(8)) == []
