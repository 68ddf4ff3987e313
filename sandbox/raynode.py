"""Real Ray nodes for sandbox pods: `ray start --block` processes on loopback.

Each pod gets its own loopback address (127.x.y.z), its own temp dir and free ports, and
runs in its own process group, so stopping it kills exactly what it started (never
`ray stop`, which would kill every Ray process of the machine).

Each node is recorded in `<root>/<pod>.<temp dir name>.pid` before its temp dir or process exists
(then again with its process group once started): the sandbox's watchdog (reaper.py) reaps what
the records name if the sandbox's owner dies, and `kfp-ray-sandbox down` if the server is gone.
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from . import imagehooks, rayimage
from .reaper import ProcSnapshot, descendants, pid_alive, pids_mentioning, reap
from .reaper import signal_pid as _signal

__all__ = ["RayNode", "descendants", "free_port", "kill_recorded", "pid_alive", "pids_mentioning", "ray_env"]

# Ports every Ray node binds; the head adds gcs, dashboard and client ports.
NODE_PORT_FLAGS = ("node-manager-port", "object-manager-port", "dashboard-agent-grpc-port",
                   "dashboard-agent-listen-port", "metrics-export-port", "runtime-env-agent-port")
OBJECT_STORE_CAP = 256 * 1024 * 1024  # keep /dev/shm use small on a shared 2-core machine
# In every Ray process's environment, and so in all they start: the job drivers, which Ray
# runs in sessions of their own, are found by it once their parents are gone.
NODE_ENV = "KFP_RAY_SANDBOX_NODE"
# Where a stopped node's Ray logs (session_latest/logs) are copied before its temp dir goes,
# for diagnosing a node that misbehaved in a test run; unset, they go with the temp dir.
KEEP_LOGS_ENV = "KFP_RAY_SANDBOX_KEEP_LOGS"


# Ports for the sandbox's listeners come from below the kernel's ephemeral range, which
# connect() draws every client socket's local port from. A Ray dashboard agent binds its port
# on the node's address and on 127.0.0.1; when a port picked with bind(0) (from the ephemeral
# range) was meanwhile the local port of some connection on 127.0.0.1, the agent answered its
# readiness probe on the node's address, failed to bind 127.0.0.1 and exited, and the head
# answered job submissions with 500s ("cannot connect to the job agent"). That happened under
# load, most with pytest-xdist. Handed-out ports are also held machine-wide, across processes
# (other xdist workers, other sandboxes), by an abstract Unix socket named for the port, which
# goes with its process however it ends (no file left), until the node surely bound it.
PORT_HOLD_S = 300.0  # longer than a node takes to bind its ports on a loaded machine
LISTEN_PORTS_FROM = 20000  # above Ray's default worker ports (10002-19999)
_held: dict[int, tuple[float, socket.socket]] = {}
_held_lock = threading.Lock()


def _listen_range() -> list[int]:
    """Ports no client socket is given (LISTEN_PORTS_FROM up to the ephemeral range), less the
    Ray client servers' (CLIENT_SERVER_PORTS: in a pod they are the head's alone)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    if low - LISTEN_PORTS_FROM >= 2000:
        ports = range(LISTEN_PORTS_FROM, low)
    else:
        ports = range(max(high + 1, 1024), 65536) if 65535 - high >= 2000 else range(1024, 65536)
    return [p for p in ports if p not in CLIENT_SERVER_PORTS]


def free_port() -> int:
    """A port free on every address (Ray binds some listeners on 0.0.0.0), outside the
    ephemeral range, and not handed out by any sandbox on this machine in the last
    PORT_HOLD_S."""
    ports = _listen_range()
    with _held_lock:
        now = time.monotonic()
        for port, (since, hold) in list(_held.items()):
            if now - since > PORT_HOLD_S:
                hold.close()
                del _held[port]
        for _ in range(10000):
            port = random.choice(ports)
            if port in _held:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("", port))
                except OSError:
                    continue
            if _reserve(port, now):
                return port
        raise OSError(f"no free port in {ports[0]}-{ports[-1]} after 10000 tries")


def machine_hold(name: str) -> socket.socket | None:
    """A machine-wide hold on `name` (an abstract Unix socket: no file, gone with its process
    however it ends), or None if another holder has it."""
    hold = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        hold.bind(f"\0kfp-ray-sandbox-{name}")
    except OSError:
        hold.close()
        return None
    return hold


