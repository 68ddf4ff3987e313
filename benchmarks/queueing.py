"""Queueing under load: 6 runs started at once on a ClusterQueue whose quota fits 2 clusters.

A ClusterQueue of its own (bench-queue, its LocalQueue `bench`) is made for it. One run alone
on it first measures a cluster's CPU and the single run's wall time (the baseline, same run);
the queue's CPU quota is then set to exactly two clusters, and 6 runs of the same pipeline
(compiled/ray_training.yaml, a 30 s job) start together. Reported: the makespan (first start
to last end) against the ideal ceil(6/2) x one run, the most Workloads ever admitted at once
(never over quota), and each run's queued seconds (provision's output)."""

from __future__ import annotations

import math
import time

from . import harness

RUNS, FITS = 6, 2
JOB = "python -c 'import time; time.sleep(30)'"
PARAMS = {"entrypoint": JOB, "local_queue": "bench", "head_memory": "2Gi", "worker_memory": "2Gi"}


def queue(api, ns: str, cpu: str) -> None:
    """bench-queue with `cpu` CPUs (memory and pods plenty: CPU is what binds), and its LocalQueue."""
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "bench-queue"},
          "spec": {"namespaceSelector": {}, "resourceGroups": [{
              "coveredResources": ["cpu", "memory", "pods", "nvidia.com/gpu"],
              "flavors": [{"name": "default-flavor", "resources": [
                  {"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "64Gi"},
                  {"name": "pods", "nominalQuota": 40}, {"name": "nvidia.com/gpu", "nominalQuota": 0}]}]}]}}
    try:
        current = api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "bench-queue")
        cq["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        api.replace_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "bench-queue", cq)
    except Exception as exc:  # noqa: BLE001 - not there yet
        if getattr(exc, "status", None) != 404:
            raise
        api.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", cq)
        api.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": "bench", "namespace": ns}, "spec": {"clusterQueue": "bench-queue"}})


def run(rounds: int = 1) -> dict:
    from kubernetes import client

    from kfp_ray_sandbox.client import SandboxClient

    result: dict = {"runs": RUNS, "fits": FITS, "rounds": []}
    with harness.sandbox() as box:
        sbx = SandboxClient(box.info)
        ns = box.info["namespace"]
        api = client.CustomObjectsApi(sbx.api_client())
        queue(api, ns, "100")
        runs = harness.Pipelines(box)
        with harness.Observer(sbx, ns, queue="bench-queue") as obs:
            for r in range(rounds):
                obs.mark()
                run_id, asked = runs.start("ray_training", PARAMS, f"queue-alone-{r}")
                alone = runs.wait(run_id)
                single = time.time() - asked
                per_cluster = max(cpu for _, cpu in obs.usage)
                print(f"  queueing round {r + 1}: one run alone {single:.1f}s ({alone.state}), a cluster {per_cluster:g} CPU",
                      flush=True)
                # two at once on free quota: what one wave costs on this machine (they share its CPUs)
                obs.mark()
                pair = [runs.start("ray_training", PARAMS, f"queue-pair-{r}-{i}") for i in range(FITS)]
                for run_id, _ in pair:
                    runs.wait(run_id)
                wave = time.time() - pair[0][1]
                print(f"  queueing round {r + 1}: {FITS} runs at once, free quota: {wave:.1f}s", flush=True)
                queue(api, ns, f"{per_cluster * FITS:g}")
                time.sleep(0.5)
                obs.mark()
                started = [runs.start("ray_training", PARAMS, f"queue-{r}-{i}") for i in range(RUNS)]
                ends = [runs.wait(run_id, timeout=1800) for run_id, _ in started]
                makespan = time.time() - started[0][1]
                over = [cpu for _, cpu in obs.usage if cpu > per_cluster * FITS]
                queued = [float(runs.outputs(run_id, "ray_training").get("provision-ray-cluster", {})
                                .get("queued_seconds", "nan")) for run_id, _ in started]
                ideal = math.ceil(RUNS / FITS) * single
                t0 = started[0][1]
                timeline = {name: {k: round(v - t0, 1) for k, v in c.items() if isinstance(v, float) and k != "first_seen"}
                            for name, c in sorted(obs.clusters.items(), key=lambda kv: kv[1].get("admitted", 1e18))}
                run_ends = [round(harness.ts(e.finished_at) - t0, 1) if e.finished_at else None for e in ends]
                queued_rate = queued_requests(runs.runner_requests(t0, time.time()), obs.clusters)
                loaded = math.ceil(RUNS / FITS) * wave
                row = {"single_s": round(single, 1), "makespan_s": round(makespan, 1), "ideal_s": round(ideal, 1),
                       "ratio": round(makespan / ideal, 3), "wave_s": round(wave, 1), "ideal_loaded_s": round(loaded, 1),
                       "ratio_loaded": round(makespan / loaded, 3), "peak_admitted": obs.peak_admitted,
                       "over_quota_samples": len(over), "states": [str(e.state) for e in ends],
                       "queued_s": [round(q, 1) for q in queued], "run_ends_s": run_ends, "clusters": timeline,
                       "queued_requests_per_minute": queued_rate}
                result["rounds"].append(row)
                print(f"  queueing round {r + 1}: {row}", flush=True)
                queue(api, ns, "100")
    return {"result": result, "table": render(result)}


def queued_requests(requests: list[dict], clusters: dict) -> float | None:
    """The pipeline-runner's requests about a cluster (its name in the path or the query) while
    it was queued, per minute queued, over the clusters that waited at least 20 s."""
    count, minutes = 0, 0.0
    for name, c in clusters.items():
        a, b = c.get("created"), c.get("admitted")
        if a is None or b is None or b - a < 20:
            continue
        count += sum(1 for r in requests if a <= r["ts"] < b and (name in r["path"] or name in (r.get("query") or "")))
        minutes += (b - a) / 60
    return round(count / minutes, 1) if minutes else None


def render(result: dict) -> str:
    rows = [[i + 1, r["single_s"], r["ideal_s"], r["makespan_s"], r["ratio"], r["wave_s"], r["ratio_loaded"],
             r["peak_admitted"],
             "yes" if r["over_quota_samples"] else "no", r["queued_requests_per_minute"],
             ", ".join(f"{q:g}" for q in r["queued_s"]),
             ", ".join(sorted(set(r["states"])))] for i, r in enumerate(result["rounds"])]
    return ("## Queueing: 6 runs at once on a quota that fits 2 clusters\n\n"
            "ray_training with a 30 s job; the ideal is ceil(6/2) x one run alone (measured first, same sandbox). "
            "Target: makespan ≤ 1.15 x ideal, never over quota. The machine's own share: `2 at once` is two runs "
            "started together on free quota (one wave, sharing the CPUs), and the last ratio is the makespan over "
            "ceil(6/2) x that.\n\n"
            + harness.table(["round", "one run s", "ideal s", "makespan s", "ratio", "2 at once s", "ratio to 3 waves",
                             "peak admitted", "over quota", "API req / queued min", "queued s (each run)",
                             "states"], rows))


if __name__ == "__main__":
    import json
    import sys

    out = run(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(out["table"])
    print(json.dumps(out["result"]))
