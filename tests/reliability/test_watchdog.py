"""The sandbox's watchdog (sandbox/reaper.py) on its own, with stand-in processes (no Ray): it
reaps exactly what its owner recorded when the owner dies, however it dies, and only then."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kfp_ray_sandbox.reaper import pid_alive, wait_gone
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = "import sys, time; time.sleep(600)"
EXIT_TIMEOUT_S = 60.0  # a bound on a hang: the watchdog exits once it has reaped (its completion signal)

# An owner: a watchdog, a dir to remove, a recorded "Ray node" (a process naming its temp dir,
# with a child that left its session and names nothing), a "job driver" naming the node only in
# its environment, and a tagged process tree. It prints
# what it made, then waits for the test's signal, or for "close" on stdin (a clean stop).
OWNER = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    from pathlib import Path
    from kfp_ray_sandbox.reaper import Watchdog

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # dies of it, like of SIGTERM: no cleanup of its own

    base = Path(sys.argv[1])
    wd = Watchdog().start()
    scratch = wd.mkdtemp("scratch-", dir=base)
    pods = base / "pods"
    pods.mkdir()
    wd.watch_records(pods)
    temp = base / "kr-node"
    (pods / "node.kr-node.pid").write_text(json.dumps({"temp_dir": str(temp)}))
    temp.mkdir()
    sleeper = "import sys, time; time.sleep(600)"
    spawn_orphan = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', %r], start_new_session=True); "
                    "time.sleep(600)" % sleeper)
    node = subprocess.Popen([sys.executable, "-c", spawn_orphan, str(temp)], start_new_session=True)
    (pods / "node.kr-node.pid").write_text(json.dumps({"temp_dir": str(temp), "pgid": node.pid}))
    # a Ray job's driver: its own session, its parent gone, only its environment names the node
    driver = subprocess.Popen([sys.executable, "-c", sleeper], env={**os.environ, "KFP_RAY_SANDBOX_NODE": str(temp)},
                              start_new_session=True)
    tagged = subprocess.Popen([sys.executable, "-c", spawn_orphan], env={**os.environ, **wd.env()},
                              start_new_session=True)
    print(json.dumps({"watchdog": wd.proc.pid, "node": node.pid, "tagged": tagged.pid, "driver": driver.pid,
                      "scratch": str(scratch),
                      "temp": str(temp), "tag": wd.tag}), flush=True)
    if sys.stdin.readline().strip() == "close":
        from kfp_ray_sandbox.reaper import descendants, signal_pid
        for p in (node, tagged, driver):
            for pid in descendants(p.pid):
                signal_pid(pid, 9)
            p.kill()
            p.wait()
        (pods / "node.kr-node.pid").unlink()
        wd.close()
        print("closed", flush=True)
    time.sleep(600)
""")


def tree_of(pid: int) -> list[int]:
    from kfp_ray_sandbox.reaper import descendants

    return [pid, *descendants(pid)]


def start_owner(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
    made = json.loads(owner.stdout.readline())
    # the stand-ins' children exist before the owner dies (else there is nothing to test)
    made["pids"] = eventually(lambda: len(tree_of(made["node"])) == 2 and len(tree_of(made["tagged"])) == 2
                              and tree_of(made["node"]) + tree_of(made["tagged"]) + [made["driver"]], 30,
                              what="the stand-in trees")
    return owner, made


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_owner_death_reaps_what_was_recorded_and_nothing_else(tmp_path, sig):
    bystander = subprocess.Popen([sys.executable, "-c", SLEEPER, str(tmp_path / "kr-node-other")], start_new_session=True)
    try:
        owner, made = start_owner(tmp_path)
        os.killpg(owner.pid, sig)  # the owner's whole group, as a terminal's Ctrl-C would
        t = time.monotonic()
        assert wait_gone(made["pids"] + [made["watchdog"]], EXIT_TIMEOUT_S), [p for p in made["pids"] if pid_alive(p)]
        print(f"reaped in {time.monotonic() - t:.2f}s")
        assert not Path(made["scratch"]).exists() and not Path(made["temp"]).exists()
        assert list((tmp_path / "pods").iterdir()) == []
        assert pid_alive(bystander.pid)  # names kr-node-other: not the recorded kr-node
        owner.wait(timeout=EXIT_TIMEOUT_S)
    finally:
        bystander.kill()
        bystander.wait()


def test_clean_close_leaves_paths_and_the_watchdog_exits(tmp_path):
    owner, made = start_owner(tmp_path)
    try:
        owner.stdin.write("close\n")
        owner.stdin.flush()
        assert owner.stdout.readline().strip() == "closed"
        assert not pid_alive(made["watchdog"])  # close() waited for it
        assert not [p for p in made["pids"] if pid_alive(p)]
        assert Path(made["scratch"]).exists()   # the owner's to remove, not the watchdog's
    finally:
        owner.kill()
        owner.wait()
    assert Path(made["scratch"]).exists()  # and nothing is left to act on the owner's death


def test_watchdog_ignores_terminal_signals(tmp_path):
    owner, made = start_owner(tmp_path)
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(made["watchdog"], sig)
        time.sleep(0)  # signals are delivered before kill() returns for a single-threaded target
        assert pid_alive(made["watchdog"])
        assert all(pid_alive(p) for p in made["pids"])
    finally:
        owner.kill()
        owner.wait()
    assert wait_gone(made["pids"] + [made["watchdog"]], EXIT_TIMEOUT_S)
