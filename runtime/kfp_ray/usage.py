"""What a run cost: its usage ledger, from Kueue's record of what it admitted and the run's
own record of how long each phase lasted.

- What was admitted: the Workload's status.admission.podSetAssignments[].resourceUsage, summed
  over its pod sets (Kueue v0.11.6 / v0.12.10, apis/kueue/v1beta1/workload_types.go: "the
  total resources all the pods in the podset need to run", sidecars, init containers and
  LimitRange defaults included, as the quota counts them). Read once the cluster is admitted
  and running (readiness.py), where the service account may list Workloads
  (deploy/rbac-kfp-ray.yaml; `doctor` checks it). Without it, KubeRay's record stands in: the
  RayCluster's pod sets (replicas x the containers' requests), summed as Kueue sums them
  from the same templates, and the ledger says which it used.
- How long it was held: Kueue holds the quota from admission (the Workload's Admitted
  condition) until the cluster's pods are gone (follow_ray_job or run_ray_job sees the
  quota free once the job is over), less the time a preemption had it back in the queue
  (from the preemption until the job runs again: the restart's pod start is left out).
  Queued seconds and seconds lost to preemption are reported beside the hours, not in them.

The ledger is published as KFP metrics, in the report, as usage.json next to the run's
results and as kfp-ray/usage/<YYYY-MM>/<run id>.json in the same bucket, where
`kfp-ray runs usage` sums a project's runs."""

from __future__ import annotations

GIB = 2**30
GPU = "nvidia.com/gpu"
LEDGER_PREFIX = "kfp-ray/usage"  # in the data connection's bucket: one object per run


def admitted(record: dict | None) -> dict:
    """What Kueue admitted, from a Workload's record (readiness.admission: its name and
    status): {"resources": {name: amount}, "admitted_at": its Admitted condition's time (else
    when the wait saw the admission), "source": ...}; {} without one."""
    from datetime import UTC, datetime

    from .validate import quantity

    record = record or {}
    total: dict = {}
    for psa in (record.get("admission") or {}).get("podSetAssignments") or []:
        for name, q in (psa.get("resourceUsage") or {}).items():
            total[name] = total.get(name, 0) + quantity(q)
    for replicas, containers in record.get("cluster") or []:  # the RayCluster's pod sets, as Kueue sums them
        for requests in containers:
            for name, q in requests.items():
                total[name] = total.get(name, 0) + int(replicas or 0) * quantity(q)
    total = {k: v for k, v in total.items() if v}
    if not total:
        return {}
    seen = datetime.fromtimestamp(record["seen"], UTC).isoformat(timespec="milliseconds") if record.get("seen") else ""
    if "cluster" in record:
        return {"resources": {k: float(v) for k, v in sorted(total.items())}, "admitted_at": seen,
                "source": "the RayCluster's pod requests (Kueue's Workload is not readable here: deploy/rbac-kfp-ray.yaml "
                          "lets pipeline-runner read it)"}
    at = next((c.get("lastTransitionTime", "") for c in record.get("conditions") or []
               if c.get("type") == "Admitted" and c.get("status") == "True"), seen)
    return {"resources": {k: float(v) for k, v in sorted(total.items())}, "admitted_at": at,
            "source": f"Kueue Workload {record.get('name', '')}"}


def _seconds_between(start: str, end: str) -> float | None:
    from datetime import datetime

    try:
        return (datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
                ).total_seconds()
    except (ValueError, AttributeError, TypeError):
        return None


def ledger(record: dict, *, queued: float, starting: float, running: float, teardown: float, released_at: str = "",
           preempted: float = 0.0, requeued: float = 0.0, run_id: str = "", pipeline: str = "", namespace: str = "",
           lifecycle: str = "", finished_at: str = "") -> dict:
    """The run's ledger, from Kueue's `record` (readiness.admission). The quota was held from
    Kueue's admission (its Workload's Admitted time) until `released_at` (the cluster gone:
    follow's or run_ray_job's clock), less `requeued`, the seconds preemptions had it back in
    the queue; where either end is unknown, the phases stand in (starting + running +
    teardown, which leave out the hand-off between tasks). `preempted`: all the seconds
    preemptions cost (work lost included), reported, not summed."""
    admission = admitted(record)
    res = admission.get("resources") or {}
    span = _seconds_between(admission.get("admitted_at", ""), released_at) if released_at else None
    measured = span is not None and span >= 0
    held = max(0.0, (span if measured else starting + running + teardown) - requeued)
    hours = held / 3600

    def amount(name: str, unit: float = 1) -> float:
        return float(res.get(name, 0)) / unit

    return {"run_id": run_id, "pipeline": pipeline, "namespace": namespace, "lifecycle": lifecycle,
            "finished_at": finished_at, "admitted": {"cpu": amount("cpu"), "memory_gib": round(amount("memory", GIB), 4),
                                                      "gpu": amount(GPU)},
            "admitted_source": admission.get("source") or "unknown: Kueue's Workload was not readable (no hours counted)",
            "admitted_at": admission.get("admitted_at", ""), "released_at": released_at,
            "held_from": "Kueue's admission to the quota's release" if measured else "the phases' lengths",
            "seconds": {"queued": round(queued, 2), "starting": round(starting, 2), "running": round(running, 2),
                        "teardown": round(teardown, 2), "held": round(held, 2), "lost_to_preemption": round(preempted, 2)},
            "cpu_hours": round(amount("cpu") * hours, 6), "gpu_hours": round(amount(GPU) * hours, 6),
            "memory_gib_hours": round(amount("memory", GIB) * hours, 6)}