def _reserve(port: int, now: float) -> bool:
    """Hold `port` machine-wide for this process; False if another process holds it."""
    hold = machine_hold(f"port-{port}")
    if hold is not None:
        _held[port] = (now, hold)
    return hold is not None


# Every Ray process (worker, driver, and the job agent's own driver) binds a gRPC server on
# 0.0.0.0 at a port its raylet hands out from --min/--max-worker-port, 10002-19999 by default,
# without checking it is free machine-wide. Nodes of a real cluster each have their own
# addresses; here they share the machine's, so two nodes handed the same port collide: a
# head's job agent, connecting as a driver at its first job submission, died with "Failed to
# start the grpc server ... port 10005 ... Address already in use", its raylet with it (fate
# sharing), and every submission got 500s. So each node gets its own block of that range,
# held machine-wide (abstract socket) for the node's lifetime.
WORKER_PORTS = range(10002, 20000)  # Ray 2.52's default worker ports (ray start --help)
WORKER_PORT_BLOCK = 100  # a node's workers, drivers and actors at once; ports are reused as they exit


# A head's Ray client proxy starts a server per client on a port of 23000-23999 (ray 2.52.1,
# proxier.py), on 127.0.0.1, which in a pod is the head's alone: each head gets a block of its
# own, held machine-wide for its lifetime (imagehooks.py says why and how).
CLIENT_SERVER_PORTS = range(23000, 24000)
CLIENT_SERVER_PORT_BLOCK = 20  # clients of one cluster at once
# The dashboard subprocess modules a sandbox head runs: those the platform uses (imagehooks.py)
DASHBOARD_MODULES = ("JobHead", "NodeHead", "ReportHead")


def hold_worker_ports() -> tuple[int, int, socket.socket]:
    """(min, max) worker ports for one node, and the socket that holds them machine-wide
    until closed (or its process ends)."""
    return _hold_block("workers", WORKER_PORTS, WORKER_PORT_BLOCK)


def hold_client_server_ports() -> tuple[int, int, socket.socket]:
    """(min, max) Ray client server ports for one head, held as hold_worker_ports' are."""
    return _hold_block("client-servers", CLIENT_SERVER_PORTS, CLIENT_SERVER_PORT_BLOCK)


def _hold_block(kind: str, ports: range, size: int) -> tuple[int, int, socket.socket]:
    blocks = list(range(ports.start, ports.stop - size + 1, size))
    random.shuffle(blocks)
    for low in blocks:
        hold = machine_hold(f"{kind}-{low}")
        if hold is not None:
            return low, low + size - 1, hold
    raise OSError(f"all {len(blocks)} blocks of {kind} ports are held by running sandbox nodes")


