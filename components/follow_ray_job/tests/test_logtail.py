"""follow_ray_job reads only what is new of a job's log (issue 25 item 7): it streams Ray's
/api/jobs/{id}/logs/tail websocket (the loopback dashboard plays Ray 2.52.1's, dashboard.py),
never downloads the whole log, writes the log to its file as it comes, and keeps only its tail
in memory. A dropped stream is reconnected, skipping what was read (Ray resends from the first
byte): no line duplicated or lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from kfp_ray import jobs
from kfp_ray.logtail import PUMP_BYTES
from tests.helpers import eventually

FAST = dict(max_poll=0.2, request_timeout=(0.5, 2.0))


_CHILD = """
import json, sys
from kfp_ray import jobs
url, path = sys.argv[1], sys.argv[2]
f = jobs.Follower(url, "big", timeout=900, max_poll=0.2, echo=lambda text: None, log_path=path)
reads, read = [], f.tail.read
def counted(*a, **k):
    chunks, more = read(*a, **k)
    reads.append(sum(map(len, chunks)))
    return chunks, more
f.tail.read = counted
r = f.run()
# VmHWM: this process's own peak RSS (exec starts a new address space; ru_maxrss from wait4 would
# keep the parent's RSS at fork time, so a large pytest process would count as follow's memory)
peak_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("RESULT", json.dumps({"status": r.status, "metrics": r.metrics, "max_read": max(reads), "held": len(f.logs),
                            "peak_kb": peak_kb}))
