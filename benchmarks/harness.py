"""What every benchmark shares: the machine's description, the results file, a compiled
pipeline run the way users start one (kfp.Client against the sandbox's Data Science
Pipelines server), and an observer that timestamps what the sandbox's objects do meanwhile.

The observer reads as the sandbox's admin; the pipeline's own requests (the pipeline-runner
service account's, in the audit log) are what the API-cost numbers count."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import platform
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
RUNNER = "system:serviceaccount:sandbox:pipeline-runner-dspa"


# --- the machine and the results ------------------------------------------------------------
def machine() -> dict:
    """What the numbers were measured on."""
    cpu = next((li.split(":", 1)[1].strip() for li in _read("/proc/cpuinfo").splitlines() if li.startswith("model name")),
               platform.processor())
    mem = next((int(li.split()[1]) // 1024 for li in _read("/proc/meminfo").splitlines() if li.startswith("MemTotal")), 0)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_mib": mem, "python": platform.python_version(),
            "kernel": platform.release(), "commit": rev or "unknown",
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def write_result(suite: str, result: dict, table: str) -> Path:
    """results/<suite>.json (the numbers, the machine) and the suite's section of
    results/README.md (the table), which the README links as the latest results."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{suite}.json"
    path.write_text(json.dumps({"suite": suite, "machine": machine(), **result}, indent=1, sort_keys=True) + "\n")
    (RESULTS / f"{suite}.md").write_text(table.rstrip() + "\n")
    index = ["# Latest benchmark results", "", "Written by `python -m benchmarks` (see ../README.md); one section per",
             "suite, from its last run, with the machine it ran on. The numbers are in `<suite>.json`.", ""]
    for md in sorted(RESULTS.glob("*.md")):
        if md.name != "README.md":
            index += [md.read_text().rstrip(), ""]
    (RESULTS / "README.md").write_text("\n".join(index))
    return path


def describe(m: dict) -> str:
    return f"{m['date']}, commit {m['commit']}: {m['cores']} cores ({m['cpu']}), {m['memory_mib']} MiB, Python {m['python']}"


def table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of the values; nan for none."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return float("nan")
    import math

    return v[min(len(v) - 1, max(0, math.ceil(q / 100 * len(v)) - 1))]


def median(values) -> float:
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else float("nan")


def ts(text) -> float | None:
    """An RFC 3339 time (the API's, or a datetime) as epoch seconds."""
    if text is None:
        return None
    if isinstance(text, dt.datetime):
        return text.timestamp()
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


# --- the sandbox ----------------------------------------------------------------------------
@contextlib.contextmanager
def watched():
    """For a benchmark that starts processes but no sandbox (pip_path, sandbox_pip): a watchdog of
    its own, like a sandbox's, so that what it starts with `child_env(wd)` (and all their
    descendants) and its temp files (tempfile's, within) go with it however it ends: Ctrl-C,
    SIGTERM (unwinds like Ctrl-C) or SIGKILL (the watchdog alone). Yields the watchdog."""
    from kfp_ray_sandbox.reaper import Watchdog, owned_tempdir, reap, sigterm_as_interrupt

    with sigterm_as_interrupt():
        wd = Watchdog().start()
        try:
            with owned_tempdir(wd):
                try:
                    yield wd
                finally:  # its processes first, so none writes into the temp dir being removed
                    reap(tag=wd.tag, settle=False)
        finally:
            wd.close()


def child_env(watchdog, env: dict | None = None) -> dict:
    """The environment (os.environ's, or env) for a child process that dies with its owner, its
    temp files (pip's build dirs...) in the owner's watched temp dir (within `watched`)."""
    import tempfile

    return {**(os.environ if env is None else env), **watchdog.env(), "TMPDIR": tempfile.gettempdir()}


@contextlib.contextmanager
def sandbox():
    """One sandbox for a suite; it and everything in it go when the block ends, or when this
    process dies (its watchdog)."""
    from kfp_ray_sandbox import Sandbox
    from kfp_ray_sandbox.reaper import owned_tempdir, sigterm_as_interrupt

    with sigterm_as_interrupt(), Sandbox() as box, owned_tempdir(box.watchdog):
        os.environ["KUBECONFIG"] = box.info["kubeconfig"]
        from kfp_ray import kube

        kube.api_client.cache_clear()
        yield box


