"""Orchestration overhead (issue 13, first part): the xgboost_tune job by hand against the
same job through the xgboost_tune pipeline, on one sandbox, rounds alternating.

- by hand: stage the same data to S3, `ray start --head` with the CPUs the pipeline's cluster
  has (head 1 + worker 2), submit pipelines/jobs/xgboost_tune.py through the Ray Job API with
  the same runtime_env, wait for it, stop the node;
- pipeline: the compiled YAML through the sandbox's Data Science Pipelines server, as
  `kfp-ray run xgboost_tune --local` does it (upload, kfp.Client run, follow), timed from the
  run's creation to its end, plus the span from the first task pod's start to the last one's end.

Prints each round, the medians and the ratios, and one JSON line.

    .venv/bin/python benchmarks/overhead.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ENTRYPOINT = "python xgboost_tune.py --samples 6 --concurrent 3 --rounds 60"


def by_hand(box, sbx, tag: str) -> dict:
    from kfp_ray import datasets
    from kfp_ray.jobs import RayJobsClient, read_requirements
    from kfp_ray_sandbox.controllers.kubelet import HEAD_PORT_FLAGS
    from kfp_ray_sandbox.raynode import RayNode, free_port

    started = time.monotonic()
    env = sbx.data_connection()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        prefix = f"s3://{box.info['s3_bucket']}/bench/{tag}"
        datasets.stage("breast_cancer", prefix + "/data")
        staged = time.monotonic()
        ip = box.network.allocate()  # an address of its own, as a pod's (Ray maps 127.0.0.1 elsewhere)
        node = RayNode(f"hand-{tag}", ip, head=True, num_cpus=3, num_gpus=0, memory=4 * 2**30,
                       root=box.state_dir / "bench", ports={flag: free_port() for flag in HEAD_PORT_FLAGS})
        node.start()
        try:
            while not node.ready():
                time.sleep(0.25)
            ready = time.monotonic()
            jobs = RayJobsClient(node.dashboard_url)
            pip = read_requirements("requirements/xgboost_tune.txt", "jobs", str(ROOT / "pipelines"))
            runtime_env = {"working_dir": jobs.upload_dir(ROOT / "pipelines" / "jobs"), "pip": pip,
                           "env_vars": {**env, "KFP_RAY_DATA": prefix + "/data", "KFP_RAY_OUTPUT": prefix}}
            job_id, _ = jobs.submit(ENTRYPOINT, f"bench-{tag}", runtime_env, {})
            while jobs.info(job_id)["status"] not in ("SUCCEEDED", "FAILED", "STOPPED"):
                time.sleep(0.25)
            status = jobs.info(job_id)["status"]
            ended = time.monotonic()
        finally:
            node.stop(grace=5)
            box.network.release(ip)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"status": status, "wall": round(time.monotonic() - started, 1), "stage": round(staged - started, 1),
            "head_start": round(ready - staged, 1), "job": round(ended - ready, 1)}


def pipeline(box, sbx, tag: str) -> dict:
    from kfp_ray import kube, postmortem
    from kfp_ray.pipelines import registry, run_local

    args = argparse.Namespace(name="xgboost_tune", keep_outputs=None, verbose=False, timeout=900)
    started = time.monotonic()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_local._run(args, box, registry.compiled_path("xgboost_tune"), {}, started)
    wall = time.monotonic() - started
    run_id = next(li.split()[2].rstrip(":") for li in out.getvalue().splitlines() if li.startswith("==> run "))
    os.environ["KUBECONFIG"] = box.info["kubeconfig"]
    kube.api_client.cache_clear()
    pods = postmortem.task_pods(run_id, box.info["namespace"])
    spans = {p.task: round((p.finished - p.started).total_seconds(), 1) for p in pods if p.started and p.finished}
    first = min(p.started for p in pods if p.started)
    last = max(p.finished for p in pods if p.finished)
    return {"status": "SUCCEEDED" if code == 0 else "FAILED", "wall": round(wall, 1),
            "task_span": round((last - first).total_seconds(), 1), "tasks": spans}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from kfp_ray_sandbox import Sandbox
    from kfp_ray_sandbox.client import SandboxClient
    from kfp_ray_sandbox.reaper import owned_tempdir, sigterm_as_interrupt

    rows = {"hand": [], "pipeline": []}
    with sigterm_as_interrupt(), Sandbox() as box, owned_tempdir(box.watchdog):
        sbx = SandboxClient(box.info)
        for i in range(args.rounds):
            for kind in (("hand", "pipeline") if i % 2 == 0 else ("pipeline", "hand")):
                r = by_hand(box, sbx, f"r{i}") if kind == "hand" else pipeline(box, sbx, f"r{i}")
                rows[kind].append(r)
                print(f"round {i + 1} {kind:8s} {json.dumps(r)}", flush=True)
    hand = statistics.median(r["wall"] for r in rows["hand"])
    pipe = statistics.median(r["wall"] for r in rows["pipeline"])
    span = statistics.median(r["task_span"] for r in rows["pipeline"])
    print(f"\nxgboost_tune job: by hand {hand:.1f}s, pipeline {pipe:.1f}s wall ({pipe / hand:.2f}x), "
          f"{span:.1f}s task span ({span / hand:.2f}x); overhead {pipe - hand:.1f}s")
    print(json.dumps({"benchmark": "overhead", "hand_s": hand, "pipeline_s": pipe, "task_span_s": span,
                      "ratio_wall": round(pipe / hand, 3), "ratio_span": round(span / hand, 3), "rounds": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
