"""follow_ray_job rides out an unreachable Ray dashboard: refused connections and hung ones
(a loopback dashboard the test controls, components/follow_ray_job/tests/dashboard.py), a
line a minute while it lasts, and a clear failure once outage_tolerance_seconds is spent.
No Ray, no sandbox: the follow code is the real one, over real HTTP."""

from __future__ import annotations

import threading

import pytest

from kfp_ray import jobs, wait
from kfp_ray.errors import AccessDenied, Cancelled, InputError, KfpRayError, Unreachable
from tests.helpers import eventually

FAST = dict(max_poll=0.2, request_timeout=(0.5, 0.5))


class Run:
    """A Follower in a thread; its outcome once done."""

    def __init__(self, follower: jobs.Follower):
        self.follower, self.result, self.error = follower, None, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.result = self.follower.run()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            self.error = exc

    def join(self, timeout=120):  # a bound on a hang, not a measurement
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "follow did not end"
        return self


@pytest.mark.parametrize("fault", ["refuse", "hang"])
def test_follow_survives_an_unreachable_dashboard_and_goes_on(dashboard, fault, capsys):
    dashboard.job("j1", "RUNNING", "epoch 1\n")
    beats = []
    run = Run(jobs.Follower(dashboard.url, "j1", timeout=120, outage_tolerance=60, heartbeat=lambda: beats.append(1), **FAST))
    eventually(lambda: run.follower.logs, 10, what="the first log line")
    getattr(dashboard, fault)()
    # The outage lasts a few failed tries (each a refused connect or a 0.5 s read timeout).
    eventually(lambda: run.follower.outage.tries >= 2, 30, what="two failed tries")
    beats_in_outage = len(beats)
    dashboard.job("j1", "SUCCEEDED", "epoch 1\nepoch 2\nKFP_RAY_METRICS {\"acc\": 0.9}\n")
    dashboard.serve()
    run.join()
    assert run.error is None, run.error
    assert run.result.status == "SUCCEEDED" and run.result.metrics == {"acc": 0.9}
    out = capsys.readouterr().out
    assert f"the Ray dashboard {dashboard.url} unreachable since" in out
    assert "will keep trying until" in out and "outage_tolerance_seconds=60" in out
    assert "reachable again after" in out and "epoch 2" in out
    assert beats_in_outage >= 2  # the heartbeat goes on during the outage


def test_follow_fails_clearly_once_the_outage_outlasts_the_window(dashboard):
    dashboard.job("j2", "RUNNING")
    run = Run(jobs.Follower(dashboard.url, "j2", timeout=120, outage_tolerance=2, **FAST))
    eventually(lambda: dashboard.seen("GET", "/j2"), 10, what="the first poll")
    dashboard.refuse()
    run.join()
    # Unreachable, not the job's 120 s timeout (JobTimeout): the 2 s outage window ended it.
    assert isinstance(run.error, Unreachable), run.error
    msg = str(run.error)
    assert f"the Ray dashboard {dashboard.url} has been unreachable for" in msg
    assert "longer than the 2s tolerated (outage_tolerance_seconds)" in msg and "ConnectionError" in msg
    assert "may still be running" in msg and "raise outage_tolerance_seconds" in msg


def test_a_failing_heartbeat_is_logged_and_the_follow_goes_on(dashboard, capsys):
    dashboard.job("j3", "SUCCEEDED", "done\n")

    def heartbeat():
        raise RuntimeError("lease renewal refused")

    result = jobs.Follower(dashboard.url, "j3", timeout=60, heartbeat=heartbeat, **FAST).run()
    assert result.status == "SUCCEEDED"
    assert "heartbeat failed (RuntimeError: lease renewal refused); carrying on" in capsys.readouterr().out


def test_a_job_the_dashboard_no_longer_knows_is_lost_not_an_outage(dashboard):
    with pytest.raises(jobs.JobLost, match="is not known to the Ray dashboard .* \\(404\\)"):
        jobs.Follower(dashboard.url, "gone", timeout=60, **FAST).run()


def test_a_job_submitted_again_under_its_id_is_lost_not_followed_anew(dashboard):
    """A head crash in lifecycle rayjob: KubeRay recreates the head and its submitter submits the
    job again under the same id; the dashboard never says 404, the job's start_time changes."""
    dashboard.job("again", "RUNNING", "tick 1\ntick 2\n")
    run = Run(jobs.Follower(dashboard.url, "again", timeout=60, **FAST))
    # the start_time seen and the log read (it streams in after the status)
    eventually(lambda: run.follower.started_at and "tick 2" in run.follower.logs, 60,
               what="the job's start_time and its log's 'tick 2'")
    dashboard.submitted_again("again", "tick 1\n")
    run.join()
    assert isinstance(run.error, jobs.JobLost) and "was started again" in str(run.error), run.error
    assert "tick 2" in str(run.error)  # the lost run's last lines


