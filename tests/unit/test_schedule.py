"""Recurring-run schedules as KFP's ScheduledWorkflow reads them: robfig cron (6 fields,
seconds first), @every, periodic intervals, start/end times, catch-up and no_catchup,
max_concurrency; the Scheduler driven by explicit times (no sleeping)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from kfp_ray_sandbox.pipelines_api.schedule import Cron, CronError, Schedule, Scheduler, validate

T0 = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)


def test_six_field_cron_seconds_first():
    c = Cron("*/20 * * * * *")
    assert c.next(T0) == T0 + timedelta(seconds=20)
    assert Cron("0 30 2 * * *").next(T0) == datetime(2026, 11, 24, 2, 30, tzinfo=UTC)
    assert Cron("0 0 9 * * mon-fri").next(datetime(2026, 11, 28, 12, tzinfo=UTC)) == datetime(2026, 11, 30, 9, tzinfo=UTC)
    assert Cron("0 0 0 1 jan ?").next(T0) == datetime(2027, 1, 1, tzinfo=UTC)
    assert Cron("@hourly").next(T0) == T0 + timedelta(hours=1)
    assert Cron("@every 90s").next(T0) == T0 + timedelta(seconds=90)


def test_a_five_field_cron_is_explained():
    with pytest.raises(CronError, match=r"5 fields; KFP recurring runs take 6, seconds first: '0 \*/5 \* \* \* \*'"):
        Cron("*/5 * * * *")
    with pytest.raises(CronError, match="outside 0-59"):
        Cron("61 * * * * *")
    with pytest.raises(CronError, match="duration"):
        Cron("@every soon")


def test_create_checks_as_the_server_does():
    with pytest.raises(ValueError, match="between 1 and 10"):
        validate({"display_name": "x", "max_concurrency": 11, "trigger": {"periodic_schedule": {"interval_second": 5}}})
    with pytest.raises(ValueError, match="exactly one trigger"):
        validate({"display_name": "x", "trigger": {}})
    with pytest.raises(ValueError, match="name is empty"):
        validate({"trigger": {"periodic_schedule": {"interval_second": 5}}})


def test_periodic_from_start_and_nothing_after_the_end():
    s = Schedule({"periodic_schedule": {"interval_second": "60", "start_time": "2026-11-23T10:00:00Z",
                                        "end_time": "2026-11-23T10:02:30Z"}}, T0 + timedelta(hours=1))
    assert s.after(s.origin) == T0 + timedelta(seconds=60)
    assert s.after(T0 + timedelta(seconds=60)) == T0 + timedelta(seconds=120)
    assert s.after(T0 + timedelta(seconds=120)) is None


class Store:
    def __init__(self):
        self.lock = threading.RLock()
        self.runs, self.recurring_runs = {}, {}

    def add(self, no_catchup: bool, concurrency: int = 1) -> dict:
        schedule = Schedule({"periodic_schedule": {"interval_second": 10}}, T0)
        rr = {"recurring_run_id": "rr", "status": "ENABLED", "max_concurrency": str(concurrency), "no_catchup": no_catchup,
              "_schedule": schedule, "_next": schedule.after(schedule.origin)}
        self.recurring_runs["rr"] = rr
        return rr


def test_catch_up_fires_every_missed_time_one_at_a_time_within_max_concurrency():
    store, fired = Store(), []

    def fire(rr, at):
        fired.append(at)
        store.runs[str(at)] = {"recurring_run_id": "rr", "state": "RUNNING"}

    store.add(no_catchup=False)
    sched = Scheduler(store, fire)
    sched.tick(T0 + timedelta(seconds=35))  # 10, 20, 30 were due
    assert fired == [T0 + timedelta(seconds=10)]
    sched.tick(T0 + timedelta(seconds=35))
    assert len(fired) == 1  # its run is active: max_concurrency 1 holds the rest
    for r in store.runs.values():
        r["state"] = "SUCCEEDED"
    sched.tick(T0 + timedelta(seconds=35))
    assert fired[-1] == T0 + timedelta(seconds=20)


def test_no_catchup_fires_only_the_latest_missed_time():
    store, fired = Store(), []
    store.add(no_catchup=True)
    Scheduler(store, lambda rr, at: fired.append(at)).tick(T0 + timedelta(seconds=35))
    assert fired == [T0 + timedelta(seconds=30)]
    assert store.recurring_runs["rr"]["_next"] == T0 + timedelta(seconds=40)