class Pipelines:
    """Runs compiled pipelines through the sandbox's Data Science Pipelines server with
    kfp.Client, as `kfp-ray run --local` and users do."""

    def __init__(self, box):
        from kfp_ray.pipelines.connection import Connection
        from kfp_ray_sandbox.client import SandboxClient

        self.box, self.sbx = box, SandboxClient(box.info)
        self.client = Connection(box.info["pipelines_api"], self.sbx.token(), box.info["ca_file"], "the sandbox").client()
        self.versions: dict[str, tuple[str, str]] = {}
        from kfp_ray.pipelines.run_local import EXPERIMENT

        with contextlib.redirect_stdout(io.StringIO()):
            self.experiment = self.client.create_experiment(EXPERIMENT).experiment_id

    def upload(self, name: str, path: Path | None = None) -> tuple[str, str]:
        """Upload compiled/<name>.yaml (or `path`, under its own name) once; its ids."""
        from kfp_ray.pipelines import registry

        key = str(path or name)
        if key not in self.versions:
            with contextlib.redirect_stdout(io.StringIO()):
                p = self.client.upload_pipeline(str(path or registry.compiled_path(name)),
                                                pipeline_name=f"{name}-{path.parent.name}" if path else name)
                v = self.client.list_pipeline_versions(p.pipeline_id).pipeline_versions[0]
            self.versions[key] = (p.pipeline_id, v.pipeline_version_id)
        return self.versions[key]

    def start(self, name: str, params: dict, tag: str, path: Path | None = None) -> tuple[str, float]:
        """Start a run of compiled/<name>.yaml (or `path`); its id and when it was asked for (epoch seconds)."""
        pid, vid = self.upload(name, path)
        asked = time.time()
        with contextlib.redirect_stdout(io.StringIO()):
            run = self.client.run_pipeline(self.experiment, f"bench-{tag}", pipeline_id=pid, version_id=vid, params=params)
        return run.run_id, asked

    def wait(self, run_id: str, timeout: float = 900) -> object:
        """The run once it is over (polled every 0.2 s: the wall time is measured to it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.client.get_run(run_id)
            if str(run.state) in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"):
                return run
            time.sleep(0.2)
        raise TimeoutError(f"run {run_id} did not end within {timeout:.0f}s")

    def tasks(self, run) -> dict[str, dict]:
        """Each task's start and end (epoch seconds), by display name."""
        out = {}
        for t in (run.run_details.task_details if run.run_details else None) or []:
            if t.start_time:
                out[t.display_name] = {"start": ts(t.start_time), "end": ts(t.end_time) if t.end_time else None}
        return out

    def outputs(self, run_id: str, name: str) -> dict[str, dict]:
        """Each task's output parameters (its executor output in the pipeline root)."""
        from kfp_ray.pipelines import registry, summary

        pipeline = registry.load(name).pipeline_spec.pipeline_info.name
        return {k: v.get("parameterValues") or {} for k, v in
                summary.task_outputs(self.sbx.s3(), self.box.info["s3_bucket"], f"{pipeline}/{run_id}/").items()}

    @staticmethod
    def create_and_delete(requests: list[dict]) -> tuple[float | None, float | None]:
        """When the runner asked to create the RayCluster, and to delete it (None: never)."""
        create = next((a["ts"] for a in requests if a["method"] == "POST" and a["path"].endswith("/rayclusters")), None)
        delete = next((a["ts"] for a in requests if a["method"] == "DELETE" and "/rayclusters/" in a["path"]), None)
        return create, delete

    def runner_requests(self, since: float, until: float) -> list[dict]:
        """The pipeline-runner's Kubernetes API requests between two times (the audit log)."""
        return [a for a in self.sbx.audit() if a["user"] == RUNNER and since <= a["ts"] <= until]


