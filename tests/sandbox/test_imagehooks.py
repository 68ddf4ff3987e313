"""What the sandbox changes in its Ray image's processes (sandbox/imagehooks.py), seen in the
processes themselves: each head's Ray client servers on ports of its own, and the dashboard
modules a head runs."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from kfp_ray_sandbox import imagehooks, rayimage, raynode


def test_each_head_gets_its_own_block_of_ray_client_server_ports(tmp_path):
    """In a pod, the proxy's 127.0.0.1:23000-23999 are the head's alone; here two heads' client
    servers on one port would both bind it (gRPC's SO_REUSEPORT) and serve each other's clients."""
    heads = [raynode.RayNode(f"h{i}", "127.0.0.1", head=True, num_cpus=1, num_gpus=0, memory=10**8, root=tmp_path)
             for i in range(2)]
    worker = raynode.RayNode("w", "127.0.0.1", head=False, num_cpus=1, num_gpus=0, memory=10**8, root=tmp_path,
                             gcs_address="127.0.0.1:1")
    try:
        blocks = [h.env[imagehooks.PORTS_ENV] for h in heads]
        assert blocks[0] != blocks[1] and imagehooks.PORTS_ENV not in worker.env
        low, high = (int(x) for x in blocks[0].split("-"))
        assert raynode.CLIENT_SERVER_PORTS.start <= low < high < raynode.CLIENT_SERVER_PORTS.stop
        # the head's proxy, in the sandbox's Ray image, draws from that block (Ray's module as it runs)
        probe = ("import ray.util.client.server.proxier as p; "
                 "print(p.MIN_SPECIFIC_SERVER_PORT, p.MAX_SPECIFIC_SERVER_PORT)")
        out = subprocess.run([rayimage.python(), "-c", probe], env=raynode.ray_env(heads[0].env),
                             capture_output=True, text=True, timeout=120, check=True).stdout.split()
        assert [int(x) for x in out] == [low, high + 1]
        unset = subprocess.run([rayimage.python(), "-c", probe], env=raynode.ray_env(),
                               capture_output=True, text=True, timeout=120, check=True).stdout.split()
        assert unset == ["23000", "24000"]  # Ray's own range where the sandbox sets none
    finally:
        for node in [*heads, worker]:
            node.stop()


@pytest.mark.ray
def test_a_head_runs_the_dashboard_modules_the_platform_uses_and_its_job_api_works(tmp_path):
    from ray.job_submission import JobSubmissionClient

    ports = {k: raynode.free_port() for k in ("port", "dashboard-port", "ray-client-server-port")}
    head = raynode.RayNode("h", "127.0.0.1", head=True, num_cpus=1, num_gpus=0, memory=10**9, root=tmp_path, ports=ports)
    try:
        head.start()
        deadline = time.monotonic() + 120
        while not head.ready():  # /api/gcs_healthz: ReportHead
            assert time.monotonic() < deadline, head.log_tail()
            time.sleep(0.5)
        client = JobSubmissionClient(head.dashboard_url)
        job = client.submit_job(entrypoint="python -c 'print(6 * 7)'")  # needs JobHead, and NodeHead's head node id
        while client.get_job_status(job) not in ("SUCCEEDED", "FAILED", "STOPPED"):
            assert time.monotonic() < deadline, client.get_job_logs(job)
            time.sleep(0.5)
        assert client.get_job_status(job) == "SUCCEEDED" and "42" in client.get_job_logs(job)
        modules = set()
        for pid in head.pids():
            try:
                title = psutil.Process(pid).cmdline()[0]
            except (psutil.Error, IndexError):
                continue
            if title.startswith("ray-dashboard-"):
                modules.add(title.split()[0].removeprefix("ray-dashboard-").rsplit("-", 1)[0])
        assert modules == set(raynode.DASHBOARD_MODULES)
        # started from a forkserver whose socket is in the node's temp dir (it goes with the node)
        assert imagehooks.NODE_ENV == raynode.NODE_ENV and list(head.temp_dir.glob("pymp-*/listener-*"))
    finally:
        head.stop()
