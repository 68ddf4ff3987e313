"""Quota release, detection and API cost, over the ways a run ends.

Each round runs compiled/ray_training.yaml (head + 1 worker) with a short job that ends in one
of four ways:
- success: `sleep 60` (a cluster that lives a minute or so: its API cost is not all start-up);
- failure: `sleep 10` then exit 3;
- timeout: `sleep 120` with job_timeout=10 (follow stops the job, then deletes the cluster);
- cancel: `sleep 120`, the run terminated (kfp.Client terminate_run, the UI's Stop) 5 s into
  the job.

From the observer (the cluster's life, the ClusterQueue's admitted CPU, the Ray job's
start_time and end_time from the dashboard) and the audit log (the pipeline-runner's requests):
- release: the job's end (Ray's end_time; for cancel, the terminate request) to the RayCluster
  DELETE request, and to the queue's admitted CPU back to 0;
- detection: the job's end to the pipeline's next request (follow saw it: its next step is
  about the cluster). Not for cancel: there the run's end is the signal;
- API cost: the pipeline-runner's requests during the cluster's life (its create to its
  delete request), by verb and phase (queued, starting, running), per cluster-minute.

The baseline, in the same run: the same numbers for the CodeFlare SDK's way of waiting as a
notebook does it (Cluster.wait_ready, then JobSubmissionClient polling) are not comparable
(it never deletes the cluster), so the floor here is the sandbox's own latency: the observer
polls every 0.1 s, and Kueue releases quota when the Workload goes."""

from __future__ import annotations

import time

from . import harness

SLEEP = "python -c 'import time; time.sleep({s})'"
FAIL = "python -c 'import sys, time; time.sleep({s}); sys.exit(3)'"
ENDINGS = {  # ending -> (entrypoint, extra parameters)
    "success": (SLEEP.format(s=60), {}),  # a minute: the API cost of a cluster that runs a while
    "failure": (FAIL.format(s=10), {}),
    "timeout": (SLEEP.format(s=120), {"job_timeout": 10}),
    "cancel": (SLEEP.format(s=120), {}),
}
CANCEL_AFTER_S = 5.0


def one(runs: harness.Pipelines, obs: harness.Observer, params: dict, ending: str, tag: str) -> dict:
    entrypoint, extra = ENDINGS[ending]
    obs.mark()
    run_id, asked = runs.start("ray_training", {**params, "entrypoint": entrypoint, "head_memory": "2Gi",
                                                 "worker_memory": "2Gi", **extra}, tag)
    cancelled = None
    if ending == "cancel":
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            c = next(iter(obs.clusters.values()), {})
            if c.get("job_start") and time.time() - c["job_start"] >= CANCEL_AFTER_S:
                break
            time.sleep(0.1)
        cancelled = time.time()
        runs.client.terminate_run(run_id)
    run = runs.wait(run_id)
    ended = time.time()
    time.sleep(1.0)  # the observer's last looks (quota back to 0)
    c = next(iter(obs.clusters.values()), {})
    reqs = runs.runner_requests(asked, ended)
    create, delete = harness.Pipelines.create_and_delete(reqs)
    end = cancelled if ending == "cancel" else c.get("job_end")
    seen = next((a["ts"] for a in reqs if end and a["ts"] >= end), None) if ending != "cancel" else None
    zero = obs.quota_zero_after(delete) if delete else None
    row = {"state": str(run.state), "job_status": c.get("job_status"),
           "to_delete_s": _d(end, delete), "to_quota_zero_s": _d(end, zero), "detection_s": _d(end, seen),
           "gone_after_delete_s": _d(delete, c.get("gone"))}
    row["api"] = cost(reqs, create, c.get("admitted"), c.get("ready"), delete)
    return row


def _d(a, b):
    return round(b - a, 3) if a is not None and b is not None else None


