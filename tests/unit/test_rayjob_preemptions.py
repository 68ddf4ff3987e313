"""The RayJob path's view of a Kueue preemption (kfp_ray.rayjobs): when a followed RayJob counts
as suspended, and the budget of preemptions a run rides out."""

from __future__ import annotations

import pytest

from kfp_ray import jobs, rayjobs
from kfp_ray.errors import Preempted
from kfp_ray.validate import Checker
from tests.helpers import FakeClock


def rj(suspend=False, deployment="Running", cluster="job-abcde") -> dict:
    return {"metadata": {"name": "job", "namespace": "ns", "uid": "u"}, "spec": {"suspend": suspend},
            "status": {"jobDeploymentStatus": deployment, "rayClusterName": cluster}}


@pytest.mark.parametrize("obj,expected", [
    (rj(), False),
    (rj(deployment="Complete"), False),
    (rj(suspend=True), True),  # Kueue has set it; KubeRay has not acted yet
    (rj(suspend=True, deployment="Suspending"), True),
    (rj(suspend=True, deployment="Suspended", cluster=""), True),
    (rj(deployment="Initializing", cluster="job-fghij"), True),  # a whole suspension between two looks
    (rj(deployment="Initializing", cluster=""), False),
], ids=["running", "complete", "suspend-set", "suspending", "suspended", "new-cluster", "no-cluster-yet"])
def test_when_a_followed_rayjob_counts_as_suspended(obj, expected):
    assert rayjobs.suspended(obj, "job-abcde") is expected


def test_preemptions_within_the_budget_are_counted_with_what_they_cost(tmp_path, capsys):
    clock = FakeClock(100.0)
    p = rayjobs.Preemptions("job", 2, clock=clock)
    assert p.heading() == ""  # the first run's log starts the file
    p.preempted(Preempted("Kueue suspended RayJob 'job' while its job ran: Preempted: to accommodate"), 30.0)
    clock.advance(45.0)
    p.running_again()
    p.running_again()  # once per preemption
    assert (p.count, p.lost_seconds) == (1, 75.0)
    assert "Preemption 1 of at most 2 ridden out (30s of the job lost)" in capsys.readouterr().out
    # the next run's follower writes its log after the first run's, below the heading
    log = tmp_path / "job.log"
    log.write_text("first run\n")
    jobs.Follower("http://head-svc:8265", "job-1", 60, log_path=str(log), heading=p.heading()).close()
    assert log.read_text() == "first run\n--- kfp-ray: preempted (1); the job runs again on a new cluster ---\n"


def test_past_the_budget_the_preemption_is_raised_naming_the_count():
    p = rayjobs.Preemptions("job", 1)
    p.preempted(Preempted("first"), 1.0)
    with pytest.raises(Preempted, match=r"^second\. Preempted 2 times, more than max_preemptions=1, so the run is given "
                                        r"up\. Fix: raise max_preemptions or priority_class"):
        p.preempted(Preempted("second"), 1.0)


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_max_preemptions_must_be_a_whole_number_of_at_least_zero(value):
    c = Checker()
    rayjobs.check_inputs(c, "K8sJobMode", "", 600, 0, value)
    assert [(e.field, "Fix: give how many Kueue preemptions" in str(e)) for e in c.errors] == [("max_preemptions", True)]


@pytest.mark.parametrize("evicted,expected", [
    ({"status": "True", "reason": "Preempted", "message": "Preempted to accommodate a workload (UID: a) due to x"},
     ("Preempted", "Preempted to accommodate a workload (UID: a) due to x", True)),
    # readmitted before the task looked (v0.11/v0.12: reason QuotaReserved, the message kept as "Previously: ...")
    ({"status": "False", "reason": "QuotaReserved", "message": "Previously: Preempted to accommodate a workload (UID: a)"},
     ("Preempted", "Preempted to accommodate a workload (UID: a)", False)),
    ({"status": "False", "reason": "QuotaReserved", "message": "Previously: Exceeded the PodsReady timeout ns/w"},
     ("PodsReadyTimeout", "Exceeded the PodsReady timeout ns/w", False)),
], ids=["preempted", "readmitted-after-preemption", "readmitted-after-pods-ready-timeout"])
def test_kueues_reason_survives_readmission(monkeypatch, evicted, expected):
    from kfp_ray.queues import KueueView

    view = KueueView()
    monkeypatch.setattr(view, "workload", lambda obj: {"status": {"conditions": [{"type": "Evicted", **evicted}]}})
    ev = view.eviction(rj())
    assert (ev.reason, ev.message, ev.ongoing) == expected
