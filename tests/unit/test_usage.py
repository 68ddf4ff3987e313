"""The usage ledger's arithmetic (runtime/kfp_ray/usage.py) and `kfp-ray runs usage`'s sums."""

from __future__ import annotations

import pytest

from kfp_ray import usage

RECORD = {"name": "raycluster-demo-1a2b3", "admission": {"clusterQueue": "cq", "podSetAssignments": [
    {"name": "head", "count": 1, "resourceUsage": {"cpu": "2", "memory": "4Gi"}},
    {"name": "workers", "count": 2, "resourceUsage": {"cpu": "2500m", "memory": "8Gi", "nvidia.com/gpu": "2"}}]},
    "conditions": [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-11-28T10:00:00Z"},
                   {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-11-28T10:00:01Z"}]}


def test_admitted_sums_kueues_resource_usage_over_the_pod_sets():
    got = usage.admitted(RECORD)
    assert got["resources"] == {"cpu": 4.5, "memory": 12 * 2**30, "nvidia.com/gpu": 2.0}
    assert got["admitted_at"] == "2026-11-28T10:00:01Z" and got["source"] == "Kueue Workload raycluster-demo-1a2b3"
    assert usage.admitted({}) == usage.admitted(None) == {} == usage.admitted({"name": "x", "admission": None})


def test_the_quota_is_held_from_kueues_admission_to_the_release_less_the_time_requeued():
    entry = usage.ledger(RECORD, queued=12, starting=9, running=3500, teardown=2,
                         released_at="2026-11-28T11:00:01.000+00:00", requeued=600, preempted=700, run_id="r1")
    assert entry["seconds"]["held"] == 3600 - 600 and entry["held_from"] == "Kueue's admission to the quota's release"
    assert entry["cpu_hours"] == pytest.approx(4.5 * 3000 / 3600)
    assert entry["gpu_hours"] == pytest.approx(2 * 3000 / 3600)
    assert entry["memory_gib_hours"] == pytest.approx(12 * 3000 / 3600)
    assert entry["seconds"]["lost_to_preemption"] == 700 and entry["seconds"]["queued"] == 12
    assert usage.ledger_metrics(entry)["quota_held_seconds"] == 3000


def test_without_a_release_time_the_phases_stand_in_and_without_a_record_no_hours_are_counted():
    entry = usage.ledger(RECORD, queued=1, starting=10, running=100, teardown=5)
    assert entry["seconds"]["held"] == 115 and entry["held_from"] == "the phases' lengths"
    unread = usage.ledger({}, queued=1, starting=10, running=100, teardown=5, released_at="2026-11-28T11:00:00+00:00")
    assert unread["cpu_hours"] == unread["gpu_hours"] == 0 and "not readable" in unread["admitted_source"]
    assert "not readable" in usage.report_rows(unread)["admitted"]


def test_requeued_seconds_are_the_preemptions_intervals():
    times = [["2026-11-28T10:00:00.000+00:00", "2026-11-28T10:01:30.500+00:00"], ["2026-11-28T10:05:00+00:00", ""]]
    assert usage.requeued_seconds(times) == 90.5  # the second is not over: not counted
    assert usage.requeued_seconds([]) == 0


def test_reports_and_the_ledgers_key():
    entry = usage.ledger(RECORD, queued=0, starting=0, running=0, teardown=0, released_at="2026-11-28T10:30:01Z",
                         run_id="run-1", finished_at="2026-11-28T10:31:00+00:00")
    assert usage.ledger_key(entry) == "kfp-ray/usage/2026-11/run-1.json"
    rows = usage.report_rows(entry)
    assert rows["admitted"].startswith("4.5 CPU, 12 GiB, 2 GPU (Kueue Workload") and rows["GPU-hours"] == "1.0000"
    md = usage.markdown(entry, "s3://b/runs/run-1/usage.json")
    assert "## Usage" in md and "| CPU-hours | 2.2500 |" in md and "`s3://b/runs/run-1/usage.json`" in md


def test_summarize_per_pipeline_largest_first():
    def e(pipeline, cpu_h, queued):
        return {"pipeline": pipeline, "cpu_hours": cpu_h, "gpu_hours": 0.0, "memory_gib_hours": 1.0,
                "seconds": {"queued": queued, "lost_to_preemption": 0.0}}
    rows = usage.summarize([e("a", 1.0, 5), e("b", 3.0, 1), e("a", 1.5, 2), e("", 0.1, 0)])
    assert [(r["pipeline"], r["runs"], r["cpu_hours"], r["queued_seconds"]) for r in rows] == [
        ("b", 1, 3.0, 1), ("a", 2, 2.5, 7), ("(unknown)", 1, 0.1, 0)]


def test_since_must_be_a_day():
    from datetime import date

    from kfp_ray.pipelines import usage_cli

    assert usage_cli.since_day(None, today=date(2026, 11, 28)) == date(2026, 11, 1)
    with pytest.raises(SystemExit, match="--since '28/11': not a day. Fix: give YYYY-MM-DD"):
        usage_cli.since_day("28/11")
    assert usage_cli.months(date(2026, 11, 3), date(2027, 2, 1)) == ["2026-11", "2026-12", "2027-01", "2027-02"]


def test_where_the_workload_is_not_readable_the_rayclusters_pod_sets_are_summed_as_kueue_does():
    from kfp_ray.readiness import admission

    def group(replicas, *requests):
        g = {"template": {"spec": {"containers": [{"name": f"c{i}", "resources": {"requests": r}}
                                                  for i, r in enumerate(requests)]}}}
        return g if replicas is None else {**g, "replicas": replicas}

    rc = {"spec": {"headGroupSpec": group(None, {"cpu": "2", "memory": "4Gi"}, {"cpu": "100m", "memory": "128Mi"}),
                   "workerGroupSpecs": [group(3, {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}), group(0, {"cpu": "8"})]}}
    record = admission(None, rc)
    got = usage.admitted(record)
    assert got["resources"] == {"cpu": 5.1, "memory": (10 * 2**30) + 128 * 2**20, "nvidia.com/gpu": 3.0}
    assert got["source"].startswith("the RayCluster's pod requests") and got["admitted_at"] == ""
    assert admission({"metadata": {"name": "wl"}, "status": {"admission": {}}}, rc)["name"] == "wl"  # Kueue's, when read
