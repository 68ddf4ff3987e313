"""Real Ray nodes for sandbox pods: `ray start --block` processes on loopback.

Each pod gets its own loopback address (127.x.y.z), its own temp dir and free ports, and
runs in its own process group, so stopping it kills exactly what it started (never
`ray stop`, which would kill every Ray process of the machine).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# Ports every Ray node binds; the head adds gcs, dashboard and client ports.
NODE_PORT_FLAGS = ("node-manager-port", "object-manager-port", "dashboard-agent-grpc-port",
                   "dashboard-agent-listen-port", "metrics-export-port", "runtime-env-agent-port")
OBJECT_STORE_CAP = 256 * 1024 * 1024  # keep /dev/shm use small on a shared 2-core machine


def free_port() -> int:
    """A port free on every address (Ray binds some listeners on 0.0.0.0)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def ray_env(extra: dict | None = None) -> dict:
    """Environment for Ray processes: this interpreter's bin first on PATH (so jobs' `python`
    has ray), and none of the caller's RAY_* settings (the CodeFlare SDK exports RAY_USE_TLS
    into the process that called it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    bindir = str(Path(sys.executable).parent)
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


def descendants(pid: int) -> list[int]:
    """All live descendants of pid, from /proc (children may have left the group)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def pids_mentioning(marker: str) -> list[int]:
    """Processes whose command line mentions marker (a node's private temp dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


class RayNode:
    """One Ray node (head or worker) started for one pod."""

    def __init__(self, name: str, ip: str, *, head: bool, num_cpus: float, num_gpus: float,
                 memory: int, root: Path, ports: dict[str, int] | None = None,
                 gcs_address: str | None = None, env: dict | None = None, head_temp_dir: Path | None = None):
        self.name, self.ip, self.head = name, ip, head
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
        # Short private temp dir: Ray's unix socket paths must stay under 107 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
        self.log_path = root / f"{name}.log"
        self.pid_file = root / f"{name}.pid"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        ray = str(Path(sys.executable).parent / "ray")
        cmd = [ray, "start", "--block", f"--node-ip-address={self.ip}", f"--temp-dir={self.temp_dir}",
               f"--num-cpus={max(0, math.ceil(self.num_cpus))}", f"--num-gpus={math.ceil(self.num_gpus)}",
               f"--memory={self.memory}",
               f"--object-store-memory={min(OBJECT_STORE_CAP, max(78643200, self.memory // 4))}",
               "--disable-usage-stats", "--log-style=record", "--log-color=false"]
        if self.head:
            cmd += ["--head", f"--dashboard-host={self.ip}", "--include-dashboard=true"]
        else:
            cmd.append(f"--address={self.gcs_address}")
        cmd += [f"--{k}={v}" for k, v in sorted(self.ports.items())]
        if self.head_temp_dir is not None and private_mounts_available():
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"', "sh",
                   str(self.head_temp_dir), str(self.temp_dir), *cmd]
        return cmd

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=ray_env(self.env), start_new_session=True, cwd=str(self.temp_dir))
        log.close()
        # A record `python -m sandbox down` can act on even if the sandbox itself died.
        self.pid_file.write_text(json.dumps({"pgid": self.proc.pid, "temp_dir": str(self.temp_dir)}))

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.ip}:{self.ports['dashboard-port']}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """Head: the dashboard's job API answers. Worker: `ray start` reports the node
        joined (worker nodes keep their session under the head's temp dir)."""
        if not self.alive():
            return False
        if self.head:
            try:
                with urllib.request.urlopen(self.dashboard_url + "/api/jobs/", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False
        return "Ray runtime started" in self.log_tail(80)

    def log_tail(self, lines: int = 200) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        own = [self.proc.pid] if self.proc.poll() is None else []
        return sorted({*own, *descendants(self.proc.pid), *pids_mentioning(str(self.temp_dir))})

    def stop(self, grace: float = 10.0, remove: bool = True) -> None:
        """Stop this node's processes (group, descendants, and strays in its temp dir)."""
        if self.proc is not None:
            targets = self.pids()
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            for pid in targets:
                _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (self.proc.poll() is None or any(pid_alive(p) for p in targets)):
                time.sleep(0.1)
            for pid in targets + pids_mentioning(str(self.temp_dir)):
                _signal(pid, signal.SIGKILL)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if remove:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.pid_file.unlink(missing_ok=True)

    def terminate(self) -> None:
        """SIGTERM to the `ray start` process alone, as a kubelet signals a container's main
        process: Ray then stops its own processes in order (about 2 s). Signalling them all at
        once instead can leave `ray start` hanging until SIGKILL. The kubelet waits out the
        grace period and calls stop(grace=0) for whatever is left."""
        if self.proc is not None and self.proc.poll() is None:
            _signal(self.proc.pid, signal.SIGTERM)

    def exit_code(self) -> int | None:
        """The `ray start` process's exit code as a container reports it (128+signal when killed)."""
        code = self.proc.poll() if self.proc is not None else None
        return None if code is None else (128 - code if code < 0 else code)

    def crash(self) -> None:
        """Kill the node abruptly (SIGKILL), as an OOM kill or node failure would."""
        if self.proc is not None:
            for pid in self.pids():
                _signal(pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_recorded(root: Path) -> int:
    """Kill the Ray nodes recorded under root (pid files) whose sandbox is gone; returns
    how many were found. Used by `down` when the sandbox process did not stop cleanly."""
    found = 0
    for pid_file in root.glob("*.pid"):
        try:
            rec = json.loads(pid_file.read_text())
        except (OSError, ValueError):
            continue
        found += 1
        pids = set(pids_mentioning(rec["temp_dir"]))
        try:
            os.killpg(rec["pgid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        shutil.rmtree(rec["temp_dir"], ignore_errors=True)
        pid_file.unlink(missing_ok=True)
    return found
