"""End to end on this machine: sandbox up, a Kueue-queued RayCluster through the real
CodeFlare SDK, a real Ray job on it, teardown, and a report of what happened.

    python -m kfp_ray_sandbox.demo
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time

from .client import SandboxClient
from .core import Sandbox, wait_until

ENTRYPOINT = ("python -c \"import ray, socket; ray.init(); "
              "print('cluster resources:', {k: v for k, v in ray.cluster_resources().items() if k in ('CPU', 'memory')}); "
              "print('nodes:', len(ray.nodes()))\"")


def step(msg: str) -> float:
    print(f"==> {msg}", flush=True)
    return time.monotonic()


def quiet(fn, *args, **kwargs):
    """Call a chatty CodeFlare SDK function, keeping its prints out of the report."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def main() -> int:
    timings = {}
    with tempfile.TemporaryDirectory(prefix="kfp-ray-demo-") as tmp:
        os.environ["CODEFLARE_TLS_DIR"] = os.path.join(tmp, "tls")  # keep the SDK's certs out of $HOME
        t = step("starting the sandbox (Kubernetes API, Kueue, KubeRay, S3)")
        with Sandbox(os.path.join(tmp, "state")) as box:
            timings["sandbox up"] = time.monotonic() - t
            info = box.info
            print(f"    API {info['api']}, S3 {info['s3_endpoint']}, namespace {info['namespace']}")
            from codeflare_sdk import Cluster, ClusterConfiguration, KubeConfigFileAuthentication

            quiet(KubeConfigFileAuthentication(kube_config_path=info["kubeconfig"]).load_kube_config)
            cfg = ClusterConfiguration(name="demo", namespace=info["namespace"], num_workers=1,
                                       local_queue=info["local_queue"], head_cpu_requests=1, head_cpu_limits=1,
                                       head_memory_requests=2, head_memory_limits=2, worker_cpu_requests=1,
                                       worker_cpu_limits=1, worker_memory_requests=2, worker_memory_limits=2)
            cluster = quiet(Cluster, cfg)
            t = step("applying RayCluster 'demo' with the CodeFlare SDK (queued in local-queue-test)")
            quiet(cluster.apply, timeout=60)
            client = SandboxClient(info)
            from kubernetes import client as k8s

            co = k8s.CustomObjectsApi(client.api_client())
            wl = wait_until(lambda: next(iter(co.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta1", info["namespace"], "workloads")["items"]), None), 30, "the Kueue Workload")
            admitted = wait_until(lambda: any(c["type"] == "Admitted" and c["status"] == "True" for c in (co.get_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta1", info["namespace"], "workloads", wl["metadata"]["name"]).get("status") or {}).get("conditions", [])),
                60, "Kueue admission")
            timings["queued"] = time.monotonic() - t
            print(f"    Kueue admitted Workload {wl['metadata']['name']}: {admitted}")
            t = step("waiting for the Ray head and worker pods (real `ray start` processes)")
            quiet(cluster.wait_ready, timeout=180)
            timings["starting"] = time.monotonic() - t
            print(f"    status: {cluster.status(print_to_console=False)[0].name}, dashboard {cluster.cluster_dashboard_uri()}")
            t = step("submitting a Ray job")
            jobs = cluster.job_client
            job_id = jobs.submit_job(entrypoint=ENTRYPOINT)
            status = wait_until(lambda: (s := jobs.get_job_status(job_id)).is_terminal() and s, 120, f"Ray job {job_id}")
            timings["job"] = time.monotonic() - t
            logs = jobs.get_job_logs(job_id)
            print(f"    job {job_id}: {status.value}")
            for line in logs.splitlines():
                if line.startswith(("cluster resources:", "nodes:")):
                    print(f"    | {line}")
            t = step("tearing the cluster down")
            quiet(cluster.down)
            wait_until(lambda: not client.processes(), 60, "the cluster's Ray processes to stop")
            usage = client.summary()["queue_usage"]
            timings["teardown"] = time.monotonic() - t
            print(f"    cluster queue usage after teardown: {usage}")
        print("==> sandbox stopped")
        print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
        ok = status.value == "SUCCEEDED" and all(v in ("0", "0Gi", 0) for v in usage.values())
        print("RESULT: " + ("OK" if ok else "FAILED"))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