def ray_env(extra: dict | None = None, image: str | None = None) -> dict:
    """Environment for Ray processes: the sandbox's Ray image's bin first on PATH (so a job's
    `python` is the image's: Ray without training libraries, rayimage.py), and none of the
    caller's RAY_* settings (the CodeFlare SDK exports RAY_USE_TLS into the process that
    called it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    bindir = rayimage.bin_dir(image)  # the pod's image's (rayimage.python_for)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


_PRIVATE_MOUNTS: bool | None = None


def private_mounts_available() -> bool:
    """Whether this process may make private mount namespaces (root, unshare present)."""
    global _PRIVATE_MOUNTS
    if _PRIVATE_MOUNTS is None:
        try:
            _PRIVATE_MOUNTS = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                                             capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _PRIVATE_MOUNTS = False
        if not _PRIVATE_MOUNTS:
            import logging

            logging.getLogger("sandbox").warning(
                "cannot make private mount namespaces: Ray worker nodes share the head's temp dir "
                "(jobs with a working_dir on multi-node clusters may lose their files)")
    return _PRIVATE_MOUNTS


def stop_container(proc: subprocess.Popen, targets: list[int], grace: float, strays=lambda: []) -> None:
    """As a kubelet stops a container: SIGTERM to its main process `proc` alone, up to `grace`
    seconds for it and `targets` (its processes) to exit, then SIGKILL to what is left of
    them, to `strays()` and to proc's process group; proc is reaped."""
    if proc.poll() is None:
        _signal(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (proc.poll() is None or any(pid_alive(p) for p in targets)):
        time.sleep(0.1)
    for pid in targets + strays():
        _signal(pid, signal.SIGKILL)
    kill_group(proc, 5)


def kill_group(proc: subprocess.Popen, wait_s: float) -> None:
    """SIGKILL to proc's process group, then reap proc (waiting at most `wait_s`)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        pass


class PodProcess:
    """What the kubelet asks of a container's process, Ray node or command alike: a record
    under the kubelet's root (temp dir and process group, for the watchdog), alive or not, its
    log's size, its exit code as a container reports it, SIGTERM, and a crash. Subclasses set
    proc, temp_dir, pid_file and log_path."""

    proc: subprocess.Popen | None
    temp_dir: Path
    pid_file: Path
    log_path: Path

    def _record(self, **extra) -> None:
        """Write this process's record atomically (a reader never sees half of one)."""
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"temp_dir": str(self.temp_dir), **extra}))
        os.replace(tmp, self.pid_file)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_size(self) -> int:
        """Bytes in the pod's log file so far (where the next instance's log begins)."""
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _strays(self, snapshot: ProcSnapshot | None = None) -> list[int]:
        """Processes of this container that left its process tree."""
        return []

    def pids(self, snapshot: ProcSnapshot | None = None) -> list[int]:
        """The container's live processes; `snapshot`: one /proc walk shared by several pods."""
        if self.proc is None:
            return []
        snapshot = snapshot or ProcSnapshot()
        own = [self.proc.pid] if self.proc.poll() is None else []
        return sorted({*own, *snapshot.descendants(self.proc.pid), *self._strays(snapshot)})

    def terminate(self) -> None:
        """SIGTERM to the main process alone, as a kubelet signals a container's main process
        (`ray start` then stops its own processes in order, about 2 s; signalling them all at
        once can leave it hanging until SIGKILL). The kubelet waits out the grace period and
        stops whatever is left."""
        if self.proc is not None and self.proc.poll() is None:
            _signal(self.proc.pid, signal.SIGTERM)

    def exit_code(self) -> int | None:
        """The main process's exit code as a container reports it (128+signal when killed)."""
        code = self.proc.poll() if self.proc is not None else None
        return None if code is None else (128 - code if code < 0 else code)

    def crash(self) -> None:
        """Kill it abruptly (SIGKILL), as an OOM kill or node failure would."""
        if self.proc is not None:
            for pid in self.pids():
                _signal(pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


class RayNode(PodProcess):
    """One Ray node (head or worker) started for one pod."""

    def __init__(self, name: str, ip: str, *, head: bool, num_cpus: float, num_gpus: float,
                 memory: int, root: Path, ports: dict[str, int] | None = None,
                 gcs_address: str | None = None, env: dict | None = None, head_temp_dir: Path | None = None,
                 extra_args: list[str] | None = None, image: str | None = None):
        self.name, self.ip, self.head = name, ip, head
        self.image = image  # the Ray container's image: which Python's Ray image runs (rayimage.python_for)
        self.extra_args = list(extra_args or [])  # last on the command line: they win over ours
        self.num_cpus, self.num_gpus, self.memory = num_cpus, num_gpus, memory
        self.gcs_address = gcs_address
        self.env = dict(env or {})  # the container's env, which Ray's processes (and jobs) inherit
        # Ray worker nodes use the head's temp dir path. In Kubernetes each pod has its own
        # filesystem there; here a worker sharing the head's directory would garbage-collect
        # the head's job working_dir files. So a worker runs in a private mount namespace
        # where the head's path is its own directory (needs root; else it shares, and says so).
        self.head_temp_dir = head_temp_dir
        self.ports = dict(ports or {})
        for flag in NODE_PORT_FLAGS:
            self.ports.setdefault(flag, free_port())
        low, high, self._worker_ports_hold = hold_worker_ports()
        self.ports |= {"min-worker-port": low, "max-worker-port": high}
        self._client_ports_hold = None
        if head:
            low, high, self._client_ports_hold = hold_client_server_ports()
            self.env[imagehooks.PORTS_ENV] = f"{low}-{high}"
            self.env[imagehooks.MODULES_ENV] = ",".join(DASHBOARD_MODULES)
            self.env[imagehooks.ZYGOTE_ENV] = "1"
        self.log_path = root / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        # Short private temp dir: Ray's unix socket paths must stay under 107 bytes. Recorded
        # before it is made, so that no owner death leaves it unrecorded.
        while True:
            self.temp_dir = Path("/tmp") / f"kr-{secrets.token_hex(5)}"
            if os.path.lexists(self.temp_dir):
                continue
            self.pid_file = root / f"{name}.{self.temp_dir.name}.pid"
            self._record()
            try:
                self.temp_dir.mkdir(mode=0o700)
                break
            except FileExistsError:  # raced for the name: the record must not name another's dir
                self.pid_file.unlink(missing_ok=True)

    def command(self) -> list[str]:
        cmd = [rayimage.python_for(self.image), "-m", "ray.scripts.scripts", "start", "--block",  # `ray start`, in the image
               f"--node-ip-address={self.ip}", f"--temp-dir={self.temp_dir}",
               f"--num-cpus={max(0, math.ceil(self.num_cpus))}", f"--num-gpus={math.ceil(self.num_gpus)}",
               f"--memory={self.memory}",
               f"--object-store-memory={min(OBJECT_STORE_CAP, max(78643200, self.memory // 4))}",
               "--disable-usage-stats", "--log-style=record", "--log-color=false"]
        if self.head:
            cmd += ["--head", f"--dashboard-host={self.ip}", "--include-dashboard=true"]
        else:
            cmd.append(f"--address={self.gcs_address}")
        cmd += [f"--{k}={v}" for k, v in sorted(self.ports.items())]
        cmd += self.extra_args
        if self.head_temp_dir is not None and private_mounts_available():
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"', "sh",
                   str(self.head_temp_dir), str(self.temp_dir), *cmd]
        return cmd

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=ray_env({**self.env, NODE_ENV: str(self.temp_dir)}, self.image), start_new_session=True,
                                     cwd=str(self.temp_dir))
        log.close()
        self._record(pgid=self.proc.pid)  # its session and group: start_new_session

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.ip}:{self.ports['dashboard-port']}"

    def ready(self) -> bool:
        """As KubeRay v1.4's readiness probe (ray-operator/controllers/ray/common/pod.go,
        initLivenessAndReadinessProbe): the dashboard agent's api/local_raylet_healthz answers
        "success", and on the head the dashboard's api/gcs_healthz too. (The dashboard's job API
        answers about 2 s before the agent does; a job submitted then fails with a 500.)"""
        if not self.alive() or not self._healthy("dashboard-agent-listen-port", "api/local_raylet_healthz"):
            return False
        return not self.head or self._healthy("dashboard-port", "api/gcs_healthz")

    def _healthy(self, port_flag: str, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.ip}:{self.ports[port_flag]}/{path}", timeout=2) as resp:
                return resp.status == 200 and b"success" in resp.read()
        except OSError:
            return False

    def log_tail(self, lines: int = 200) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _strays(self, snapshot: ProcSnapshot | None = None) -> list[int]:
        # Ray processes that left the tree (daemonized)
        return (snapshot or ProcSnapshot()).mentioning(str(self.temp_dir))

    def stop(self, grace: float = 10.0) -> None:
        """Stop this node's processes (group, descendants, and strays in its temp dir), then
        remove its temp dir and record."""
        if self.proc is not None:
            # SIGTERM to `ray start` alone, as a kubelet signals a container's main process: it
            # stops its processes in order (about 2 s, a running job included); signalling them
            # all at once can leave them hanging until SIGKILL.
            stop_container(self.proc, self.pids(), grace, strays=self._strays)
        self._keep_logs()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.pid_file.unlink(missing_ok=True)
        self._worker_ports_hold.close()
        if self._client_ports_hold is not None:
            self._client_ports_hold.close()

    def _keep_logs(self) -> None:
        keep = os.environ.get(KEEP_LOGS_ENV)
        logs = self.temp_dir / "session_latest" / "logs"
        if keep and logs.is_dir():
            dest = Path(keep) / f"{self.name}-{self.ip}-{self.temp_dir.name}"
            try:
                shutil.copytree(logs, dest, ignore=shutil.ignore_patterns("*.sock"), dirs_exist_ok=True,
                                ignore_dangling_symlinks=True)
                shutil.copy2(self.log_path, dest / "pod.log")
            except (OSError, shutil.Error):
                pass  # a diagnostic aid: never fails a stop

def kill_recorded(root: Path) -> int:
    """Kill the Ray nodes recorded under root (pid files) whose sandbox is gone, remove their
    temp dirs and records; returns how many there were. Used by `down` when the sandbox
    process did not stop cleanly (its watchdog normally got there first)."""
    found = len(list(root.glob("*.pid")))
    if found:
        reap(record_dirs=[root])
    return found