# --- the observer -----------------------------------------------------------------------------
class Observer:
    """Polls, as the admin, every `every` seconds: each RayCluster's life (created, admitted,
    ready, deletion asked, gone), the ClusterQueue's usage, and each head's Ray job (its
    start_time and end_time, read from the dashboard on the head pod's address while it lives).
    Times are epoch seconds, the poll's (±`every`)."""

    def __init__(self, sbx, namespace: str, queue: str = "cluster-queue", every: float = 0.1):
        from kubernetes import client

        self.api = client.CustomObjectsApi(sbx.api_client())
        self.core = client.CoreV1Api(sbx.api_client())
        self.ns, self.queue, self.every = namespace, queue, every
        self.clusters: dict[str, dict] = {}
        self.usage: list[tuple[float, float]] = []  # (time, admitted CPU)
        self.peak_admitted = 0
        self.pods: dict[str, dict] = {}  # task pods (driver and executor), by pod name: run, task, kind, times
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="bench-observer")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except Exception:  # noqa: BLE001 - a missed poll is one sample less
                pass
            self._stop.wait(self.every)

    def _look(self) -> None:
        now = time.time()
        rcs = self.api.list_namespaced_custom_object("ray.io", "v1", self.ns, "rayclusters")["items"]
        seen = set()
        for rc in rcs:
            name = rc["metadata"]["name"]
            seen.add(name)
            c = self.clusters.setdefault(name, {"created": ts(rc["metadata"]["creationTimestamp"]), "first_seen": now})
            if not rc["spec"].get("suspend") and "admitted" not in c:
                c["admitted"] = now
            if (rc.get("status") or {}).get("state") == "ready" and "ready" not in c:
                c["ready"] = now
            if rc["metadata"].get("deletionTimestamp") and "deleting" not in c:
                c["deleting"] = now
            if "ready" in c and "job_end" not in c:
                self._job(name, c)
        for name, c in self.clusters.items():
            if name not in seen and "gone" not in c:
                c["gone"] = now
        self._task_pods(now)
        cq = self.api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", self.queue)
        cpu = 0.0
        for f in (cq.get("status") or {}).get("flavorsReservation") or []:
            for r in f.get("resources") or []:
                if r["name"] == "cpu":
                    from kfp_ray_sandbox import quantity

                    cpu += float(quantity.parse(r.get("total", "0")))
        self.peak_admitted = max(self.peak_admitted, int((cq.get("status") or {}).get("reservingWorkloads") or 0))
        if not self.usage or self.usage[-1][1] != cpu:
            self.usage.append((now, cpu))

    def _task_pods(self, now: float) -> None:
        """Each pipeline task pod (Argo's label pipeline/runid): when first seen (created), Running,
        and ended; its task and whether it is the task's driver pod or its executor's."""
        from kfp_ray.pipelines.run_tasks import NODE_KEY, task_of_node

        raw = self.core.list_namespaced_pod(self.ns, label_selector="pipeline/runid", _preload_content=False)
        for pod in json.loads(raw.data)["items"]:
            meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
            node = (meta.get("annotations") or {}).get(NODE_KEY, "")
            last = node.rsplit(".", 1)[-1]  # `<task>-driver`, or `executor` / `executor(N)` under `<task>`
            kind = "executor" if last.startswith("executor") else "driver"
            task = task_of_node(node) if kind == "executor" else last.removesuffix("-driver")
            p = self.pods.setdefault(meta["name"], {"run": meta["labels"]["pipeline/runid"], "task": task,
                                                    "first_seen": now, "kind": kind})
            if phase in ("Running", "Succeeded", "Failed") and "running" not in p:
                p["running"] = now
            if phase in ("Succeeded", "Failed") and "ended" not in p:
                p["ended"] = now

    def pod_costs(self, run_id: str) -> dict[str, dict]:
        """Per task of the run: its driver pod's seconds (created to ended), its executor pod's
        start (created to Running) and run (Running to ended), summed over its attempts."""
        out: dict[str, dict] = {}
        for p in self.pods.values():
            if p["run"] != run_id or "ended" not in p:
                continue
            t = out.setdefault(p["task"], {"driver": 0.0, "executor_start": 0.0, "executor": 0.0})
            if p["kind"] == "driver":
                t["driver"] += p["ended"] - p["first_seen"]
            else:
                t["executor_start"] += p.get("running", p["ended"]) - p["first_seen"]
                t["executor"] += p["ended"] - p.get("running", p["ended"])
        return {k: {m: round(v, 2) for m, v in t.items()} for k, t in sorted(out.items())}

    def _job(self, name: str, c: dict) -> None:
        if "head_ip" not in c:
            pods = self.core.list_namespaced_pod(self.ns, label_selector=f"ray.io/cluster={name},ray.io/node-type=head").items
            if not pods or not pods[0].status.pod_ip:
                return
            c["head_ip"] = pods[0].status.pod_ip
        try:
            with urllib.request.urlopen(f"http://{c['head_ip']}:8265/api/jobs/", timeout=2) as r:
                jobs = json.loads(r.read())
        except Exception:  # noqa: BLE001 - not up yet, or gone
            return
        for j in jobs:
            if j.get("start_time"):
                c["job_start"] = j["start_time"] / 1000
            if j.get("end_time"):
                c["job_end"] = j["end_time"] / 1000
                c["job_status"] = j.get("status")

    def quota_zero_after(self, t: float) -> float | None:
        """When the queue's admitted CPU was next 0 at or after t."""
        return next((when for when, cpu in self.usage if when >= t and cpu == 0), None)

    def mark(self) -> None:
        """Forget what was seen (a new round)."""
        self.clusters = {}
        self.peak_admitted = 0