def cost(reqs: list[dict], create, admitted, ready, delete) -> dict:
    """The pipeline-runner's requests while the cluster lived, by phase and verb."""
    if None in (create, admitted, ready, delete):
        return {}
    phases = {"queued": (create, admitted), "starting": (admitted, ready), "running": (ready, delete)}
    out = {}
    for phase, (a, b) in phases.items():
        inside = [r for r in reqs if a <= r["ts"] < b]
        verbs: dict[str, int] = {}
        for r in inside:
            verbs[r["verb"]] = verbs.get(r["verb"], 0) + 1
        out[phase] = {"seconds": round(b - a, 2), "requests": len(inside), "verbs": verbs}
    life = [r for r in reqs if create <= r["ts"] <= delete]
    out["per_cluster_minute"] = round(len(life) / max((delete - create) / 60, 1e-9), 1)
    return out


def run(rounds: int = 2, endings=tuple(ENDINGS)) -> dict:
    from kfp_ray.pipelines.cli_args import pipeline_inputs
    from kfp_ray.pipelines.queue_default import with_default_queue
    from kfp_ray_sandbox.client import SandboxClient

    rows: dict[str, list] = {e: [] for e in endings}
    with harness.sandbox() as box:
        sbx = SandboxClient(box.info)
        runs = harness.Pipelines(box)
        params = with_default_queue({}, pipeline_inputs("ray_training"), box.info["namespace"], sbx.api_client())
        with harness.Observer(sbx, box.info["namespace"]) as obs:
            for i in range(rounds):
                for ending in (endings if i % 2 == 0 else tuple(reversed(endings))):
                    r = one(runs, obs, params, ending, f"{ending}-{i}")
                    rows[ending].append(r)
                    print(f"  release round {i + 1} {ending:8s} {r}", flush=True)
    result = summarize(rows, rounds)
    return {"result": result, "table": render(result)}


def summarize(rows: dict[str, list], rounds: int) -> dict:
    result: dict = {"rounds": rounds, "endings": {}}
    for e, rs in rows.items():
        api = [r["api"] for r in rs if r["api"]]
        result["endings"][e] = {
            "runs": rs,
            "to_delete_p50_s": harness.pct([r["to_delete_s"] for r in rs], 50),
            "to_delete_p95_s": harness.pct([r["to_delete_s"] for r in rs], 95),
            "to_quota_zero_p50_s": harness.pct([r["to_quota_zero_s"] for r in rs], 50),
            "to_quota_zero_p95_s": harness.pct([r["to_quota_zero_s"] for r in rs], 95),
            "detection_p95_s": harness.pct([r["detection_s"] for r in rs], 95),
            "api_per_cluster_minute": harness.median(a["per_cluster_minute"] for a in api),
            "api_by_phase": {p: {"requests": harness.median(a[p]["requests"] for a in api),
                                 "seconds": harness.median(a[p]["seconds"] for a in api)}
                             for p in ("queued", "starting", "running")} if api else {},
        }
    return result


def render(result: dict) -> str:
    e = result["endings"]
    lines = ["## Quota release, detection and API cost, by how the run ends", "",
             f"{result['rounds']} rounds of each (ray_training, head + 1 worker). Targets: job end → delete request "
             "≤ 2 s p95 in every ending; detection ≤ 1 s; ≤ 20 API requests per cluster-minute. Cancel counts "
             "from the terminate request. Success runs a 60 s job, the others end after about 10 s: API requests "
             "per cluster-minute count the cluster's whole life (create to delete), so the short ones are mostly "
             "its start (a GET a second while it starts, its pods every 5 s).", ""]
    rows = [[k, v["to_delete_p50_s"], v["to_delete_p95_s"], v["to_quota_zero_p50_s"], v["to_quota_zero_p95_s"],
             v["detection_p95_s"], v["api_per_cluster_minute"]] for k, v in e.items()]
    lines.append(harness.table(["ending", "→ delete p50 s", "→ delete p95 s", "→ quota 0 p50 s", "→ quota 0 p95 s",
                                "detection p95 s", "API req / cluster-min"], rows))
    lines += ["", "The pipeline-runner's requests while the cluster lived (median per run):", ""]
    rows = []
    for k, v in e.items():
        for p, d in (v["api_by_phase"] or {}).items():
            rows.append([k, p, d["seconds"], d["requests"]])
    lines.append(harness.table(["ending", "phase", "seconds", "requests"], rows))
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    out = run(int(sys.argv[1]) if len(sys.argv) > 1 else 1, tuple(sys.argv[2:]) or tuple(ENDINGS))
    print(out["table"])
    print(json.dumps(out["result"]))
