"""What the sandbox changes in its Ray image's processes (sandbox/imagehooks.py), seen in the
processes themselves: each head's Ray client servers on ports of its own, the dashboard
modules a head runs, and its Python daemons forked from one zygote (sandbox/rayzygote.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from kfp_ray_sandbox import imagehooks, rayimage, raynode
from kfp_ray_sandbox.reaper import pid_alive


def in_image(code: str, env: dict | None = None) -> str:
    """What `code` prints, run by the sandbox's Ray image's Python in a Ray process's environment
    (raynode.ray_env) plus `env` (a node's settings)."""
    return subprocess.run([rayimage.python(), "-c", code], env=raynode.ray_env(env), capture_output=True, text=True,
                          timeout=120, check=True).stdout


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
        out = in_image(probe, heads[0].env).split()
        assert [int(x) for x in out] == [low, high + 1]
        unset = in_image(probe).split()
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
        modules, titles = set(), []
        for pid in head.pids():
            try:
                title = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                continue
            if title.startswith("ray-dashboard-"):
                modules.add(title.split()[0].removeprefix("ray-dashboard-").rsplit("-", 1)[0])
                titles.append(title)
        assert modules == set(raynode.DASHBOARD_MODULES)
        # their forkserver is a fork of the dashboard before it ran (Ray titles each module "<name> (<argv>)")
        assert all("kfp_ray_sandbox_rayzygote" in t for t in titles), titles
        # started from a forkserver whose socket is in the node's temp dir (it goes with the node)
        assert imagehooks.NODE_ENV == raynode.NODE_ENV and list(head.temp_dir.glob("pymp-*/listener-*"))

        # The dashboard, Ray client server, log monitor and autoscaler monitor: forks of the zygote (its
        # command line), each `ray start`'s own child, writing its own logs, serving the ports Ray gave.
        start = psutil.Process(head.proc.pid)
        forked = [p for p in start.children() if "kfp_ray_sandbox_rayzygote" in " ".join(p.cmdline())]
        assert len(forked) == 5, [p.cmdline() for p in start.children()]  # the zygote and four daemons
        listening = {c.laddr.port: p.pid for p in forked for c in p.net_connections("tcp") if c.status == "LISTEN"}
        assert {listening.get(ports[k]) for k in ("dashboard-port", "ray-client-server-port")} <= {p.pid for p in forked}
        logs = head.temp_dir / "session_latest" / "logs"
        assert all((logs / f).stat().st_size > 0 for f in ("dashboard.log", "log_monitor.log", "monitor.log",
                                                           "ray_client_server.err"))
        pids = head.pids()
    finally:
        head.stop()
    assert not [p for p in pids if pid_alive(p)]  # SIGTERM to `ray start` stopped them all, zygote included


def test_the_zygote_takes_only_the_daemons_it_preloaded():
    from kfp_ray_sandbox import rayzygote

    py = sys.executable
    assert rayzygote.target([py, "-u", "/x/ray/_private/log_monitor.py", "--a=1"]) == {
        "path": "/x/ray/_private/log_monitor.py", "argv": ["--a=1"], "unbuffered": True}
    assert rayzygote.target([py, "-m", "ray.util.client.server", "--b"]) == {
        "module": "ray.util.client.server", "argv": ["--b"], "unbuffered": False}
    assert rayzygote.target([py, "/x/ray/dashboard/dashboard.py"])["path"].endswith("dashboard.py")
    # another script, another interpreter, interpreter options it does not model: Ray's own Popen
    assert rayzygote.target([py, "/x/ray/dashboard/agent.py"]) is None
    assert rayzygote.target(["/usr/bin/python3.9", "/x/ray/dashboard/dashboard.py"]) is None
    assert rayzygote.target([py, "-X", "dev", "/x/ray/dashboard/dashboard.py"]) is None


POLL_UNAVAILABLE_GCS = """
import asyncio, json, time
from ray._private import gcs_pubsub

async def main():
    sub = gcs_pubsub.GcsAioNodeInfoSubscriber(address="127.0.0.1:{port}")  # nothing listens there
    seconds = []
    for _ in range(3):
        start = time.monotonic()
        batch = await sub.poll(batch_size=10)
        seconds.append(time.monotonic() - start)
        assert not batch, batch
    print(json.dumps({{"seconds": seconds, "poll": gcs_pubsub._AioSubscriber._poll.__module__}}))

asyncio.run(main())
"""


def test_a_gcs_subscriber_that_finds_the_gcs_gone_pauses_before_it_polls_again(tmp_path):
    """NodeHead's loops poll again as soon as a poll returns; with the GCS gone (every head's deletion:
    Ray kills its GCS seconds before its dashboard) Ray's poll returns at once, and they spun a core."""
    code = POLL_UNAVAILABLE_GCS.format(port=raynode.free_port())
    on_node = json.loads(in_image(code, {raynode.NODE_ENV: str(tmp_path)}))
    assert on_node["poll"] == "kfp_ray_sandbox_imagehooks"
    assert all(s >= imagehooks.UNAVAILABLE_PAUSE_S for s in on_node["seconds"]), on_node
    elsewhere = json.loads(in_image(code))
    assert elsewhere["poll"] == "ray._private.gcs_pubsub"  # Ray's own outside a sandbox node


AGENT_MODULES = """
import json, sys
import ray.dashboard.utils as utils
found = [f"{c.__module__}.{c.__name__}" for c in utils.get_all_modules(utils.DashboardAgentModule)]
print(json.dumps({"found": found, "serve_imported": "ray.dashboard.modules.serve" in sys.modules}))
"""


def test_a_nodes_dashboard_agent_loads_rays_agent_modules_without_importing_every_dashboard_module(tmp_path):
    on_node = json.loads(in_image(AGENT_MODULES, {raynode.NODE_ENV: str(tmp_path)}))
    rays = json.loads(in_image(AGENT_MODULES))
    assert rays["serve_imported"] and not on_node["serve_imported"]  # Ray's walk imports the head's modules too
    assert on_node["found"] == rays["found"] and len(rays["found"]) == 7, (on_node, rays)
