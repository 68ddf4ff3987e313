"""The sandbox watchdog's reap (sandbox/reaper.py) on a busy machine: a clock that jumps while it
waits (the machine stalled it) does not make it give up while it still finds processes to kill;
its exit, after the reap, is what tells that everything is reaped (issue 25, item 15)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import types

from kfp_ray_sandbox import reaper
from tests.helpers import FakeClock

SLEEPER = "import time; time.sleep(600)"


def test_a_stalled_reap_goes_on_while_it_finds_processes(monkeypatch):
    tag = secrets.token_hex(8)
    env = {**os.environ, reaper.TAG_ENV: tag}
    procs = [subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)]
    clock = FakeClock(1000.0)

    def stalled_wait_gone(pids, timeout):
        for p in procs:  # our children: really wait for the killed ones
            if p.pid in pids:
                p.wait(timeout=60)
        clock.advance(9.0)  # meanwhile the machine stalled the watchdog for 9 s...
        if len(procs) == 1:  # ...and a child the first had forked just before the kill shows up
            procs.append(subprocess.Popen([sys.executable, "-c", SLEEPER], env=env))
        return True

    monkeypatch.setattr(reaper, "wait_gone", stalled_wait_gone)
    monkeypatch.setattr(reaper, "time", types.SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    try:
        result = reaper.reap(tag=tag, settle=False)
        assert len(procs) == 2 and result["killed"] == sorted(p.pid for p in procs), (result, procs)
        assert result["left"] == []
        assert all(p.wait(timeout=60) == -9 for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_reap_that_cannot_end_a_process_says_so(monkeypatch):
    """Only past REAP_TIMEOUT (a hang: a process SIGKILL does not end) does it stop, and its
    result names what is left (the watchdog logs it)."""
    tag = secrets.token_hex(8)
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], env={**os.environ, reaper.TAG_ENV: tag})
    clock = FakeClock(1000.0)
    monkeypatch.setattr(reaper, "signal_pid", lambda pid, sig: None)  # a process that survives SIGKILL
    monkeypatch.setattr(reaper, "wait_gone", lambda pids, timeout: clock.advance(timeout) or False)
    monkeypatch.setattr(reaper, "time", types.SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    try:
        result = reaper.reap(tag=tag, settle=False)
        assert result["left"] == [proc.pid] and clock() >= 1000.0 + reaper.REAP_TIMEOUT
    finally:
        proc.kill()
        proc.wait()
