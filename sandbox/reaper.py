"""The sandbox's watchdog: what an owner starts for its sandbox dies with the owner, however it dies.

The owner is the process that runs a Sandbox (`sandbox serve`, `pipelines run --local`, a pytest
session, a benchmark). Sandbox.start() starts one watchdog, this file run as a script (standard
library only, so it starts fast and imports nothing of the project), in a session of its own and
ignoring SIGINT/SIGTERM/SIGHUP: a Ctrl-C to the terminal's process group or a signal to the owner's
group never reaches it. It learns of the owner's death without the owner's help: it polls a pidfd of
the owner (readable once the owner has exited, SIGKILL included) and the read end of a pipe whose
write end only the owner holds (EOF once the owner is gone; also the fallback where pidfds are
missing). Then it kills what it was told about, removes what it was told to remove, and exits.
Its exit is its completion signal: it exits only once it has reaped everything (or after
REAP_TIMEOUT with something that SIGKILL cannot end, which it logs), so whoever needs to know
that cleanup is over waits for the watchdog's exit (a pidfd, or /proc), never for a time.

What it is told, always before the thing exists, so no process or directory is ever unrecorded:
  - a tag: processes the owner starts with `Watchdog.env()` carry KFP_RAY_REAPER_TAG=<tag> in their
    environment, and so do their descendants;
  - record directories: `*.pid` JSON files {"temp_dir": ..., "pgid": ...} that sandbox/raynode.py
    writes before a Ray node's temp dir and process exist; processes naming the temp dir on their
    command line or in their environment (job drivers too, which Ray starts in sessions of their
    own), the node's process group/session and all their descendants are killed, the temp dir
    and the record removed;
  - paths to remove (over the pipe, one JSON line each, atomic below PIPE_BUF).
It kills nothing else, and never runs `ray stop` (that would kill every Ray process of the machine).
When the owner stops its sandbox cleanly it sends "done": the watchdog then only kills what is
left of the recorded processes (nothing, normally), leaves the paths alone, and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TAG_ENV = "KFP_RAY_REAPER_TAG"
SETTLE_S = 0.5     # a last look for processes forked, but not yet exec'd, when the owner died
# Only a bound on a hang: the reap ends as soon as nothing is left (well within the 10 s
# on an idle machine), and giving up early on a busy one would only leave processes behind.
REAP_TIMEOUT = 60.0
START_TIMEOUT = 60.0  # a bound on a hang; a busy machine may take seconds to start a Python


# --- /proc ------------------------------------------------------------------------------
def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _stat(pid: int | str) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def _processes() -> dict[int, tuple[int, int, int]]:
    """Every live (not zombie) process: pid -> (ppid, pgrp, session)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(entry)
            if st is not None and st[0] != "Z":
                out[int(entry)] = st[1:]
    return out


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _closure(roots: set[int], procs: dict[int, tuple[int, int, int]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def descendants(pid: int) -> list[int]:
    """All live descendants of pid, from /proc (children may have left the group)."""
    return ProcSnapshot().descendants(pid)


def session_tree(leader: int, include_leader: bool = True) -> set[int]:
    """The live members of the session `leader` made (start_new_session) and all their
    descendants, also those that left it. A session id is not reused while it has members."""
    procs = _processes()
    roots = {p for p, (_, _, sid) in procs.items() if sid == leader}
    if include_leader and leader in procs:
        roots.add(leader)
    return _closure(roots, procs)


def _mentions(data: bytes, marker: bytes) -> bool:
    # A whole path: /tmp/kr-ab must not match /tmp/kr-abc.
    return re.search(re.escape(marker) + rb"(?![\w.-])", data) is not None


def _names(pid: int, markers: list[bytes]) -> bool:
    """Whether a process names a marker on its command line or in its environment (a Ray
    node's processes and everything they start, Ray job drivers in sessions of their own
    included, inherit KFP_RAY_SANDBOX_NODE=<its temp dir>: see raynode.py)."""
    if not markers:
        return False
    cmdline = _read(f"/proc/{pid}/cmdline")
    if any(_mentions(cmdline, m) for m in markers):
        return True
    environ = _read(f"/proc/{pid}/environ")
    return any(_mentions(environ, m) for m in markers)


def pids_mentioning(marker: str) -> list[int]:
    """Processes naming marker (a node's private temp dir) on their command line or in their
    environment."""
    return ProcSnapshot().mentioning(marker)


class ProcSnapshot:
    """One walk of /proc that answers several questions: the sandbox's process listing asks
    for every pod's descendants and strays, and a walk per question (a stat, a command line
    and an environment per process) made each listing cost a walk per pod."""

    def __init__(self):
        self.procs = _processes()
        self._texts: dict[int, bytes] = {}  # pid -> command line + environment, read once

    def descendants(self, pid: int) -> list[int]:
        return sorted(_closure({pid}, self.procs) - {pid})

    def mentioning(self, marker: str) -> list[int]:
        """As pids_mentioning, over this walk's processes."""
        m, me = marker.encode(), os.getpid()
        out = []
        for pid in self.procs:
            if pid == me:
                continue
            text = self._texts.get(pid)
            if text is None:
                text = self._texts[pid] = _read(f"/proc/{pid}/cmdline") + b"\0" + _read(f"/proc/{pid}/environ")
            if _mentions(text, m):
                out.append(pid)
        return sorted(out)


def signal_pid(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- reaping ------------------------------------------------------------------------------
def read_records(dirs) -> list[tuple[Path, dict]]:
    """The Ray node records (raynode.py writes them) in dirs: (file, {"temp_dir", "pgid"?})."""
    out = []
    for d in dirs:
        for f in sorted(Path(d).glob("*.pid")):
            try:
                rec = json.loads(f.read_text())
            except (OSError, ValueError):
                continue  # records are written atomically; a half one cannot exist
            if isinstance(rec, dict) and rec.get("temp_dir"):
                out.append((f, rec))
    return out


def find_targets(tag: str | None, markers: list[str], groups: set[int], trusted: set[int],
                 spare: set[int]) -> set[int]:
    """Processes to kill: tagged, or naming a marker, or in a trusted recorded group/session,
    and all their descendants. A recorded group is trusted once a member names a marker (a bare
    pgid could have been reused by someone else's process)."""
    procs = _processes()
    entry = f"\0{TAG_ENV}={tag}\0".encode() if tag else None
    encoded = [m.encode() for m in markers]
    hits = set()
    for pid, (_, pgrp, sid) in procs.items():
        if pid in spare:
            continue
        if _names(pid, encoded):
            hits.add(pid)
            trusted.update(g for g in (pgrp, sid) if g in groups)
        elif entry and entry in b"\0" + _read(f"/proc/{pid}/environ"):
            hits.add(pid)
    hits |= {pid for pid, (_, pgrp, sid) in procs.items() if pgrp in trusted or sid in trusted}
    return _closure(hits, procs) - spare


def reap(tag: str | None = None, record_dirs=(), paths=(), spare=(), timeout: float = REAP_TIMEOUT,
         settle: bool = True) -> dict:
    """SIGKILL the processes of `tag` and of the Ray node records in record_dirs, until none is
    left; then remove the records' temp dirs, the records, and `paths`. Returns what it did
    ("left": what still lived when `timeout` ran out, normally nothing).
    settle: look once more after a pause (the owner died: a child it forked may not have exec'd)."""
    spare = {os.getpid(), 1, *spare}
    trusted: set[int] = set()
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    settled = not settle
    left: set[int] = set()
    while True:
        records = read_records(record_dirs)
        markers = [r["temp_dir"] for _, r in records]
        groups = {int(r["pgid"]) for _, r in records if r.get("pgid")}
        targets = find_targets(tag, markers, groups, trusted, spare)
        if not targets:
            if settled or time.monotonic() >= deadline:
                break
            settled = True
            time.sleep(SETTLE_S)
            continue
        settled = not settle
        for pid in targets:
            signal_pid(pid, signal.SIGKILL)
        killed |= targets
        wait_gone(targets, min(3.0, max(0.1, deadline - time.monotonic())))
        if time.monotonic() >= deadline:
            left = {p for p in targets if pid_alive(p)}
            break
    removed = []
    for f, rec in read_records(record_dirs):
        shutil.rmtree(rec["temp_dir"], ignore_errors=True)
        f.unlink(missing_ok=True)
        removed.append(rec["temp_dir"])
    for d in record_dirs:  # a record's temp file, if its writer died before renaming it
        for f in Path(d).glob("*.tmp"):
            f.unlink(missing_ok=True)
    for p in paths:
        if os.path.lexists(p):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(p)
            removed.append(str(p))
    return {"killed": sorted(killed), "removed": removed, "left": sorted(left)}


def wait_gone(pids, timeout: float) -> bool:
    """Wait (backing off) until none of pids is alive; False on timeout."""
    deadline, pause = time.monotonic() + timeout, 0.01
    while any(pid_alive(p) for p in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
    return True


# --- the owner's side -----------------------------------------------------------------------
class Watchdog:
    """Start one per sandbox (Sandbox.start does); tell it what to reap, before creating it."""

    def __init__(self):
        self.tag = secrets.token_hex(8)
        self.proc: subprocess.Popen | None = None
        self._w: int | None = None
        self._lock = threading.Lock()

    def start(self) -> Watchdog:
        r, w = os.pipe()            # the owner's lifeline: only this process holds w (not inheritable)
        ready_r, ready_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, "--owner", str(os.getpid()), "--tag", self.tag,
                 "--fd", str(r), "--ready-fd", str(ready_w)],
                pass_fds=(r, ready_w), start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            os.close(r)
            os.close(ready_w)
        self._w = w
        try:
            ready, _, _ = select.select([ready_r], [], [], START_TIMEOUT)
            ok = bool(ready) and os.read(ready_r, 16) == b"ready"
        finally:
            os.close(ready_r)
        if not ok:
            self.close()
            raise RuntimeError(f"the sandbox watchdog did not start within {START_TIMEOUT:.0f}s")
        return self

    def env(self) -> dict[str, str]:
        """Environment for a child process whose whole tree dies with the owner."""
        return {TAG_ENV: self.tag}

    def _send(self, msg: dict) -> None:
        line = (json.dumps(msg) + "\n").encode()
        if len(line) > select.PIPE_BUF:
            raise ValueError("watchdog message too long to write atomically")
        with self._lock:
            if self._w is None:
                raise RuntimeError("the sandbox watchdog is not running")
            os.write(self._w, line)

    def remove_on_death(self, path) -> None:
        """Remove path (file or tree) if the owner dies; say it before creating path."""
        self._send({"rm": str(path)})

    def watch_records(self, directory) -> None:
        """Reap the Ray node records (raynode.py) found in directory when the owner dies."""
        self._send({"records": str(directory)})

    def mkdtemp(self, prefix: str, dir: str | None = None) -> Path:
        """tempfile.mkdtemp, but recorded for removal before it is created."""
        base = Path(dir or tempfile.gettempdir())
        while True:
            path = base / f"{prefix}{secrets.token_hex(5)}"
            if os.path.lexists(path):
                continue
            self.remove_on_death(path)
            try:
                path.mkdir(mode=0o700)
                return path
            except FileExistsError:  # raced: not ours, and the rm record only fires on death
                continue

    def close(self, timeout: float = REAP_TIMEOUT + 30) -> None:
        """The owner cleaned up: the watchdog kills any recorded leftover and exits. Waits for
        it to have done so (its exit) for longer than its own reap may take: a watchdog killed
        mid-reap would leave what it had not reaped yet."""
        with self._lock:
            w, self._w = self._w, None
        if w is not None:
            with contextlib.suppress(OSError):
                os.write(w, b'{"done": true}\n')
            os.close(w)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _log(f"the watchdog (pid {self.proc.pid}) did not finish within {timeout:.0f}s; killing it")
                self.proc.kill()
                self.proc.wait(timeout=5)


def children(pid: int) -> list[int]:
    """The live direct children of pid."""
    return sorted(p for p, (ppid, _, _) in _processes().items() if ppid == pid)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: this process gets `sig` when its parent dies, however the parent dies
    (prctl PR_SET_PDEATHSIG), e.g. a pytest-xdist worker whose controller was SIGKILLed: its
    own watchdog then reaps what it started. Call it from the thread that lives as long as
    the process (the parent thread's end counts as the parent's death)."""
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, int(sig), 0, 0, 0) != 0:  # 1: PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)


def raise_interrupt(signum, frame):
    """A SIGTERM handler: unwind like Ctrl-C (KeyboardInterrupt), so with/finally cleanups run."""
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within: SIGTERM unwinds like Ctrl-C (only the main thread can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def owned_tempdir(watchdog: Watchdog):
    """Within: this process's default temp dir (tempfile.tempdir) is a new one that the watchdog
    removes if the process dies, so temp files that libraries only remove at exit (the
    kubernetes client's copy of a kubeconfig's CA) go with it too. Removed on leaving."""
    path = watchdog.mkdtemp("kfp-ray-tmp-")
    saved, tempfile.tempdir = tempfile.tempdir, str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(path, ignore_errors=True)


SIGNAL_SLICE_S = 0.25


def wait_interruptibly(event: threading.Event, timeout: float | None = None) -> bool:
    """event.wait(timeout) for the main thread that still runs signal handlers promptly. The
    kernel may deliver SIGTERM/SIGINT to any thread; CPython then only flags it for the main
    thread, and a main thread blocked in a wait is not woken: so wait in slices."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not event.is_set():
        left = SIGNAL_SLICE_S if deadline is None else min(SIGNAL_SLICE_S, deadline - time.monotonic())
        if left <= 0:
            break
        event.wait(left)
    return event.is_set()


# --- the watchdog's side --------------------------------------------------------------------
def _log(msg: str) -> None:
    with contextlib.suppress(OSError):
        sys.stderr.write(f"sandbox watchdog: {msg}\n")
        sys.stderr.flush()


def watch(owner: int, tag: str, fd: int, ready_fd: int) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        pidfd = os.pidfd_open(owner)
    except (AttributeError, OSError):
        pidfd = None
    owner_gone = os.getppid() != owner  # checked after pidfd_open: the pidfd is of the right process
    os.write(ready_fd, b"ready")
    os.close(ready_fd)
    record_dirs: list[str] = []
    paths: list[str] = []
    done = False
    buf = b""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    pause = 0.5
    while not owner_gone and not done:
        events = poller.poll(None if pidfd is not None else pause * 1000)
        pause = min(pause * 2, 2.0)
        if pidfd is None and os.getppid() != owner:
            owner_gone = True
        for efd, _ in events:
            if efd == pidfd:
                owner_gone = True
        while True:  # drain what the owner wrote, even after it died
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                owner_gone = True
                break
            buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "records" in msg:
                record_dirs.append(msg["records"])
            if "rm" in msg:
                paths.append(msg["rm"])
            if msg.get("done"):
                done = True
    if done:
        result = reap(tag, record_dirs, (), spare={owner}, settle=False)
        if result["left"]:
            _log(f"could not end processes {result['left']} within {REAP_TIMEOUT:.0f}s")
        if result["killed"]:
            _log(f"the owner (pid {owner}) stopped its sandbox but left {len(result['killed'])} processes; killed them")
        return 0
    result = reap(tag, record_dirs, paths, spare={owner})
    if result["left"]:
        _log(f"could not end processes {result['left']} within {REAP_TIMEOUT:.0f}s")
    _log(f"the owner (pid {owner}) is gone: killed {len(result['killed'])} processes, "
         f"removed {len(result['removed'])} paths")
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="the sandbox's watchdog (started by Sandbox.start)")
    ap.add_argument("--owner", type=int, required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--ready-fd", type=int, required=True)
    args = ap.parse_args(argv)
    return watch(args.owner, args.tag, args.fd, args.ready_fd)


if __name__ == "__main__":
    sys.exit(main())
