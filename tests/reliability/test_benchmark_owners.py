"""The benchmarks that start processes without a sandbox (benchmarks/pip_path.py,
benchmarks/sandbox_pip.py) own them like every other owner (issue 25, item 15): each runs under
a watchdog of its own (benchmarks/harness.py `watched`), so SIGTERM (its orderly path) or
SIGKILL (the watchdog alone) leaves no process it started and no temp dir behind. Each is
started for real and caught mid-install: its pip asks a package index that this test serves and
that never answers, so the install hangs until the signal. Nothing here depends on timing: the
test waits (with generous bounds) for the index to be asked, then for the owner's and its
watchdog's exits (the watchdog's completion signal), then looks once."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from kfp_ray_sandbox.reaper import TAG_ENV, _read, pid_alive, wait_gone
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 300.0  # a bound on a hang: the Ray image may be built first (sandbox_pip)
EXIT_TIMEOUT_S = 180.0   # a bound on a hang, not on how busy the machine is
NUL = b"\0"


class SilentIndex:
    """A package index that accepts connections and never answers: an install hangs on it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/simple"
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="silent-index").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


BENCHMARKS = {
    "pip_path": ["benchmarks/pip_path.py", "--kinds", "S3"],
    "sandbox_pip": ["benchmarks/sandbox_pip.py", "--nodes", "2", "--requirements", "kfp-ray-not-a-package==1.0"],
}


def watchdog_of(owner: int) -> tuple[int, str] | None:
    """The watchdog watching owner (its pid and tag), from its command line; None if none."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            args = _read(f"/proc/{entry}/cmdline").split(NUL)
            if any(a.endswith(b"sandbox/reaper.py") for a in args) and args[args.index(b"--owner") + 1] == str(owner).encode():
                return int(entry), args[args.index(b"--tag") + 1].decode()
    return None


def leftovers(tmpdir: Path, tag: str | None, me: int) -> list[str]:
    """Processes naming the owner's TMPDIR (every child inherits it) or carrying its watchdog's
    tag, and anything left in the TMPDIR. What vanishes while it is read is not left."""
    marker, entry = str(tmpdir).encode(), f"\0{TAG_ENV}={tag}\0".encode() if tag else None
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me or not pid_alive(int(pid)):
            continue
        cmd, env = _read(f"/proc/{pid}/cmdline"), NUL + _read(f"/proc/{pid}/environ")
        if marker in cmd or marker in env or (entry and entry in env):
            out.append(f"process {pid}: {cmd[:150].replace(NUL, b' ').decode(errors='replace')}")
    try:
        out += [f"in TMPDIR: {p}" for p in os.listdir(tmpdir)]
    except FileNotFoundError:
        pass
    return out


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("bench", [pytest.param("pip_path"), pytest.param("sandbox_pip", marks=pytest.mark.ray)])
def test_a_benchmark_leaves_nothing_when_stopped_mid_install(bench, sig, tmp_path, guard):
    index = SilentIndex()
    tmpdir = Path(tempfile.mkdtemp(prefix="krb-", dir="/tmp"))  # its TMPDIR: short, its own
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(**guard.env(), TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1", PIP_INDEX_URL=index.url, PIP_CONFIG_FILE=os.devnull,
               PIP_DEFAULT_TIMEOUT="3600", PIP_RETRIES="0", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    log = tmp_path / "bench.log"
    with open(log, "wb") as out:
        owner = subprocess.Popen([sys.executable, *BENCHMARKS[bench]], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        eventually(lambda: index.conns or owner.poll() is not None, READY_TIMEOUT_S, 0.2, what=f"{bench}'s pip to ask the index")
        assert owner.poll() is None, log.read_text(errors="replace")[-3000:]
        found = watchdog_of(owner.pid)
        os.kill(owner.pid, getattr(signal, sig))
        # The completion signals: the owner's exit (its own cleanup first, on SIGTERM), then its
        # watchdog's (it exits once it has reaped all the owner left).
        waited = [owner.pid] + ([found[0]] if found else [])
        assert wait_gone(waited, EXIT_TIMEOUT_S), f"still running {EXIT_TIMEOUT_S:.0f}s after {sig}: {waited}"
        owner.wait()
        left = leftovers(tmpdir, found[1] if found else None, os.getpid())
        assert not left, f"left after {bench} got {sig}: {left}\n--- its log ---\n{log.read_text(errors='replace')[-3000:]}"
        assert found, f"{bench} ran without a watchdog"
        if sig == "SIGTERM":  # its orderly path, not a death
            assert owner.returncode == 130, (owner.returncode, log.read_text(errors="replace")[-3000:])
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        index.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
