"""The RayCluster path's view of a Kueue preemption (kfp_ray.preemption): when a followed cluster
counts as preempted, the wait for it to come back (never on the old pods), and what a
preemption costs when the job reports checkpoints."""

from __future__ import annotations

import pytest

from kfp_ray import preemption
from kfp_ray.errors import AdmissionTimeout, ClusterError, StartupTimeout
from tests.helpers import FakeClock

READY_AT = "2026-11-27T10:00:00Z"


def rc(suspend=False, state="ready", ready_at=READY_AT) -> dict:
    status = {"state": state, **({"stateTransitionTimes": {"ready": ready_at}} if ready_at else {})}
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"suspend": suspend}, "status": status}


@pytest.mark.parametrize("obj,expected", [
    (rc(), False),
    (rc(suspend=True), True),  # Kueue has set it; KubeRay has not deleted the pods yet
    (rc(suspend=True, state="suspended"), True),
    (rc(state="suspended"), True),  # admitted again, its new pods not up yet
    (rc(ready_at="2026-11-27T10:05:00Z"), True),  # a whole suspension between two looks
    (rc(suspend=True, state="", ready_at=""), False),  # never ready, so never admitted: not follow's to judge
], ids=["running", "suspend-set", "suspended", "readmitted-starting", "ready-again", "never-ready"])
def test_when_a_followed_cluster_counts_as_preempted(obj, expected):
    assert preemption.cluster_preempted(obj, READY_AT) is expected


def waiting(monkeypatch, states: list[dict]):
    """wait_readmitted over `states` (one per look; the last repeats), on a fake clock."""
    clock = FakeClock(0.0)
    looks = iter(states)
    last: dict = {}

    def get(name, namespace):
        nonlocal last
        last = next(looks, last)
        return last

    monkeypatch.setattr(preemption, "get", get)
    return clock


def test_the_wait_ends_only_on_new_pods_ready(monkeypatch, capsys):
    clock = waiting(monkeypatch, [rc(suspend=True), rc(suspend=True, state="suspended"), rc(state="suspended"),
                                  rc(ready_at="2026-11-27T10:07:00Z")])
    preemption.wait_readmitted("c", "ns", READY_AT, 60, 60, clock=clock, sleep=clock.advance)
    out = capsys.readouterr().out
    assert "waiting for Kueue to admit RayCluster c again (at most 60s queued)" in out
    assert "RayCluster c is admitted again: waiting for its new pods (at most 60s)" in out


def test_the_old_pods_still_ready_are_not_the_cluster_back(monkeypatch):
    # spec.suspend cleared again before KubeRay had stopped anything: the same pods, the same ready time
    clock = waiting(monkeypatch, [rc()])
    with pytest.raises(StartupTimeout, match="its new pods were not ready within 30s. Fix: raise startup_timeout"):
        preemption.wait_readmitted("c", "ns", READY_AT, 60, 30, clock=clock, sleep=clock.advance)


def test_admission_and_startup_each_have_their_timeout(monkeypatch):
    clock = waiting(monkeypatch, [rc(suspend=True, state="suspended")])
    with pytest.raises(AdmissionTimeout, match="not admitted again within 45s. Fix: raise admission_timeout"):
        preemption.wait_readmitted("c", "ns", READY_AT, 45, 600, clock=clock, sleep=clock.advance)
    assert clock() < 60  # the admission timeout, not the sum of both


def test_a_cluster_deleted_meanwhile_ends_the_wait(monkeypatch):
    clock = waiting(monkeypatch, [rc(suspend=True), None])
    with pytest.raises(ClusterError, match="was deleted while it waited to be admitted again"):
        preemption.wait_readmitted("c", "ns", READY_AT, 60, 60, clock=clock, sleep=clock.advance)


def test_the_work_lost_counts_from_the_last_checkpoint_line(monkeypatch):
    clock = FakeClock(100.0)
    f = preemption.ClusterFollower("http://c-head-svc.ns.svc:8265", "job-1", 60, "c", "ns", clock=clock,
                                   echo=lambda line: None)
    try:
        clock.advance(50.0)
        assert f.lost_seconds(started=100.0) == 50.0  # no checkpoint yet: all of it
        f._emit("epoch 1\nKFP_RAY_CHECKPOINT s3://b/run/checkpoints/epoch-1\nepoch 2\n")
        clock.advance(20.0)
        assert f.lost_seconds(started=100.0) == 20.0 and f.checkpoint == "s3://b/run/checkpoints/epoch-1"
    finally:
        f.close()


def test_every_submission_of_a_run_gets_the_same_checkpoint_folder():
    from kfp_ray import jobs

    env = jobs.build_runtime_env(None, None, {"KFP_RAY_OUTPUT": "s3://b/fashion/run-1/"})["env_vars"]
    assert env["KFP_RAY_CHECKPOINTS"] == "s3://b/fashion/run-1/checkpoints/"
    mine = jobs.build_runtime_env(None, None, {"KFP_RAY_OUTPUT": "s3://b/o", "KFP_RAY_CHECKPOINTS": "s3://b/mine/"})
    assert mine["env_vars"]["KFP_RAY_CHECKPOINTS"] == "s3://b/mine/"  # the user's own wins
    assert "KFP_RAY_CHECKPOINTS" not in (jobs.build_runtime_env(None, None, {"X": "1"}).get("env_vars") or {})


def test_each_preemption_keeps_when_it_came_and_when_the_job_ran_again():
    from datetime import datetime

    from kfp_ray.errors import Preempted

    p = preemption.Preemptions("c", 2, clock=FakeClock(0.0))
    p.preempted(Preempted("Kueue suspended RayCluster 'c'"), 5.0)
    assert p.times[0][1] == ""  # not running again yet: the report draws no span
    p.running_again()
    at, back = (datetime.fromisoformat(t) for t in p.times[0])
    assert at.tzinfo is not None and back >= at
