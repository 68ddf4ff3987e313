"""Following a run (pipelines/follow.py): state changes said once, a pod's log printed as
whole lines while the task runs and to its end once it has ended, transient read failures
ridden out, and every terminal state (CANCELED too) ending the follow."""

from __future__ import annotations

import io
from types import SimpleNamespace as NS

import pytest

from kfp_ray.pipelines import follow


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(follow, "POLL_S", (0.0, 0.0))


def task(name, state, pod="", error=None):
    return NS(task_id=name, display_name=name, state=state, pod_name=pod, error=error)


def run(state, *tasks, error=None):
    return NS(run_id="r1", state=state, error=error, run_details=NS(task_details=list(tasks)))


class Server:
    """A run's successive answers, and its pods' logs growing with them."""

    def __init__(self, answers, logs):
        self.answers, self.logs, self.reads = list(answers), logs, 0

    def get_run(self, run_id):
        answer = self.answers[min(self.reads, len(self.answers) - 1)]
        self.reads += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    def read_log(self, pod):
        seq = self.logs.get(pod) or [None]
        return seq[min(self.reads - 1, len(seq) - 1)]


def test_states_once_and_whole_lines_until_the_task_ends():
    server = Server(
        [run("RUNNING", task("train", "RUNNING", "p1"), task("root", "RUNNING")),
         run("RUNNING", task("train", "RUNNING", "p1")),
         run("SUCCEEDED", task("train", "SUCCEEDED", "p1"))],
        {"p1": ["queued: wait", "queued: waiting\nadmitted\npart", "queued: waiting\nadmitted\npartial end"]})
    out = io.StringIO()
    done = follow.Follower(server.get_run, out, server.read_log).follow("r1", 60)
    assert done.state == "SUCCEEDED"
    assert out.getvalue().splitlines() == [
        "==> train: RUNNING", "train | queued: waiting", "train | admitted", "train | partial end",
        "==> train: SUCCEEDED"]  # a line still being written waits; the root DAG (no pod) is not said


def test_a_cancelled_run_ends_the_follow_and_a_gone_pod_is_not_an_error():
    error = NS(message="the task's pod was stopped: the run was terminated")
    server = Server([run("CANCELING", task("follow", "RUNNING", "p2")),
                     run("CANCELED", task("follow", "CANCELED", "p2", error))], {"p2": ["tick\n", None]})
    out = io.StringIO()
    assert follow.Follower(server.get_run, out, server.read_log).follow("r1", 60).state == "CANCELED"
    assert "==> follow: CANCELED: the task's pod was stopped: the run was terminated" in out.getvalue()


def test_transient_failures_are_ridden_out_and_a_missing_run_is_not():
    boom = ConnectionResetError("reset by peer")
    server = Server([boom, boom, run("SUCCEEDED", task("t", "SKIPPED"))], {})
    out = io.StringIO()
    assert follow.Follower(server.get_run, out).follow("r1", 60).state == "SUCCEEDED"
    assert out.getvalue() == "==> t: SKIPPED\n"  # a cache hit has no pod, and is said
    gone = Exception("Not Found")
    gone.status = 404
    with pytest.raises(Exception, match="Not Found"):
        follow.Follower(Server([gone], {}).get_run, io.StringIO()).follow("r1", 60)
    with pytest.raises(ConnectionResetError):
        follow.Follower(Server([boom], {}).get_run, io.StringIO()).follow("r1", 60)  # MAX_FAILED_READS in a row


def test_a_run_that_does_not_end_in_time_names_its_state():
    server = Server([run("RUNNING")], {})
    with pytest.raises(TimeoutError, match="run r1 was still RUNNING after 0s"):
        follow.Follower(server.get_run, io.StringIO()).follow("r1", 0)
