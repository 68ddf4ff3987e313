"""Nothing outlives its owner (issue 8, item 2). Each owner of a sandbox (the `sandbox up`
server, `pipelines run --local` with its job running, a pytest run holding a cluster, the
provisioning benchmark) is started for real, with real Ray, then sent SIGTERM, SIGINT (to its
process group, as a terminal's Ctrl-C) or SIGKILL. Once the owner and its watchdog have exited
(the watchdog exits only when it has reaped everything: its completion signal): nothing is left
naming its Ray temp dirs, its state dir or its TMPDIR on its command line or in its environment
(the Ray job's driver too), no process carries its watchdog's tag, no socket it listened on
still listens, and every temp dir is gone.
SIGTERM/SIGINT test the owners' own orderly paths; SIGKILL tests the watchdog alone.
The issue's 10 s budget is printed, not asserted: on a busy machine a correct cleanup can take
longer, and what this test guards is that it is complete, not how fast the machine is."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kubernetes import client as k8s

from kfp_ray_sandbox.client import SandboxClient
from kfp_ray_sandbox.reaper import (
    TAG_ENV,
    _read,  # /proc reads that tolerate a process gone meanwhile
    descendants,
    pid_alive,
    wait_gone,
)
from tests.helpers import raycluster

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 10.0  # the issue's, from the signal to nothing left: reported, not asserted
EXIT_TIMEOUT_S = 180.0  # a generous bound on the owner's and its watchdog's exits (a hang, not a slow machine)
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL}
# exec argv[1:] with SIGINT at its default (Owner.launch); the pid stays the owner's
AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execvp(sys.argv[1], sys.argv[1:])")
JOB_MARKER = "KRO-JOB-" + "RUNNING"  # printed by the job; the entrypoint's echo must not match it
NUL = b"\0"


# --- reading the machine ------------------------------------------------------------------------
# Whatever is listed may vanish while it is read (a process exiting, a dir being removed):
# that is never an error here, only one thing less.
def listdir(path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def files_under(root: Path) -> list[Path]:
    """The files under root (os.walk skips what vanishes while it walks; rglob raises)."""
    return [Path(d) / f for d, _, files in os.walk(root) for f in files]


def listening_sockets(pid: int | None = None) -> dict[int, str]:
    """Listening TCP sockets, inode -> "addr:port" (hex, as /proc/net/tcp has it); of one
    process if pid is given (its API server, S3, kube-proxy: every port it serves)."""
    socks = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).decode().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":  # LISTEN
                socks[int(f[9])] = f[1]
    if pid is None:
        return socks
    mine = set()
    for fd in listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                mine.add(int(link[8:-1]))
    return {inode: addr for inode, addr in socks.items() if inode in mine}


def watchdog_of(owner: int) -> tuple[int, str, int]:
    """The owner's sandbox watchdog: its pid, tag, and the process it watches (the owner, or
    under pytest-xdist the owner's worker that started the sandbox), from its command line."""
    ours = {owner, *descendants(owner)}
    for entry in listdir("/proc"):
        if entry.isdigit():
            args = _read(f"/proc/{entry}/cmdline").split(b"\0")
            if any(a.endswith(b"sandbox/reaper.py") for a in args) and int(args[args.index(b"--owner") + 1]) in ours:
                return int(entry), args[args.index(b"--tag") + 1].decode(), int(args[args.index(b"--owner") + 1])
    raise AssertionError(f"no watchdog for owner {owner}")


def leftovers(snap: dict) -> list[str]:
    """What is left of the owner: processes, ports, paths (empty when nothing is)."""
    markers = [m.encode() for m in snap["markers"]]
    tag = f"\0{TAG_ENV}={snap['tag']}\0".encode()
    out = []
    for entry in listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or not pid_alive(int(entry)):
            continue
        cmd, env = _read(f"/proc/{entry}/cmdline"), b"\0" + _read(f"/proc/{entry}/environ")
        if int(entry) in (snap["owner"], snap["server"], snap["watchdog"]) or tag in env or any(m in cmd or m in env for m in markers):
            out.append(f"process {entry}: {cmd[:150].replace(NUL, b' ').decode(errors='replace')}")
    still = listening_sockets()
    out += [f"listening socket {addr} (port {int(addr.rsplit(':', 1)[1], 16)})"
            for inode, addr in snap["sockets"].items() if inode in still]
    out += [f"dir {d}" for d in snap["ray_dirs"] if os.path.exists(d)]
    if snap["tmpdir"] is not None:
        out += [f"in TMPDIR: {p}" for p in listdir(snap["tmpdir"])]
    state = Path(snap["state_dir"])
    if state.exists():  # a state dir the owner was given keeps its logs only; one it made goes
        out += [f"state file {p}" for p in files_under(state) if p.suffix != ".log"] \
            if snap["keep_logs"] else [f"state dir {state}"]
    return out


