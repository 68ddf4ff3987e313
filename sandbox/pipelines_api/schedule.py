"""Recurring runs as KFP's ScheduledWorkflow controller (kubeflow/pipelines 2.17,
backend/src/crd/controller/scheduledworkflow) fires them.

- Cron: robfig/cron's 6 fields, seconds first ("0 */5 * * * *"), with `?` for any, ranges,
  lists and steps; or a descriptor "@every 30s". A 5-field cron is refused with the fix.
- Periodic: every interval_second seconds from the start time (or from creation).
- The first firing is the first scheduled time after max(start time, creation); nothing fires
  after the end time. Catch-up (no_catchup false, the default): every missed time fires, one
  at a time, the oldest first; with no_catchup only the latest missed time fires.
- max_concurrency (1..10): no firing while that many of its runs are active; the time is kept
  and fires once a run ends (the controller re-checks on its next sync).
- Disabled: nothing fires; enabling again starts from now (missed times are not caught up).
"""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta

FIELDS = (("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
          ("day of week", 0, 6))
MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
DESCRIPTORS = {"@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *",
               "@weekly": "0 0 0 * * 0", "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *", "@hourly": "0 0 * * * *"}
ACTIVE = ("PENDING", "RUNNING", "CANCELING", "PAUSED")


class CronError(ValueError):
    pass


def _field(text: str, name: str, lo: int, hi: int) -> set[int]:
    names = MONTHS if name == "month" else DAYS if name == "day of week" else {}
    out: set[int] = set()
    for part in text.lower().split(","):
        m = re.fullmatch(r"(\*|\?|[a-z0-9]+)(?:-([a-z0-9]+))?(?:/(\d+))?", part)
        if not m:
            raise CronError(f"cron {name} field {text!r} is not a number, range, list or step")

        def value(v: str) -> int:
            n = names[v] if v in names else int(v) if v.isdigit() else None
            if n is None or not lo <= n <= hi:
                raise CronError(f"cron {name} field {text!r}: {v!r} is outside {lo}-{hi}")
            return n

        start, end = (lo, hi) if m.group(1) in ("*", "?") else (value(m.group(1)), value(m.group(2)) if m.group(2) else None)
        step = int(m.group(3)) if m.group(3) else 1
        if end is None:
            end = hi if m.group(3) else start
        if step < 1 or start > end:
            raise CronError(f"cron {name} field {text!r} is an empty range")
        out.update(range(start, end + 1, step))
    return out


class Cron:
    def __init__(self, expression: str):
        expr = DESCRIPTORS.get(expression.strip(), expression.strip())
        self.every: float | None = None
        if expr.startswith("@every"):
            self.every = _duration(expr[len("@every"):].strip())
            return
        parts = expr.split()
        if len(parts) == 5:
            raise CronError(f"cron {expression!r} has 5 fields; KFP recurring runs take 6, seconds first: "
                            f"'0 {expression}' fires at second 0 of the times '{expression}' names")
        if len(parts) != 6:
            raise CronError(f"cron {expression!r} has {len(parts)} fields; KFP takes 6: "
                            "second minute hour day-of-month month day-of-week")
        self.sets = [_field(p, *f) for p, f in zip(parts, FIELDS, strict=True)]
        self.dom_any, self.dow_any = parts[3] in ("*", "?"), parts[5] in ("*", "?")

    def _day_ok(self, t: datetime) -> bool:
        dom, dow = t.day in self.sets[3], (t.isoweekday() % 7) in self.sets[5]
        if self.dom_any or self.dow_any:  # robfig: both restricted means either matches
            return dom and dow
        return dom or dow

    def next(self, after: datetime) -> datetime | None:
        """The first time strictly after `after` (UTC, whole seconds) that the cron names."""
        if self.every is not None:
            return after + timedelta(seconds=self.every)
        t = after.replace(microsecond=0) + timedelta(seconds=1)
        limit = after + timedelta(days=366 * 5)
        sec, minute, hour, _, month, _ = self.sets
        while t <= limit:
            if t.month not in month:
                t = (t.replace(day=1, hour=0, minute=0, second=0) + timedelta(days=32)).replace(day=1)
            elif not self._day_ok(t):
                t = t.replace(hour=0, minute=0, second=0) + timedelta(days=1)
            elif t.hour not in hour:
                t = t.replace(minute=0, second=0) + timedelta(hours=1)
            elif t.minute not in minute:
                t = t.replace(second=0) + timedelta(minutes=1)
            elif t.second not in sec:
                t += timedelta(seconds=1)
            else:
                return t
        return None


def _duration(text: str) -> float:
    """A Go duration ("90s", "1m30s", "2h")."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise CronError(f"@every {text!r} is not a duration such as 30s, 5m or 1h30m")
    seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)
    if seconds < 1:
        raise CronError(f"@every {text!r} is shorter than a second")
    return seconds


def parse_time(value) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)


class Schedule:
    """When one recurring run fires next."""

    def __init__(self, trigger: dict, created: datetime):
        cron, periodic = trigger.get("cron_schedule"), trigger.get("periodic_schedule")
        spec = cron or periodic or {}
        self.start, self.end = parse_time(spec.get("start_time")), parse_time(spec.get("end_time"))
        if cron:
            self.cron, self.interval = Cron(cron.get("cron") or ""), None
        else:
            self.cron, self.interval = None, float(periodic.get("interval_second") or 0)
        self.origin = self.start or created  # a start time in the past is caught up from

    def after(self, t: datetime) -> datetime | None:
        if self.cron is not None:
            nxt = self.cron.next(t)
        else:
            base = self.start or self.origin
            k = max(0, int((t - base).total_seconds() // self.interval) + 1)
            nxt = base + timedelta(seconds=k * self.interval)
        if nxt is not None and self.end is not None and nxt > self.end:
            return None
        return nxt


def validate(body: dict) -> Schedule:
    """The checks of KFP's CreateRecurringRun (ValueError with the real server's wording)."""
    if not body.get("display_name"):
        raise ValueError("Invalid input error: The recurring run name is empty. Please specify a valid name")
    concurrency = int(body.get("max_concurrency") or 1)
    if not 1 <= concurrency <= 10:
        raise ValueError(f"Invalid input error: max concurrency of a recurring run must be between 1 and 10, got {concurrency}")
    trigger = body.get("trigger") or {}
    if bool(trigger.get("cron_schedule")) == bool(trigger.get("periodic_schedule")):
        raise ValueError("Invalid input error: a recurring run needs exactly one trigger: cron_schedule or periodic_schedule")
    if trigger.get("periodic_schedule") and int(float(trigger["periodic_schedule"].get("interval_second") or 0)) < 1:
        raise ValueError("Invalid input error: periodic_schedule.interval_second must be at least 1")
    return Schedule(trigger, datetime.now(UTC))


class Scheduler:
    """The ScheduledWorkflow controller: one thread that fires every enabled recurring run's
    due times through `fire(recurring_run, scheduled_at)`."""

    def __init__(self, store, fire):
        self.store = store
        self.fire = fire
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="scheduled-workflows")

    def start(self) -> Scheduler:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        self.thread.join(timeout=10)

    def _active(self, rr: dict) -> int:
        return sum(1 for r in self.store.runs.values()
                   if r.get("recurring_run_id") == rr["recurring_run_id"] and r["state"] in ACTIVE)

    def tick(self, now: datetime) -> float:
        """Fire what is due at `now`; seconds until the next check."""
        wait = 1.0
        with self.store.lock:
            due = []
            for rr in list(self.store.recurring_runs.values()):
                if rr["status"] != "ENABLED":
                    continue
                schedule: Schedule = rr["_schedule"]
                nxt = rr.get("_next")
                if nxt is None:
                    continue
                if nxt > now:
                    wait = min(wait, (nxt - now).total_seconds())
                    continue
                if self._active(rr) >= int(rr.get("max_concurrency") or 1):
                    continue  # kept due; fires when a run ends
                if rr.get("no_catchup"):
                    while (later := schedule.after(nxt)) is not None and later <= now:
                        nxt = later  # only the latest missed time
                rr["_next"] = schedule.after(nxt)
                due.append((rr, nxt))
        for rr, at in due:
            self.fire(rr, at)
            wait = 0.0
        return max(wait, 0.05)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            wait = self.tick(datetime.now(UTC))
            self.wake.wait(wait)
            self.wake.clear()

