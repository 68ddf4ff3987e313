"""What `kfp-ray run --local` shows: a live view of the run, then a summary."""

from __future__ import annotations

import re

from .follow import TERMINAL

LIFETIME = re.compile(r"deleted (?:RayJob \S+ and )?RayCluster (\S+) \(lived (\d+)s\)")
# a task's boilerplate (its lines come `task | ` prefixed): the KFP executor's own lines and
# the executor input it prints as JSON, and pip's notices
NOISE = re.compile(r'^[\w-]+ \| (\s*\[KFP Executor|\s*[{}\[\]],?$|\s*"[^"]*":|\s*\},?$|\s*$|\[notice\]|'
                   r'WARNING: Running pip as)')


class LiveView:
    """A file-like sink for the run's log: keeps everything, prints the useful part."""

    def __init__(self, out, verbose: bool = False, secrets=()):
        self.out, self.verbose = out, verbose
        self.secrets = [s for s in secrets if s and len(s) >= 8]
        self._lines: list[str] = []
        self._partial = ""

    def _clean(self, line: str) -> str:
        for s in self.secrets:
            line = line.replace(s, "[REDACTED]")
        return line

    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            line = self._clean(line)
            self._lines.append(line)
            if self.verbose or (line.strip() and not NOISE.match(line)):
                self.out.write(line + "\n")
        self.out.flush()
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def text(self) -> str:
        return "\n".join(self._lines + [self._partial])


def task_outputs(s3, bucket: str, prefix: str) -> dict[str, dict]:
    """Each task's executor output (parameters, artifacts and their metadata) by task name,
    from the run's folder under the pipeline root: `<prefix><task>/<uuid>/executor_output.json`.
    The sandbox's launcher writes them there in place of KFP's ML Metadata."""
    import json

    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            rest = o["Key"][len(prefix):].split("/")
            if len(rest) == 3 and rest[2] == "executor_output.json":
                out[rest[0]] = json.loads(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())
    return out


def build(run, outputs: dict[str, dict], log: str, client, why: str = "") -> dict:
    """The summary of a finished run: its state from the API and, when it failed, `why`
    (run_tasks.workflow_failure), its tasks' states, their outputs (`task_outputs`) and what
    the run left in S3."""
    from .run_tasks import states as task_states

    states = task_states(run)

    def artifact(task, name):
        arts = ((outputs.get(task) or {}).get("artifacts") or {}).get(name, {}).get("artifacts") or [{}]
        return arts[0]

    # the cluster and the job: provision and follow, or (lifecycle "rayjob") run-ray-job for both
    provision = (outputs.get("provision-ray-cluster") or outputs.get("run-ray-job") or {}).get("parameterValues", {})
    runner = "follow-ray-job" if "follow-ray-job" in outputs else "run-ray-job"
    stage = (outputs.get("stage-dataset") or {}).get("parameterValues", {})
    metrics = artifact("publish-training-results", "metrics").get("metadata") or \
        artifact(runner, "metrics").get("metadata") or {}
    model = artifact("publish-training-results", "model")
    lifetimes = {m.group(1): int(m.group(2)) for m in LIFETIME.finditer(log)}
    stored = []
    output_uri = stage.get("output_uri", "")
    if output_uri:
        try:
            bucket, _, prefix = output_uri[len("s3://"):].partition("/")
            pages = client.s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            stored = [o["Key"] for p in pages for o in p.get("Contents", [])]
        except Exception:  # noqa: BLE001 - the summary is best effort
            stored = []
    return {
        "status": run.state,
        "error": why,
        "tasks": states,
        "metrics": metrics,
        "model": (model.get("metadata") or {}).get("s3_uri", ""),
        "results": (model.get("metadata") or {}).get("results_uri", ""),
        "report": artifact("publish-training-results", "report").get("uri", ""),
        "job_log": artifact(runner, "job_log").get("uri", ""),
        "cluster": provision.get("cluster_name", ""),
        "queued_seconds": provision.get("queued_seconds"),
        "starting_seconds": provision.get("starting_seconds"),
        "lifetime_seconds": next(iter(lifetimes.values()), None),
        "output_uri": output_uri,
        "stored": {"objects": len(stored),
                   "checkpoints": sum(1 for k in stored if "/checkpoint_" in k),
                   "model": any("/model/" in k for k in stored)},
    }


def render(name: str, r: dict, seconds: float) -> str:
    lines = ["", "=" * 72, f"{name}: {r['status']}  ({seconds:.0f}s)"]
    if r.get("platform"):
        lines.append(f"platform: {r['platform']} (the sandbox's OpenShift AI release)")
    if r["error"]:
        lines.append(f"error: {r['error']}")
    if r["tasks"]:
        lines.append("tasks: " + ", ".join(f"{t} {s}" for t, s in r["tasks"].items()))
        stale = [t for t, s in r["tasks"].items() if s in ("RUNNING", "PENDING")]
        if r["status"] in TERMINAL and stale:
            lines.append(f"  ({', '.join(stale)}: as KFP last reported; the run has ended. KFP 2.14 stops updating a "
                         "run's task states once Argo gzips its Workflow's node status, over 1 MiB)")
    if r["cluster"]:
        lines.append(f"RayCluster {r['cluster']}: queued {r['queued_seconds']}s, starting {r['starting_seconds']}s" +
                     (f", lifetime {r['lifetime_seconds']}s" if r["lifetime_seconds"] is not None else ""))
    if r["metrics"]:
        lines.append("metrics: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in sorted(r["metrics"].items())))
    for key in ("model", "results", "output_uri", "report", "job_log"):
        if r[key]:
            lines.append(f"{key}: {r[key]}")
    if r["stored"]["objects"]:
        lines.append(f"in S3 under {r['output_uri']}: {r['stored']['objects']} objects, "
                     f"{r['stored']['checkpoints']} checkpoint files, model {'yes' if r['stored']['model'] else 'no'}")
    lines.append("=" * 72)
    return "\n".join(lines)