def snapshot(owner: int, state_dir: Path, tmpdir: Path | None, keep_logs: bool) -> dict:
    """What the owner made, read before the signal: its watchdog, Ray temp dirs, served URLs."""
    info = json.loads((state_dir / "sandbox.json").read_text())
    records = [r for r in (json.loads(_read(str(f)) or b"{}") for f in (state_dir / "pods").glob("*.pid")) if r]
    ray_dirs = [r["temp_dir"] for r in records]
    assert ray_dirs and all(r.get("pgid") for r in records), records
    watchdog, tag, server = watchdog_of(owner)
    urls = sorted({v for v in info.values() if isinstance(v, str) and re.match(r"\w+://[^/:]+:\d+", v)})
    sockets = listening_sockets(server)
    ports = {int(addr.rsplit(":", 1)[1], 16) for addr in sockets.values()}
    assert urls and all(urlsplit(u).port in ports for u in urls), (urls, sockets)  # API server, S3, pip index
    markers = [*ray_dirs, str(state_dir), *([str(tmpdir)] if tmpdir else [])]
    return {"owner": owner, "server": server, "watchdog": watchdog, "tag": tag, "ray_dirs": ray_dirs, "sockets": sockets,
            "markers": markers, "state_dir": str(state_dir), "tmpdir": tmpdir, "keep_logs": keep_logs}