"""


def test_a_job_printing_200_MB_is_followed_to_its_end_with_bounded_memory(dashboard, tmp_path):
    """Follow runs in a child process, so that its peak RSS (VmHWM) is its own; the log is made
    as it is read, so the test holds none of it either."""
    line = "x" * 2000 + "\n"
    block = ("KFP_RAY_METRICS {\"step\": 1}\n" + line * 9).encode()
    repeat = (200 << 20) // len(block) + 1
    dashboard.job_stream("big", block, repeat)
    log_path = tmp_path / "job.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, dashboard.url, str(log_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    out = proc.stdout.read()  # small: the echo goes nowhere, progress lines only
    proc.wait()
    assert proc.returncode == 0, out
    got = json.loads(out.split("RESULT ", 1)[1])
    assert got["status"] == "SUCCEEDED" and got["metrics"] == {"step": 1.0}
    assert log_path.stat().st_size == len(block) * repeat >= 200 << 20
    log_path.unlink()
    assert "unreachable" not in out and "dropped" not in out, out  # no outage, no reconnect
    assert dashboard.seen("GET", "/big/logs") == []  # never the whole log
    assert len(dashboard.seen("GET", "/big/logs/tail")) == 1
    assert got["max_read"] <= PUMP_BYTES + len(block)  # bytes read per poll (one message over) do not grow
    assert got["held"] <= jobs.TAIL_CHARS
    peak_mb = got["peak_kb"] / 1024
    print(f"follow's peak RSS: {peak_mb:.0f} MB")
    assert peak_mb < 120, f"follow's peak RSS {peak_mb:.0f} MB for a 200 MB log"


def test_a_dropped_log_stream_is_reconnected_without_duplicated_or_lost_lines(dashboard, tmp_path, capsys):
    lines = [f"line {i}\n" for i in range(1, 61)]
    dashboard.job("j", "RUNNING", "".join(lines[:20]))
    follower = jobs.Follower(dashboard.url, "j", timeout=60, log_path=str(tmp_path / "job.log"), **FAST)
    outcome = {}
    t = threading.Thread(target=lambda: outcome.update(result=follower.run()), daemon=True)
    t.start()
    eventually(lambda: follower.log_chars == len("".join(lines[:20])), 20, what="the first 20 lines")
    dashboard.cut_streams()
    dashboard.job("j", "RUNNING", "".join(lines[:40]))
    eventually(lambda: follower.tail.connects >= 2 and follower.log_chars == len("".join(lines[:40])), 20,
               what="the stream reconnected and 20 more lines")
    dashboard.hang()  # a stalled stream and status polls that time out: an outage, ridden out
    eventually(lambda: follower.outage.tries >= 1, 20, what="a failed poll")
    dashboard.job("j", "SUCCEEDED", "".join(lines))
    dashboard.serve()
    t.join(30)
    assert not t.is_alive(), "follow did not end within 30 s"
    assert outcome["result"].status == "SUCCEEDED"
    assert (tmp_path / "job.log").read_text() == "".join(lines)  # each line once, in order
    # streamed while it ran; its end read whole (a small log: Ray closes the stream seconds later)
    assert len(dashboard.seen("GET", "/j/logs")) == 1
    out = capsys.readouterr().out
    assert "the log stream of job j dropped" in out and "already read are skipped" in out
    assert out.count("line 21\n") == 1 and out.count("line 60\n") == 1


def test_a_line_is_passed_on_whole_and_redacted_across_messages(dashboard, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-key")
    echoed = []
    dashboard.job("p", "RUNNING", "start\nkey=very-sec")
    follower = jobs.Follower(dashboard.url, "p", timeout=60, echo=echoed.append, log_path=str(tmp_path / "job.log"),
                             **FAST)
    t = threading.Thread(target=follower.run, daemon=True)
    t.start()
    eventually(lambda: echoed, 20, what="the first line")
    dashboard.job("p", "SUCCEEDED", "start\nkey=very-secret-key\nKFP_RAY_METRICS {\"acc\": 0.5}\nno newline")
    t.join(30)
    assert not t.is_alive(), "follow did not end within 30 s"
    text = (tmp_path / "job.log").read_text()
    assert text == "start\nkey=[REDACTED]\nKFP_RAY_METRICS {\"acc\": 0.5}\nno newline"
    assert "very-secret-key" not in "\n".join(echoed) and follower.metrics == {"acc": 0.5}


_PIPED_CHILD = """
import sys
from kfp_ray import jobs
jobs.Follower(sys.argv[1], "piped", timeout=120, max_poll=0.2).run()
"""


def test_a_jobs_line_reaches_a_piped_task_log_while_the_job_runs(dashboard):
    """A task's stdout is a pipe (the launcher reads it): follow flushes each line of the job's
    log as it comes, or a job that printed a line and works on would show nothing for hours."""
    dashboard.job("piped", "RUNNING", "")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as in a task pod
    proc = subprocess.Popen([sys.executable, "-c", _PIPED_CHILD, dashboard.url], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        # the status line comes first (flushed); the job's line after it, with nothing behind it
        eventually(lambda: any("piped: RUNNING" in line for line in seen), 60, 0.1, what="follow's status line")
        dashboard.job("piped", "RUNNING", "FIRST-LINE of a long job\n")
        eventually(lambda: any("FIRST-LINE" in line for line in seen), 60, 0.1,
                   what="the job's first line in follow's piped stdout while the job is RUNNING")
        assert proc.poll() is None  # still following: the line came while the job runs
    finally:
        dashboard.job("piped", "SUCCEEDED", "FIRST-LINE of a long job\n")
        proc.wait(timeout=120)


def test_past_whole_log_bytes_the_end_of_the_log_is_streamed_not_read_whole(dashboard, tmp_path, monkeypatch):
    """A long log is not read again whole at the end: the stream is read until Ray closes it."""
    monkeypatch.setattr(jobs, "WHOLE_LOG", 10)
    dashboard.job("w", "RUNNING", "first line, longer than ten bytes\n")
    follower = jobs.Follower(dashboard.url, "w", timeout=60, log_path=str(tmp_path / "job.log"), **FAST)
    t = threading.Thread(target=follower.run, daemon=True)
    t.start()
    eventually(lambda: follower.log_chars, 20, what="the first line")
    dashboard.job("w", "SUCCEEDED", "first line, longer than ten bytes\nlast line\n")
    t.join(30)
    assert not t.is_alive(), "follow did not end within 30 s"
    assert (tmp_path / "job.log").read_text() == "first line, longer than ten bytes\nlast line\n"
    assert dashboard.seen("GET", "/w/logs") == []
