"""The fault matrix's machinery (tests/reliability/test_fault_matrix.py).

Each row is one kfp.local run of tests/reliability/matrix_pipeline.py (or, for the retry row,
of its components one by one) against the session's sandbox, as RHOAI's pipeline-runner, with
one fault. Rows run concurrently, each with a cluster of its own (`mx-<row>-<hex>`): cluster
faults are keyed by that name, API faults are the cluster-scoped ones (the requests on that
RayCluster only), so rows never see each other's faults. Concurrency is bounded by CPU slots
(a row gives its slot back while it only waits, e.g. through a 3-minute outage) and by
quota slots (the seed ClusterQueue admits 5 pods; a row whose cluster will be admitted holds one
per pod of its Workload, a RayJob's submitter included, until its quota is released), so no row
waits in Kueue for another's.

What a row measures, in wall-clock seconds (time.time()):
  t_fault    when the fault happened (SIGTERM sent, outage began, job ended, ...);
  t_detect   the run's first reaction to it (its log line, or its DELETE of the cluster);
  t_useless  from when the cluster's quota should go (t_fault; for a run that succeeds, the
             job's end), to when the ClusterQueue stopped counting the cluster's Workload;
  leaks      RayClusters, Workloads holding quota and Ray processes of the row's cluster,
             left once the run has ended and SETTLE_S more have passed.
The sandbox is read in-process (its store, kubelet and kube-proxy) by a Monitor thread, so
measuring sends no request through the faults.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kfp_ray_sandbox.reaper import ProcSnapshot, descendants, pid_alive, session_tree

PIPELINE = "tests.reliability.matrix_pipeline:fault_matrix_run"
RAYJOB_PIPELINE = "tests.reliability.matrix_pipeline:fault_matrix_rayjob"  # lifecycle "rayjob": run_ray_job
PREEMPT_PIPELINE = "tests.reliability.matrix_pipeline:fault_matrix_preempt"  # provision, follow submitting, a priority
COMPONENTS = {name: f"components.{name}.component:{name}"
              for name in ("provision_ray_cluster", "submit_ray_job", "follow_ray_job", "teardown_ray_cluster")}
NS = "sandbox"
# KFP 2.17 terminate (docs/lifecycle.md): Argo sends SIGTERM to the task container's process
# group (argoexec emissary forwards it to the KFP launcher, its shell and the component's
# python), SIGKILL after terminationGracePeriodSeconds (30 s). But the launcher (Go, no signal
# handler) dies of the SIGTERM at once, emissary notices within a second (its wait loop) and
# exits, and as the container's PID 1 its exit kills the rest: by code reading the component
# has about 1 s, not 30. The matrix gives it 1 s.
KILL_AFTER_S = 1.0
GRACE_S = 30.0  # the pod's terminationGracePeriodSeconds, Kubernetes' default
SETTLE_S = 60.0  # after a run: how long its cluster, quota and processes may take to be gone
START_SPACING_S = 4.0  # rows start at least this far apart (Matrix._space_out)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
QUICK_JOB = "python -c \"print('KFP_RAY_METRICS {\\\"ok\\\": 1}')\""


def ticking_job(seconds: int) -> str:
    """A job that prints a numbered line a second for `seconds` s, then its last line."""
    return (f"python -c \"import time\nfor i in range({seconds}):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"
            f"print('ticks done', flush=True)\"")


def gated_job(gate: Path, limit: int = 600) -> str:
    """A job that runs until the test creates `gate` (Ray runs on this machine, so the job sees
    it), then prints three ticks and its last line: it ends when the test says, not on a timer."""
    return (f"python -c \"import os, time\nprint('waiting for the gate', flush=True)\nt = time.time()\n"
            f"while not os.path.exists('{gate}') and time.time() - t < {limit}:\n    time.sleep(0.2)\n"
            f"for i in range(3):\n    print('tick', i, flush=True)\nprint('ticks done', flush=True)\"")


# --- a run's log, line by line, with arrival times ---------------------------------------------
class TimedLog:
    """File-like sink for a run's output; each line stamped with the time it arrived."""

    def __init__(self):
        self._lock = threading.Lock()
        self._partial = ""
        self.lines: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        with self._lock:
            self._partial += s
            *done, self._partial = self._partial.split("\n")
            t = time.time()
            self.lines.extend((t, ANSI.sub("", line)) for line in done)
        return len(s)

    def flush(self) -> None:
        pass

    def snapshot(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.lines) + ([(time.time(), ANSI.sub("", self._partial))] if self._partial else [])

    def text(self) -> str:
        return "\n".join(line for _, line in self.snapshot())

    def first(self, pattern: str, after: float = 0.0, flags: int = 0) -> float | None:
        """When the first line matching `pattern` (at or after `after`) arrived."""
        rx = re.compile(pattern, flags)
        return next((t for t, line in self.snapshot() if t >= after and rx.search(line)), None)