def ledger_metrics(entry: dict) -> dict[str, float]:
    """The ledger's KFP metrics."""
    s = entry["seconds"]
    return {"cpu_hours": entry["cpu_hours"], "gpu_hours": entry["gpu_hours"], "memory_gib_hours": entry["memory_gib_hours"],
            "queued_seconds": s["queued"], "starting_seconds": s["starting"], "running_seconds": s["running"],
            "quota_held_seconds": s["held"]}


def requeued_seconds(times: list) -> float:
    """Seconds between each preemption and the run running again (Preemptions.times, UTC ISO)."""
    return sum(max(0.0, _seconds_between(a, b) or 0.0) for a, b in (p for p in times or [] if len(p) == 2 and p[0] and p[1]))


def ledger_key(entry: dict) -> str:
    """The ledger's key in the bucket, by the month it finished in."""
    return f"{LEDGER_PREFIX}/{entry['finished_at'][:7]}/{entry['run_id']}.json"


def summarize(entries: list[dict], by: str = "pipeline") -> list[dict]:
    """Sums per `by` (a ledger field: pipeline, namespace, lifecycle), largest CPU-hours first."""
    rows: dict = {}
    for e in entries:
        row = rows.setdefault(e.get(by) or "(unknown)", {by: e.get(by) or "(unknown)", "runs": 0, "cpu_hours": 0.0,
                                                           "gpu_hours": 0.0, "memory_gib_hours": 0.0,
                                                           "queued_seconds": 0.0, "lost_to_preemption_seconds": 0.0})
        row["runs"] += 1
        for k in ("cpu_hours", "gpu_hours", "memory_gib_hours"):
            row[k] += e.get(k, 0.0)
        row["queued_seconds"] += e["seconds"]["queued"]
        row["lost_to_preemption_seconds"] += e["seconds"]["lost_to_preemption"]
    return sorted(rows.values(), key=lambda r: (-r["cpu_hours"], str(r[by])))


def report_rows(entry: dict) -> dict[str, str]:
    """The report's Usage table: what was admitted, for how long, what it came to."""
    a, s = entry["admitted"], entry["seconds"]
    gpus = f", {a['gpu']:g} GPU" if a["gpu"] else ""
    rows = {"admitted": f"{a['cpu']:g} CPU, {a['memory_gib']:g} GiB{gpus} ({entry['admitted_source']})",
            "quota held": f"{s['held']:.1f} s (from {entry.get('held_from', 'the phases')})",
            "CPU-hours": f"{entry['cpu_hours']:.4f}", "memory GiB-hours": f"{entry['memory_gib_hours']:.4f}"}
    if a["gpu"]:
        rows["GPU-hours"] = f"{entry['gpu_hours']:.4f}"
    rows["queued"] = f"{s['queued']:.1f} s"
    if s["lost_to_preemption"]:
        rows["lost to preemption"] = f"{s['lost_to_preemption']:.1f} s"
    return rows


def publish(entry: dict, output_uri: str) -> str:
    """Write the ledger as usage.json under output_uri and under LEDGER_PREFIX in the same
    bucket (`runs usage` lists those); returns usage.json's URI. A failed write is logged, not
    raised: the run's results stand without it."""
    import json

    from . import s3
    from .wait import first_line, log, retry

    bucket, prefix = s3.split(output_uri)
    body = json.dumps(entry, indent=2, sort_keys=True).encode()
    key = f"{prefix.rstrip('/')}/usage.json".lstrip("/")
    try:
        client = s3.client()
        for k in (key, ledger_key(entry)):
            retry(lambda k=k: client.put_object(Bucket=bucket, Key=k, Body=body, ContentType="application/json"),
                  f"write s3://{bucket}/{k}")
    except Exception as exc:  # noqa: BLE001 - the ledger is a record, not the run's outcome
        log(f"could not write the usage ledger to s3://{bucket}/{key} ({type(exc).__name__}: {first_line(exc)})")
        return ""
    return f"s3://{bucket}/{key}"


def markdown(entry: dict, ledger_uri: str) -> str:
    """The Markdown report's Usage section."""
    rows = "".join(f"| {k} | {v} |\n" for k, v in report_rows(entry).items())
    where = f"\nLedger: `{ledger_uri}`\n" if ledger_uri else ""
    return f"\n## Usage\n\n| what | amount |\n| --- | --- |\n{rows}{where}"
