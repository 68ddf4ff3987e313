"""A queued cluster's place in its LocalQueue, ordered as Kueue orders pending workloads, and
the estimate from the rate the ones ahead were admitted (runtime/kfp_ray/queue_position.py)."""

from __future__ import annotations

from kfp_ray import queue_position as qp
from tests.helpers import FakeClock


def wl(name, queue="q", priority=0, created="2026-11-28T10:00:00Z", uid=None, conditions=()):
    return {"metadata": {"name": name, "creationTimestamp": created, "labels": {"kueue.x-k8s.io/job-uid": uid or name}},
            "spec": {"queueName": queue, "priority": priority},
            "status": {"conditions": [{"type": t, "status": s, "lastTransitionTime": at, "reason": r}
                                      for t, s, at, *rest in conditions for r in [rest[0] if rest else ""]]}}


def test_kueues_order_priority_first_then_the_older_queue_timestamp():
    wls = [wl("admitted", conditions=[("Admitted", "True", "2026-11-28T09:00:00Z")]),
           wl("late", created="2026-11-28T10:00:09Z"),
           wl("early", created="2026-11-28T10:00:01Z"),
           wl("urgent", priority=100, created="2026-11-28T10:00:30Z"),
           wl("requeued", created="2026-11-28T09:59:00Z",
              conditions=[("Evicted", "True", "2026-11-28T10:00:05Z", "PodsReadyTimeout")]),
           wl("preempted", created="2026-11-28T09:58:00Z", conditions=[("Evicted", "True", "2026-11-28T10:00:20Z", "Preempted")]),
           wl("elsewhere", queue="other", created="2026-11-28T09:00:00Z"),
           wl("reserved", conditions=[("QuotaReserved", "True", "2026-11-28T10:00:00Z")])]
    order = [qp.position(wls, n, "q") for n in ("urgent", "preempted", "early", "requeued", "late")]
    # one evicted for PodsReadyTimeout queues from its eviction; a preempted one keeps its creation time
    assert order == [(0, 5), (1, 5), (2, 5), (3, 5), (4, 5)]
    assert qp.position(wls, "admitted", "q") is None and qp.position(wls, "reserved", "q") is None
    assert qp.position(wls, "elsewhere", "other") == (0, 1)


def test_the_estimate_is_the_rate_positions_were_gained_applied_to_what_is_left(monkeypatch):
    clock = FakeClock()
    pos = QueueAt([2, 2, 1, 1, 0])
    monkeypatch.setattr(qp.QueuePosition, "read", lambda self, rc: pos.next())
    q = qp.QueuePosition("q", "ns", clock=clock)
    phrases = []
    for _ in range(5):
        phrases.append(q({}))
        clock.advance(qp.READ_EVERY)
    assert phrases[0] == "position 2 of 3 waiting in LocalQueue q (no estimate until one ahead is admitted)"
    # one position gained in 20 s: position 1 needs two admissions, 40 s
    assert phrases[2] == "position 1 of 3 waiting in LocalQueue q (about 40s to admission at the rate the ones ahead were admitted)"
    assert phrases[4].startswith("position 0 of 3 waiting in LocalQueue q (next in line; about 20s")
    assert [p for _, p, _ in q.seen] == [2, 2, 1, 1, 0]


class QueueAt:
    def __init__(self, positions):
        self.positions = list(positions)

    def next(self):
        return self.positions.pop(0), 3