# --- the sandbox, read in-process ---------------------------------------------------------------
@dataclass
class Trace:
    """What the Monitor saw of one RayCluster name."""

    name: str
    created: float | None = None
    uids: list = field(default_factory=list)  # more than one: the name was created again
    run_id: str | None = None
    delete_requested: float | None = None
    gone: float | None = None
    admitted: float | None = None  # first time unsuspended
    reserving: bool = False
    reserved_ever: bool = False
    released: float | None = None  # last time its Workload stopped holding quota
    evicted: float | None = None  # first PodsReadyTimeout eviction
    pod_seen: float | None = None
    temp_dirs: set = field(default_factory=set)


class Monitor:
    """Samples the sandbox's store every `interval` s: when each
    RayCluster (and RayJob: a rayjob row's `mx-<row>-<hex>`, whose cluster KubeRay names
    `mx-<row>-<hex>-<5>`) appeared, was admitted, evicted, asked to go and gone, and when its
    Workload held and released quota."""

    def __init__(self, box, interval: float = 0.1):
        self.box = box
        self.rc_t = box.registry.get("ray.io", "rayclusters")
        self.rj_t = box.registry.get("ray.io", "rayjobs")
        self.wl_t = box.registry.get("kueue.x-k8s.io", "workloads")
        self.pod_t = box.registry.get("", "pods")
        self.svc_t = box.registry.get("", "services")
        self.interval = interval
        self.traces: dict[str, Trace] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="matrix-monitor", daemon=True)

    def start(self) -> Monitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a sample during sandbox shutdown; the next one tells
                pass
            self._stop.wait(self.interval)

    def _sample(self) -> None:
        t = time.time()
        store = self.box.store
        rcs = {rc["metadata"]["name"]: rc for rc in store.list(self.rc_t, NS)[0] + store.list(self.rj_t, NS)[0]}
        holding, evicted = set(), set()
        for wl in store.list(self.wl_t, NS)[0]:
            owner = next((r["name"] for r in wl["metadata"].get("ownerReferences") or []
                          if r.get("kind") in ("RayCluster", "RayJob")), None)
            conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}
            finished = conds.get("Finished", {}).get("status") == "True"  # Kueue counts a finished Workload no more
            if owner and conds.get("QuotaReserved", {}).get("status") == "True" and (wl.get("status") or {}).get("admission") \
                    and not finished:
                holding.add(owner)
            ev = conds.get("Evicted")
            if owner and ev and ev.get("status") == "True" and ev.get("reason") == "PodsReadyTimeout":
                evicted.add(owner)
        pods = {(p["metadata"].get("labels") or {}).get("ray.io/cluster") for p in store.list(self.pod_t, NS)[0]}
        records = self._records()
        with self._lock:
            for name, rc in rcs.items():
                tr = self.traces.setdefault(name, Trace(name))
                tr.created = tr.created or t
                if rc["metadata"]["uid"] not in tr.uids:
                    tr.uids.append(rc["metadata"]["uid"])
                tr.run_id = tr.run_id or (rc["metadata"].get("annotations") or {}).get("kfp-ray.io/run-id")
                if rc["metadata"].get("deletionTimestamp") and tr.delete_requested is None:
                    tr.delete_requested = t
                if not (rc.get("spec") or {}).get("suspend") and tr.admitted is None:
                    tr.admitted = t
                if name in evicted and tr.evicted is None:
                    tr.evicted = t
                if name in pods and tr.pod_seen is None:
                    tr.pod_seen = t
            for name, tr in self.traces.items():
                if name not in rcs and tr.created is not None and tr.gone is None:
                    tr.gone = t
                if name in rcs and tr.gone is not None:  # the same name again
                    tr.gone = None
                now_holding = name in holding
                if tr.reserving and not now_holding:
                    tr.released = t
                if now_holding:
                    tr.reserved_ever = True
                tr.reserving = now_holding
            for pod, temp_dir in records:
                for name, tr in self.traces.items():
                    if pod.startswith(f"{name}-"):
                        tr.temp_dirs.add(temp_dir)

    def _records(self) -> list[tuple[str, str]]:
        """(pod name, Ray temp dir) of every Ray node the kubelet recorded (sandbox/raynode.py
        writes <pod>.<temp dir name>.pid before the node starts): which temp dirs a cluster's
        processes name, read without scanning /proc."""
        out = []
        for f in (Path(self.box.info["state_dir"]) / "pods").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                out.append((f.name.split(".", 1)[0], json.loads(f.read_text())["temp_dir"]))
        return out

    def of(self, prefix: str) -> list[Trace]:
        with self._lock:
            return [_copy(tr) for n, tr in self.traces.items() if n.startswith(prefix)]

    def trace(self, name: str) -> Trace | None:
        with self._lock:
            tr = self.traces.get(name)
            return _copy(tr) if tr else None

    # direct reads (not sampled)
    def clusters(self, prefix: str) -> list[dict]:
        return [rc for rc in self.box.store.list(self.rc_t, NS)[0] if rc["metadata"]["name"].startswith(prefix)]

    def rayjobs(self, prefix: str) -> list[dict]:
        return [rj for rj in self.box.store.list(self.rj_t, NS)[0] if rj["metadata"]["name"].startswith(prefix)]

    def cluster_name(self, name: str) -> str:
        """`name`, or the cluster KubeRay made for RayJob `name` (`name-<5>`) once it exists."""
        if self.box.store.find(self.rc_t, NS, name) is not None:
            return name
        return next((rc["metadata"]["name"] for rc in self.clusters(f"{name}-")), name)

    def holding(self, prefix: str) -> list[str]:
        self._sample()
        return [tr.name for tr in self.of(prefix) if tr.reserving]

    def processes(self, prefix: str) -> list[int]:
        """Live processes of clusters named prefix*: every process naming one of their Ray temp
        dirs on its command line or in its environment (Ray's own, and the job drivers, which
        inherit KFP_RAY_SANDBOX_NODE), as the sandbox's reaper finds them."""
        self._sample()
        pids, snapshot = set(), ProcSnapshot()
        for tr in self.of(prefix):
            for d in tr.temp_dirs:
                pids.update(snapshot.mentioning(d))
        return sorted(p for p in pids if pid_alive(p))

    def pods(self, name: str) -> list[dict]:
        return [p for p in self.box.store.list(self.pod_t, NS)[0]
                if (p["metadata"].get("labels") or {}).get("ray.io/cluster") == name]

    def dashboard_url(self, name: str) -> str | None:
        svc = self.box.store.find(self.svc_t, NS, f"{self.cluster_name(name)}-head-svc")
        ip = ((svc or {}).get("spec") or {}).get("clusterIP")
        if not ip or ip == "None":
            return None
        port = next((p["port"] for p in svc["spec"].get("ports") or [] if p.get("name") == "dashboard"), 8265)
        return f"http://{ip}:{port}"


