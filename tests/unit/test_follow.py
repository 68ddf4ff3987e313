"""Following a run (pipelines/follow.py): task states (from KFP 2.14's node-shaped task
details) said once, a pod's log printed as whole lines while the task runs and to its end once
it has ended (a retried attempt's too), transient read failures ridden out, and every terminal
state (CANCELED too) ending the follow."""

from __future__ import annotations

import io
from types import SimpleNamespace as NS

import pytest

from kfp_ray.pipelines import follow


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(follow, "POLL_S", (0.0, 0.0))


def task(name, state):
    """A pipeline task as KFP 2.14's API lists it: its DAG node and its driver's (run_tasks.states)."""
    return [NS(task_id=f"{name}-id", display_name=name, state=state),
            NS(task_id=f"{name}-driver-id", display_name=f"{name}-driver", state="SUCCEEDED")]


def run(state, *tasks, error=None):
    details = [d for t in tasks for d in t]
    details.append(NS(task_id="wf", display_name="small-x1b2c", state=state))  # the Workflow's own node
    return NS(run_id="r1", state=state, error=error, run_details=NS(task_details=details))


class Server:
    """A run's successive answers, and its pods' logs growing with them."""

    def __init__(self, answers, logs, pods=None):
        self.answers, self.logs, self.reads = list(answers), logs, 0
        self.pods = pods or {}

    def get_run(self, run_id):
        answer = self.answers[min(self.reads, len(self.answers) - 1)]
        self.reads += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    def read_log(self, pod):
        seq = self.logs.get(pod) or [None]
        return seq[min(self.reads - 1, len(seq) - 1)]

    def find_pods(self, run_id):
        return {t: p[min(self.reads - 1, len(p) - 1)] for t, p in self.pods.items()}

    def follower(self, out):
        return follow.Follower(self.get_run, out, self.read_log, self.find_pods)


def test_states_once_and_whole_lines_until_the_task_ends():
    server = Server(
        [run("RUNNING", task("train", "RUNNING"), task("root", "RUNNING")),
         run("RUNNING", task("train", "RUNNING")),
         run("SUCCEEDED", task("train", "SUCCEEDED"))],
        {"p1": ["queued: wait", "queued: waiting\nadmitted\npart", "queued: waiting\nadmitted\npartial end"]},
        {"train": [["p1"]]})
    out = io.StringIO()
    done = server.follower(out).follow("r1", 60)
    assert done.state == "SUCCEEDED"
    assert out.getvalue().splitlines() == [
        "==> train: RUNNING", "train | queued: waiting", "train | admitted", "train | partial end",
        "==> train: SUCCEEDED"]  # a line still being written waits; root, drivers and the Workflow are not tasks


def test_a_retried_tasks_first_pod_is_printed_to_its_end_then_the_next():
    server = Server(
        [run("RUNNING", task("follow", "RUNNING")), run("RUNNING", task("follow", "RUNNING")),
         run("SUCCEEDED", task("follow", "SUCCEEDED"))],
        {"a0": ["one\ntw", "one\ntwo (no newline)"], "a1": [None, "again\n", "again\ndone\n"]},
        {"follow": [["a0"], ["a0", "a1"]]})
    out = io.StringIO()
    server.follower(out).follow("r1", 60)
    assert out.getvalue().splitlines() == [
        "==> follow: RUNNING", "follow | one", "follow | two (no newline)", "follow | again", "follow | done",
        "==> follow: SUCCEEDED"]


def test_a_cancelled_run_ends_the_follow_and_a_gone_pod_is_not_an_error():
    server = Server([run("CANCELING", task("follow", "RUNNING")), run("CANCELED", task("follow", "FAILED"))],
                    {"p2": ["tick\n", None]}, {"follow": [["p2"]]})
    out = io.StringIO()
    assert server.follower(out).follow("r1", 60).state == "CANCELED"
    assert out.getvalue().splitlines() == ["==> follow: RUNNING", "follow | tick", "==> follow: FAILED"]


def test_an_omitted_task_is_said_as_such():
    server = Server([run("FAILED", task("make", "FAILED"), task("use", "RUNTIME_STATE_UNSPECIFIED"))], {})
    out = io.StringIO()
    follow.Follower(server.get_run, out).follow("r1", 60)
    assert out.getvalue().splitlines() == ["==> make: FAILED", "==> use: OMITTED"]


def test_transient_failures_are_ridden_out_and_a_missing_run_is_not():
    boom = ConnectionResetError("reset by peer")
    server = Server([boom, boom, run("SUCCEEDED", task("t", "SUCCEEDED"))], {})
    out = io.StringIO()
    assert follow.Follower(server.get_run, out).follow("r1", 60).state == "SUCCEEDED"
    assert out.getvalue() == "==> t: SUCCEEDED\n"
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