# --- owners ---------------------------------------------------------------------------------------
def env_for(tmpdir: Path, **extra) -> dict:
    pythonpath = os.pathsep.join([str(ROOT / "runtime"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": pythonpath, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1", **extra}


class Owner:
    """One owner under test, in a process group of its own (what a shell gives a foreground job)
    with a short TMPDIR of its own (Ray's socket paths must stay under 107 bytes)."""

    keep_logs = False  # a state dir it was given keeps its logs; one it made must go
    ready_timeout = 300.0
    together = True  # its three (one per signal) may start at once

    def __init__(self, workdir: Path, guard: dict):
        self.workdir = workdir
        self.guard = guard  # the test process's watchdog env (conftest `guard`): it goes if the test dies
        self.tmpdir = Path(tempfile.mkdtemp(prefix="kro-", dir="/tmp"))
        self.log = workdir / "owner.log"
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.state_dir: Path | None = None

    def launch(self, args: list[str], **extra) -> None:
        """Start the owner as from a terminal: SIGINT at its default whatever this test process
        inherited (a suite started in the background, or under nohup, ignores SIGINT, and an
        ignored signal stays ignored across exec: the owner would never see the Ctrl-C)."""
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, *args], cwd=ROOT,
                                         env=env_for(self.tmpdir, **self.guard, **extra), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid

    def start(self) -> None:
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether it holds running Ray now (a step further each call where there are steps)."""
        raise NotImplementedError

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def own_state_dir(self) -> Path | None:
        dirs = [d for d in self.tmpdir.glob("kfp-ray-sandbox-*") if (d / "sandbox.json").exists()]
        return dirs[0] if dirs else None

    def kill(self) -> None:
        watchdog = None
        if self.pid is not None and pid_alive(self.pid):
            with contextlib.suppress(AssertionError):  # none: it never got to start its sandbox
                watchdog = watchdog_of(self.pid)[0]
            os.kill(self.pid, signal.SIGKILL)  # its watchdog cleans up
        if self.proc is not None:
            self.proc.wait(timeout=30)
        if watchdog is not None:  # before the guard closes: it would end a watchdog mid-reap
            wait_gone([watchdog], EXIT_TIMEOUT_S)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class SandboxUp(Owner):
    """`kfp-ray-sandbox up`: the server it leaves running is the owner, with a head-only cluster."""

    keep_logs = True

    def start(self) -> None:
        self.state_dir = self.workdir / "sb"
        with open(self.log, "ab") as err:
            self.up = subprocess.Popen([sys.executable, "-m", "kfp_ray_sandbox", "up", "--json", "--state-dir", str(self.state_dir)],
                                       cwd=ROOT, env=env_for(self.tmpdir, **self.guard), stdout=subprocess.PIPE, stderr=err, text=True)
        self.co = None

    def ready(self) -> bool:
        if self.co is None:
            if self.up.poll() is None:
                return False
            out = self.up.stdout.read()
            assert self.up.returncode == 0, self.log_tail()
            info = json.loads(out)
            self.pid, self.log = info["pid"], self.state_dir / "sandbox.log"  # not our child: `up` is gone
            self.co = k8s.CustomObjectsApi(SandboxClient(info).api_client())
            self.co.create_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters",
                                                    raycluster("od", workers=0, memory="1Gi"))
        rc = self.co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "od")
        return (rc.get("status") or {}).get("state") == "ready"

    def exited(self) -> bool:
        return self.up.poll() not in (None, 0) or (self.pid is not None and not pid_alive(self.pid))

    def kill(self) -> None:
        super().kill()
        self.up.wait(timeout=30)
        self.up.stdout.close()


class PipelinesRun(Owner):
    """`kfp-ray run ray_training --local`, its (head-only) Ray job running."""

    ready_timeout = 420.0
    # One at a time: with three runs starting at once on 2 cores, a head's dashboard once
    # answered the job submission with 500s (it could not reach its agent) for all of the
    # submit task's retries.
    together = False

    def start(self) -> None:
        entrypoint = "python -c \"import time; print('KRO-JOB-' + 'RUNNING', flush=True); time.sleep(3600)\""
        self.launch([sys.executable, "-m", "kfp_ray.pipelines", "run", "ray_training", "--local", "--param", f"entrypoint={entrypoint}",
                     "--param", "num_workers=0", "--param", "head_memory=1Gi"])

    def ready(self) -> bool:
        self.state_dir = self.state_dir or self.own_state_dir()
        return JOB_MARKER in self.log.read_text(errors="replace")


class PytestRun(Owner):
    """A pytest run as `make test` runs it (pytest-xdist: the sandbox is a worker's), whose test
    holds a ready head-only cluster."""

    keep_logs = True

    def start(self) -> None:
        self.marker = self.workdir / "holding"
        self.state_dir = self.workdir / "pt" / "popen-gw0" / "sandbox0"  # the worker's tmp_path_factory.mktemp("sandbox")
        self.launch([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", "--basetemp", str(self.workdir / "pt"),
                     "tests/reliability/owner_holds_a_cluster.py"], KFP_RAY_HOLD_MARKER=str(self.marker))

    def ready(self) -> bool:
        return self.marker.exists()


class Benchmark(Owner):
    """benchmarks/bench_provision.py, holding its first ready cluster."""

    def start(self) -> None:
        self.launch([sys.executable, "benchmarks/bench_provision.py", "--rounds", "1", "--hold"])

    def ready(self) -> bool:
        self.state_dir = self.state_dir or self.own_state_dir()
        return "holding" in self.log.read_text(errors="replace")


OWNERS = {"sandbox_up": SandboxUp, "pipelines_run": PipelinesRun, "pytest": PytestRun, "benchmark": Benchmark}


@pytest.fixture(scope="module")
def fleet(request, tmp_path_factory, guard):
    """get(kind, sig) -> an Owner holding running Ray. The owners of one kind that this session's
    tests will signal start together where they may (each spends most of its start waiting),
    and are all ready before the first is signalled, so no start competes with a measured stop."""
    started: dict[tuple[str, str], Owner] = {}

    def get(kind: str, sig: str) -> Owner:
        if (kind, sig) not in started:
            if kind == "pipelines_run":
                from kfp_ray.pipelines import local

                local.isolated_python()  # made once here, not raced by three runs
            wanted = {sig}
            if OWNERS[kind].together:
                wanted |= {i.callspec.params["sig"] for i in request.session.items
                           if i.module is request.module and i.callspec.params.get("owner") == kind}
            group = {s: OWNERS[kind](tmp_path_factory.mktemp(f"{kind}-{s}"), guard.env()) for s in sorted(wanted)}
            for s, owner in group.items():
                owner.start()
                started[(kind, s)] = owner
            deadline = time.monotonic() + max(o.ready_timeout for o in group.values())
            pending = dict(group)
            while pending and time.monotonic() < deadline:
                pending = {s: o for s, o in pending.items() if not o.exited() and not o.ready()}
                time.sleep(0.25)
        owner = started[(kind, sig)]
        if owner.exited() or not owner.ready():
            pytest.fail(f"the {kind} owner did not get to hold running Ray:\n{owner.log_tail()}")
        return owner

    yield get
    for owner in started.values():
        owner.kill()


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("owner", OWNERS)
def test_nothing_outlives_its_owner(owner, sig, fleet):
    it = fleet(owner, sig)
    snap = snapshot(it.pid, it.state_dir, it.tmpdir, it.keep_logs)
    before = leftovers(snap)  # what the check sees while the owner lives
    if owner == "pipelines_run":  # the job's driver, in a session of its own: Ray's child, not ours
        assert any(JOB_MARKER[:8] in x and "time.sleep" in x for x in before), before
    t = time.monotonic()
    if sig == "SIGINT":
        os.killpg(os.getpgid(it.pid), signal.SIGINT)
    else:
        os.kill(it.pid, SIGNALS[sig])
    # The completion signals: the owner's exit (after its own cleanup, SIGTERM/SIGINT) and its
    # watchdog's (after the owner's "done", or once it reaped all the dead owner left).
    waited = [snap["owner"], snap["server"], snap["watchdog"]]
    if not wait_gone(waited, EXIT_TIMEOUT_S):  # a zombie counts as gone
        raise AssertionError(f"still running {EXIT_TIMEOUT_S:.0f}s after {sig}: {[p for p in waited if pid_alive(p)]} "
                             f"of owner/server/watchdog {waited}\n--- its log ---\n{it.log_tail()}")
    took = time.monotonic() - t
    if it.proc is not None:
        it.proc.poll()  # our child: reap it (tidy)
    left = leftovers(snap)
    assert not left, f"left after the {owner} owner and its watchdog exited ({sig}): {left}\n--- its log ---\n{it.log_tail()}"
    print(f"{owner} {sig}: owner and watchdog gone, nothing left, after {took:.2f}s (budget {BUDGET_S:.0f}s"
          f"{', exceeded: a busy machine' if took > BUDGET_S else ''})")