def _copy(tr: Trace) -> Trace:
    return Trace(**{**vars(tr), "temp_dirs": set(tr.temp_dirs), "uids": list(tr.uids)})


def audit(box, cluster: str, method: str | None = None) -> list[dict]:
    """Audit lines of requests on RayCluster `cluster` by name (not its create: a POST's path
    does not name it), oldest first."""
    out = []
    with open(box.info["audit_log"]) as fh:
        for line in fh:
            e = json.loads(line)
            if e["path"].endswith(f"/rayclusters/{cluster}") or f"/rayclusters/{cluster}/" in e["path"]:
                if method is None or e["method"] == method:
                    out.append(e)
    return out


# --- runs -------------------------------------------------------------------------------------
class Run:
    """One kfp.local run (pipelines/local.py, as the run_local fixture runs it) in a thread."""

    def __init__(self, box, target: str, arguments: dict, env: dict | None = None, root: Path | None = None,
                 timeout: float = 300.0):
        self.box, self.target, self.arguments, self.timeout = box, target, arguments, timeout
        self.env = {"KUBECONFIG": box.info["kubeconfig_pipeline_runner"], **(env or {})}
        self.root = root
        self.log = TimedLog()
        self.proc = None
        self.result: dict | None = None
        self.error: BaseException | None = None
        self.started = time.time()
        self.ended: float | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._go, name=f"run-{target.rsplit(':', 1)[-1]}", daemon=True)
        self._thread.start()

    def _go(self) -> None:
        from kfp_ray.pipelines import local

        def on_start(proc):
            self.proc = proc
            self._started.set()
        try:
            self.result = local.run(self.target, self.arguments, env=self.env, output=self.log, on_start=on_start,
                                    pipeline_root=str(self.root) if self.root else None, watchdog=self.box.watchdog)
        except BaseException as exc:  # noqa: BLE001 - reported by wait()
            self.error = exc
        finally:
            self.ended = time.time()
            self._started.set()

    @property
    def done(self) -> bool:
        return self.ended is not None

    def wait(self, timeout: float | None = None) -> dict:
        """The run's result; a run still going after `timeout` is stopped and fails the row."""
        self._thread.join(self.timeout if timeout is None else timeout)
        if self._thread.is_alive():
            self.stop()
            raise AssertionError(f"the run of {self.target} was still going after {timeout or self.timeout:.0f}s:\n"
                                 f"{self.log.text()[-4000:]}")
        if self.error is not None:
            raise self.error
        return self.result

    @property
    def status(self) -> str | None:
        return (self.result or {}).get("status")

    def task_pid(self, task: str, timeout: float = 120.0) -> int:
        """The pid of task's executor process (`python -m kfp.dsl.executor_main`, what runs in
        the task's container), found by the task's output directory on its command line."""
        marker = f"/{task}/".encode()
        deadline = time.monotonic() + timeout
        self._started.wait(timeout)
        while time.monotonic() < deadline and not self.done:
            for pid in descendants(self.proc.pid):
                with contextlib.suppress(OSError):
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if b"kfp.dsl.executor_main" in cmd and not cmd.startswith(b"sh\0") and marker in cmd:
                        return pid
            time.sleep(0.1)
        raise AssertionError(f"no process of task {task} within {timeout:.0f}s (run done: {self.done}):\n{self.log.text()[-3000:]}")

    def task_processes(self, task: str, timeout: float = 120.0) -> list[int]:
        """The task's processes: its component process first, then the shells above it up to
        the runner (what runs in the task's container)."""
        pid = self.task_pid(task, timeout)
        chain = [pid]
        while True:
            try:
                ppid = int(Path(f"/proc/{chain[-1]}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                break
            if ppid in (self.proc.pid, 0, 1):
                break
            chain.append(ppid)
        return chain

    def stop(self) -> None:
        """Stop the whole run (SIGTERM, SIGKILL after a grace): what the matrix does to a row
        that failed midway, never a row's fault."""
        from kfp_ray.pipelines import local

        if self.proc is not None and self.proc.poll() is None:
            local.stop(self.proc)
        self._thread.join(30)

    def kill(self) -> None:
        """SIGKILL the runner and every task process at once: a deleted run whose pods die
        without running anything more (no exit handler)."""
        for pid in session_tree(self.proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def terminate(pids: list[int], kill_after: float = KILL_AFTER_S) -> dict:
    """Cancel a task as KFP 2.17 terminates a run: SIGTERM to every process of the task (its
    shells and its python, as emissary signals the container's process group), SIGKILL to what
    is left `kill_after` s later (the container ends). pids[0] is the component's process.
    Returns when all are gone: when SIGTERM was sent, when the component exited, whether it
    was killed."""
    sent = time.time()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + kill_after
    while pid_alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
    killed = pid_alive(pids[0])
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    while any(pid_alive(p) for p in pids):
        time.sleep(0.01)
    return {"sigterm": sent, "exited": time.time(), "killed": killed}


def kill9(pid: int) -> float:
    t = time.time()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while pid_alive(pid):
        time.sleep(0.02)
    return t


KFP_LOCAL_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d+ - ")  # kfp.local's own log lines


def task_block(log: str, task: str) -> str:
    """One task's part of a run's log."""
    m = re.search(rf"Executing task '{task}'(.*?)(?:Task '{task}' finished with status \w+|\Z)", log, re.S)
    return m.group(1) if m else ""


def exception_text(block: str) -> str:
    """The exception a task failed with: the lines after its last traceback's frames."""
    lines = block.splitlines()
    head = max((i for i, line in enumerate(lines) if line.strip() == "Traceback (most recent call last):"), default=None)
    if head is None:
        return ""
    indent = len(lines[head]) - len(lines[head].lstrip())
    out: list[str] = []
    for line in lines[head + 1:]:
        if KFP_LOCAL_LINE.match(line):
            break
        if not out:
            if len(line) - len(line.lstrip()) == indent and re.match(r"\s*(?:[a-z_]\w*\.)*[A-Z]\w*(: |$)", line):
                out.append(line.strip())
        else:
            out.append(line.strip())
    return "\n".join(out).strip()


def error_kind(log: str) -> str | None:
    """The exception class that failed the run's first failed task."""
    task = failed_task(log)
    if task is None:
        return None
    m = re.match(r"(?:[a-z_]\w*\.)*([A-Z]\w*)", exception_text(task_block(log, task)))
    return m.group(1) if m else "failed"


def failed_task(log: str) -> str | None:
    m = re.search(r"Task '([\w-]+)' finished with status FAILURE", log)
    return m.group(1) if m else None


# --- the Ray Job API, read by the test (never through the product) ----------------------------
def ray_jobs(url: str, timeout: float = 2.0) -> list[dict]:
    import requests

    try:
        r = requests.get(f"{url}/api/jobs/", timeout=timeout)
        return r.json() if r.status_code == 200 else []
    except (requests.RequestException, ValueError):
        return []


class JobWatch:
    """Polls a cluster's Ray jobs (GET /api/jobs/) and remembers when each status was first seen,
    and Ray's own start/end times."""

    def __init__(self, monitor: Monitor, cluster: str, interval: float = 0.5):
        self.monitor, self.cluster, self.interval = monitor, cluster, interval
        self.seen: dict[str, float] = {}  # status -> first seen
        self.job: dict | None = None
        self.last = "not polled yet"  # what the last poll got, for a timeout's message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"jobs-{cluster}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import requests

        while not self._stop.is_set():
            url = self.monitor.dashboard_url(self.cluster)
            jobs = []
            if not url:
                self.last = "no head Service yet"
            else:
                # a dashboard on a loaded 2-core machine can take seconds to list jobs: a short
                # timeout here saw nothing for minutes while the run's own follow saw RUNNING
                try:
                    r = requests.get(f"{url}/api/jobs/", timeout=15)
                    jobs = r.json() if r.status_code == 200 else []
                    self.last = f"HTTP {r.status_code}, {len(jobs)} job(s)"
                except (requests.RequestException, ValueError) as e:
                    self.last = f"{type(e).__name__}: {e}"
            if jobs:
                job = max(jobs, key=lambda j: j.get("start_time") or 0)
                self.job = job
                self.seen.setdefault(job["status"], time.time())
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()

    def wait(self, status: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while status not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"the job of {self.cluster} was not {status} within {timeout:.0f}s "
                                     f"(seen: {self.seen}; last poll: {self.last})")
            time.sleep(0.1)
        return self.seen[status]

    def ended(self) -> float | None:
        """Ray's end time of the job (epoch s), once seen terminal."""
        job = self.job or {}
        return job["end_time"] / 1000.0 if job.get("end_time") else None

    def started(self) -> float | None:
        job = self.job or {}
        return job["start_time"] / 1000.0 if job.get("start_time") else None


# --- rows -------------------------------------------------------------------------------------
@dataclass
class Row:
    id: str
    fault: str  # what the summary table calls it
    expect: str  # the run's expected status: SUCCESS or FAILURE
    drive: Callable
    quota: bool = True  # its cluster is admitted at some point (holds quota slots)
    pods: int = 1  # pods its Workload counts: the slots it holds (a RayJob's K8sJobMode submitter is one)
    early: bool = False  # long: started first
    full: str = ""  # run only with KFP_RAY_TEST_FULL=1 (tests/opt_in.py): the tests that cover its ground in every run


@dataclass
class Result:
    row: Row
    cluster: str
    status: str | None = None
    kind: str | None = None
    seconds: float = 0.0
    detect_s: float | None = None
    release_s: float | None = None
    leaks: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    log: str = ""
    error: BaseException | None = None

    @property
    def outcome(self) -> str:
        return f"{self.status}" + (f" ({self.kind})" if self.kind and self.status != "SUCCESS" else "")


class Ctx:
    """What a row's driver works with: its own cluster name, faults, runs and measurements."""

    def __init__(self, matrix: Matrix, row: Row):
        self.matrix, self.row, self.box = matrix, row, matrix.box
        self.client, self.monitor = matrix.client, matrix.monitor
        self.cluster = f"mx-{row.id.replace('_', '-')[:28]}-{secrets.token_hex(2)}"
        self.t_fault: float | None = None
        self.t_detect: float | None = None
        self.t_useless: float | None = None
        self.notes: list[str] = []
        self.runs: list[Run] = []
        self.watch: JobWatch | None = None
        self.kind: str | None = None  # the outcome's detail where no task's exception says it
        self.run_dir = matrix.tmp / self.cluster
        self.run_dir.mkdir(parents=True)

    # faults of this row's cluster only
    def faults(self, **faults) -> None:
        self.client.patch_faults({"clusters": {f"{self.cluster}*": faults}})

    def clear_faults(self) -> None:
        self.client.patch_faults({"clusters": {f"{self.cluster}*": None}})

    def fault_state(self) -> dict:
        return (self.client._control("GET", "/sandbox/v1/faults")["clusters"] or {}).get(f"{self.cluster}*", {})

    def run(self, target: str = PIPELINE, env: dict | None = None, timeout: float = 300.0, **arguments) -> Run:
        if target in (PIPELINE, PREEMPT_PIPELINE):
            arguments = {"entrypoint": QUICK_JOB, "cluster_name": self.cluster, **arguments}
        elif target == RAYJOB_PIPELINE:
            arguments = {"entrypoint": QUICK_JOB, "job_name": self.cluster, **arguments}
        run = Run(self.box, target, arguments, env=env, root=self.run_dir / f"root-{len(self.runs)}", timeout=timeout)
        self.runs.append(run)
        return run

    def jobs(self) -> JobWatch:
        if self.watch is None:
            self.watch = JobWatch(self.monitor, self.cluster)
        return self.watch

    @contextlib.contextmanager
    def idle(self):
        """Give the CPU slot back while this row only waits. Getting it back may take a while:
        whatever must happen right after the wait goes inside the block."""
        self.matrix.cpu.release()
        try:
            yield
        finally:
            self.matrix.cpu.acquire()

    def until(self, fn, timeout: float, what: str, interval: float = 0.1):
        deadline = time.monotonic() + timeout
        while True:
            value = fn()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {value!r}")
            time.sleep(interval)

    def trace(self) -> Trace:
        return self.monitor.trace(self.cluster) or Trace(self.cluster)

    def note(self, text: str) -> None:
        self.notes.append(text)


class Slots:
    """A counting semaphore whose holders take several slots at once, first come, first served
    (a row of 2 pods is not overtaken by rows of 1 while it waits)."""

    def __init__(self, n: int):
        self._free, self._queue, self._cond = n, [], threading.Condition()

    def acquire(self, n: int = 1) -> None:
        with self._cond:
            me = object()
            self._queue.append(me)
            self._cond.wait_for(lambda: self._queue[0] is me and self._free >= n)
            self._queue.pop(0)
            self._free -= n
            self._cond.notify_all()

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._free += n
            self._cond.notify_all()


class Matrix:
    """Runs the selected rows concurrently and hands each test its row's Result."""

    def __init__(self, box, rows: list[Row], tmp: Path, cpu_slots: int = 3, quota_slots: int = 5):
        from kfp_ray_sandbox.client import SandboxClient

        self.box, self.rows, self.tmp = box, rows, tmp
        self.client = SandboxClient(box.info)
        self.monitor = Monitor(box).start()
        self.cpu = threading.Semaphore(cpu_slots)
        self.quota = Slots(quota_slots)
        self._spacing_lock = threading.Lock()
        self._last_start = 0.0
        self.results: dict[str, Result] = {}
        self._done: dict[str, threading.Event] = {r.id: threading.Event() for r in rows}
        self._threads: list[threading.Thread] = []
        self._ctxs: list[Ctx] = []

    def start(self) -> None:
        for row in sorted(self.rows, key=lambda r: not r.early):
            t = threading.Thread(target=self._run_row, args=(row,), name=f"row-{row.id}", daemon=True)
            self._threads.append(t)
            t.start()
            time.sleep(0.05)  # start in this order (the semaphores wake waiters first come, first served)

    def result(self, row_id: str, timeout: float = 900.0) -> Result:
        if not self._done[row_id].wait(timeout):
            raise AssertionError(f"row {row_id} did not finish within {timeout:.0f}s")
        return self.results[row_id]

    def _run_row(self, row: Row) -> None:
        res = Result(row, cluster="")
        try:
            with contextlib.ExitStack() as stack:
                if row.quota:
                    self.quota.acquire(row.pods)
                    stack.callback(self.quota.release, row.pods)
                self.cpu.acquire()
                stack.callback(self.cpu.release)
                self._space_out()
                ctx = Ctx(self, row)
                self._ctxs.append(ctx)
                res.cluster = ctx.cluster
                started = time.time()
                try:
                    row.drive(ctx)
                except BaseException as exc:  # noqa: BLE001 - handed to the row's test
                    res.error = exc
                finally:
                    self._finish(ctx, res)
                    res.seconds = round(time.time() - started, 1)
        except BaseException as exc:  # noqa: BLE001 - the machinery itself failed: the test says so
            res.error = res.error or exc
            res.notes.append(traceback.format_exc()[-2000:])
        finally:
            self.results[row.id] = res
            self._done[row.id].set()

    def _space_out(self) -> None:
        """Rows start at least START_SPACING_S apart: a row's start (task processes, pip, a Ray
        head) is its costliest part, and on 2 cores several at once starve each other (a head
        whose dashboard cannot reach its own job agent in time answers submissions with 500s)."""
        with self._spacing_lock:
            wait = self._last_start + START_SPACING_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._last_start = time.monotonic()

    def _finish(self, ctx: Ctx, res: Result) -> None:
        """Let the row's runs end, measure what is left, then tidy up for the next rows."""
        for run in ctx.runs:
            if not run.done:  # a driver that failed midway: the run must end on its own, else it is stopped
                with ctx.idle(), contextlib.suppress(Exception):
                    run.wait(GRACE_S * 2 + 60)
            if not run.done:
                run.stop()
        if ctx.watch is not None:
            ctx.watch.stop()
        main = next((r for r in ctx.runs if r.target in (PIPELINE, RAYJOB_PIPELINE, PREEMPT_PIPELINE)),
                    ctx.runs[-1] if ctx.runs else None)
        if main is not None:
            text = main.log.text()
            res.log = "\n".join(r.log.text() for r in ctx.runs) if len(ctx.runs) > 1 else text
            if main.error is not None:  # a run that died before its first line: its error is all there is to read
                res.log += f"\n--- the run itself raised: {type(main.error).__name__}: {main.error}"
            res.status = main.status or ("ERROR" if main.error else None)
            res.kind = ctx.kind or error_kind(text)
        # leaks: what is left once the run ended and SETTLE_S more have passed
        deadline = time.monotonic() + SETTLE_S
        with ctx.idle():
            while True:
                left = {"rayclusters": len(self.monitor.clusters(ctx.cluster)),
                        "rayjobs": len(self.monitor.rayjobs(ctx.cluster)),
                        "quota": len(self.monitor.holding(ctx.cluster)),
                        "processes": len(self.monitor.processes(ctx.cluster))}
                if not any(left.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        res.leaks = left
        traces = self.monitor.of(ctx.cluster)
        released = [tr.released for tr in traces if tr.reserved_ever and tr.released is not None]
        useless = ctx.t_useless or ctx.t_fault
        if released and useless is not None and not any(left.values()):
            res.release_s = round(max(released) - useless, 2)
        if ctx.t_fault is not None and ctx.t_detect is not None:
            res.detect_s = round(ctx.t_detect - ctx.t_fault, 2)
        res.notes.extend(ctx.notes)
        self._tidy(ctx)
        if os.environ.get("KFP_RAY_MATRIX_LOGS"):  # every row's run log, for reading afterwards
            out = Path(os.environ["KFP_RAY_MATRIX_LOGS"])
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{ctx.row.id}.log").write_text(res.log)

    def _tidy(self, ctx: Ctx) -> None:
        """Leave the sandbox as the row found it: its faults cleared, its clusters deleted."""
        from kubernetes import client as k8s

        with contextlib.suppress(Exception):
            ctx.clear_faults()
        co = k8s.CustomObjectsApi(self.client.api_client())
        for rj in self.monitor.rayjobs(ctx.cluster):  # their clusters go with them
            with contextlib.suppress(Exception):
                co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", rj["metadata"]["name"])
        for rc in self.monitor.clusters(ctx.cluster):
            with contextlib.suppress(Exception):
                co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", rc["metadata"]["name"])
        deadline = time.monotonic() + SETTLE_S
        while (self.monitor.clusters(ctx.cluster) or self.monitor.rayjobs(ctx.cluster) or self.monitor.processes(ctx.cluster)) \
                and time.monotonic() < deadline:
            time.sleep(0.25)

    def stop(self) -> None:
        """Interrupted: stop every run still going."""
        for ctx in self._ctxs:
            for run in ctx.runs:
                if not run.done and run.proc is not None:
                    with contextlib.suppress(Exception):
                        run.kill()
        self.monitor.stop()
