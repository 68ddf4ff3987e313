"""`kfp-ray-sandbox up|status|down` as a user runs them, and that `down` leaves nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client as k8s

from kfp_ray_sandbox.client import SandboxClient
from kfp_ray_sandbox.raynode import pid_alive
from tests.helpers import eventually, raycluster

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[2]


def cli(*args, state_dir):
    return subprocess.run([sys.executable, "-m", "kfp_ray_sandbox", *args, "--state-dir", str(state_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=150)


def port_open(url: str) -> bool:
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def test_up_status_down_leaves_no_process_port_or_dir(tmp_path):
    state = tmp_path / "sb"
    up = cli("up", "--json", "--platform", "rhoai-2.25", state_dir=state)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    assert {"api", "kubeconfig", "s3_endpoint", "namespace"} <= info.keys()
    assert info["platform"] == "rhoai-2.25"
    assert oct(os.stat(info["kubeconfig"]).st_mode & 0o777) == "0o600"
    try:
        again = cli("up", state_dir=state)
        assert again.returncode == 0 and "already up" in again.stdout and "platform:   rhoai-2.25" in again.stdout
        other = cli("up", "--platform", "rhoai-3.3", state_dir=state)  # not silently the other release
        assert other.returncode == 2 and "playing rhoai-2.25 is already up" in other.stderr
        human = cli("status", state_dir=state)
        assert human.returncode == 0 and info["api"] in human.stdout
        # a real Ray head, so that `down` has processes to stop
        client = SandboxClient(info)
        k8s.CustomObjectsApi(client.api_client()).create_namespaced_custom_object(
            "ray.io", "v1", "sandbox", "rayclusters", raycluster("cli-demo", workers=0, memory="1Gi"))
        procs = eventually(lambda: client.processes(), 60, what="the head's Ray processes")
        pids = [p for proc in procs for p in proc["pids"]]
        temp_dirs = [proc["temp_dir"] for proc in procs]
        status = json.loads(cli("status", "--json", state_dir=state).stdout)
        assert status["running"] and status["rayclusters"][0]["name"] == "cli-demo"
    finally:
        down = cli("down", state_dir=state)
    assert down.returncode == 0 and "sandbox down" in down.stdout
    assert not pid_alive(info["pid"])
    assert [p for p in pids if pid_alive(p)] == []
    assert [d for d in temp_dirs if os.path.exists(d)] == []
    assert not port_open(info["api"]) and not port_open(info["s3_endpoint"])
    assert not state.exists()
    assert cli("status", state_dir=state).returncode == 1


def test_in_process_sandbox_teardown_leaves_nothing(tmp_path):
    """What the test fixtures use: Sandbox.stop() ends every Ray process, port and temp dir."""
    from kfp_ray_sandbox import Sandbox

    box = Sandbox()  # its own temp state dir
    info = box.start()
    try:
        client = SandboxClient(info)
        k8s.CustomObjectsApi(client.api_client()).create_namespaced_custom_object(
            "ray.io", "v1", "sandbox", "rayclusters", raycluster("fixture-demo", workers=0, memory="1Gi"))
        procs = eventually(lambda: client.processes(), 60, what="the head's Ray processes")
    finally:
        box.stop()
    assert [p for proc in procs for p in proc["pids"] if pid_alive(p)] == []
    assert [proc["temp_dir"] for proc in procs if os.path.exists(proc["temp_dir"])] == []
    assert not port_open(info["api"]) and not port_open(info["s3_endpoint"])
    assert not os.path.exists(info["state_dir"])