def test_the_outage_log_says_what_since_when_and_until_when_once_a_minute(capsys):
    now = {"t": 1000.0}
    outage = wait.Outage("the Ray dashboard http://x", 300, clock=lambda: now["t"], wall=lambda: 1_700_000_000 + now["t"])
    timeline = [(0, True), (20, False), (59, False), (60, True), (100, False), (120, True), (179, False), (180, True),
                (200, False)]
    for at, logs in timeline:
        now["t"] = 1000.0 + at
        outage.failed(ConnectionError("refused"))
        line = capsys.readouterr().out
        assert bool(line) == logs, (at, line)
        if logs:
            assert "the Ray dashboard http://x unreachable since 22:30:00 UTC" in line and f"({at}s)" in line
            assert "will keep trying until 22:35:00 UTC" in line and f"({300 - at}s more" in line
    now["t"] = 1300.0
    with pytest.raises(Unreachable, match="unreachable for 300s \\(since 22:30:00 UTC, 10 tries\\)"):
        outage.failed(TimeoutError("read timed out"))
    outage.ok()
    assert "reachable again after 300s" in capsys.readouterr().out
    assert not outage.ongoing


def test_cancelled_is_not_an_exception_so_nothing_swallows_it():
    assert not issubclass(Cancelled, Exception) and not issubclass(Cancelled, KfpRayError)
    calls = []

    def cancelled():
        calls.append(1)
        raise Cancelled()

    with pytest.raises(Cancelled):
        wait.retry(cancelled, "x", sleep=lambda s: None)
    with pytest.raises(Cancelled):
        wait.beat(cancelled)
    assert calls == [1, 1]


# --- a failure to read is not the job's end (issue 25 item 6) -------------------------------
@pytest.mark.parametrize("status,body,ctype,error,says", [
    (401, "Unauthorized", "text/plain", AccessDenied, "answered 401 to the status of job j4: something in front"),
    (403, "Forbidden", "text/plain", AccessDenied, "answered 403 to the status of job j4: something in front"),
    (200, "<html>Log in with OpenShift</html>", "text/html", KfpRayError, "with something that is not the Ray Job API's"),
    (200, '{"detail": "ok"}', "application/json", KfpRayError, "with something that is not the Ray Job API's"),
])
def test_an_answer_follow_cannot_read_fails_at_once_with_its_cause(dashboard, status, body, ctype, error, says):
    """A proxy's 401/403 or a page that is not the Job API's: no outage to ride out, and not the
    job's end either: follow raises the cause (tasks.follow then leaves the cluster: test_delete.py)."""
    dashboard.answer = (status, ctype, body)
    with pytest.raises(error) as got:
        jobs.Follower(dashboard.url, "j4", timeout=60, outage_tolerance=60, **FAST).run()
    assert not isinstance(got.value, (jobs.JobFailed, jobs.JobTimeout, Unreachable))
    assert says in str(got.value) and "Fix: wire provision_ray_cluster's dashboard_url output" in str(got.value)
    assert len(dashboard.seen("GET", "/j4")) == 1  # at once: no outage window spent on it


@pytest.mark.parametrize("url,says", [
    ("", "dashboard_url: is empty"),
    ("raycluster-head-svc:8265", "is not an http(s) URL with a host"),
    ("ftp://head:8265", "is not an http(s) URL with a host"),
    ("http://head:port", "is not a valid URL"),
    ("http://user:s3cret@head:8265", "has credentials in it"),
    ("http://head:8265/?x=1", "has a query"),
])
def test_a_bad_dashboard_url_is_refused_before_anything_happens(url, says, tmp_path):
    from kfp_ray import tasks
    from kfp_ray.errors import InputErrors

    for call in (lambda: jobs.Follower(url, "j", timeout=60),
                 lambda: tasks.follow(url, "j", str(tmp_path / "log"), cluster_name="c", namespace="ns"),
                 lambda: jobs.submit(url, "python x.py", "run-1", "submit"),
                 lambda: tasks.drive(url, "c", "ns", "driver.py")):
        with pytest.raises((InputError, InputErrors)) as got:
            call()
        assert says in str(got.value) and "wire provision_ray_cluster's dashboard_url output" in str(got.value)
        assert "s3cret" not in str(got.value)
    assert not (tmp_path / "log").exists()
