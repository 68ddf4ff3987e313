"""`kfp-ray-sandbox up|down|status` — the local OpenShift AI cluster, run in the background.

    kfp-ray-sandbox up [--json] [--platform rhoai-3.3|rhoai-2.25]
                                    start it; returns once ready, prints kubeconfig, API, S3
    kfp-ray-sandbox status [--json] what is running (RayClusters, queue usage)
    kfp-ray-sandbox down            stop it and every Ray process it started

State lives in --state-dir (default $KFP_RAY_SANDBOX_DIR, else /tmp/kfp-ray-sandbox-<uid>).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .core import INFO_FILE
from .platforms import DEFAULT_PLATFORM, PLATFORMS
from .reaper import pid_alive, sigterm_as_interrupt, wait_interruptibly

UP_TIMEOUT = 60.0
DOWN_TIMEOUT = 90.0


def default_state_dir() -> Path:
    return Path(os.environ.get("KFP_RAY_SANDBOX_DIR") or f"/tmp/kfp-ray-sandbox-{os.getuid()}")


def read_info(state_dir: Path) -> dict | None:
    try:
        info = json.loads((state_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info if pid_alive(info.get("pid", -1)) else None


def _print_info(info: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(info))
        return
    print(f"kubeconfig: {info['kubeconfig']}")
    print(f"kubeconfig (pipeline-runner): {info['kubeconfig_pipeline_runner']}")
    print(f"API:        {info['api']}")
    print(f"pipelines:  {info['pipelines_api']} (the DSPA route: KFP v2beta1 behind {info.get('pipelines_proxy', 'oauth-proxy')}; the kubeconfig's token)")
    print(f"S3:         {info['s3_endpoint']} (bucket {info['s3_bucket']}, data connection secret {info['data_connection']})")
    print(f"namespace:  {info['namespace']}  local queue: {info['local_queue']}")
    print(f"platform:   {info.get('platform')} (kfp-ray-sandbox up --platform; sandbox/platforms.py)")
    print(f"audit log:  {info['audit_log']}")


def up(state_dir: Path, as_json: bool, platform: str | None = None) -> int:
    info = read_info(state_dir)
    if info:
        if platform and info.get("platform") != platform:
            print(f"a sandbox playing {info.get('platform')} is already up (pid {info['pid']}) in {state_dir}: "
                  f"`kfp-ray-sandbox down` first, or give another --state-dir", file=sys.stderr)
            return 2
        if not as_json:
            print(f"sandbox already up (pid {info['pid']})")
        _print_info(info, as_json)
        return 0
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    log = open(state_dir / "sandbox.log", "ab")
    argv = ["--platform", platform] if platform else []
    proc = subprocess.Popen([sys.executable, "-m", "kfp_ray_sandbox", "serve", "--state-dir", str(state_dir), *argv],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + UP_TIMEOUT
    try:
        with sigterm_as_interrupt():
            while time.monotonic() < deadline:
                info = read_info(state_dir)
                if info and info["pid"] == proc.pid:
                    _print_info(info, as_json)
                    return 0
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
    except KeyboardInterrupt:  # the user cancelled the start: the server goes too (it stops its Ray)
        proc.terminate()
        proc.wait(timeout=DOWN_TIMEOUT)
        print("sandbox start cancelled", file=sys.stderr)
        return 130
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    tail = (state_dir / "sandbox.log").read_text(errors="replace")[-3000:]
    print(f"sandbox failed to start within {UP_TIMEOUT:.0f}s; its log ({state_dir / 'sandbox.log'}):\n{tail}",
          file=sys.stderr)
    return 1


def down(state_dir: Path) -> int:
    from .raynode import kill_recorded

    try:
        info = json.loads((state_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        info = None
    pid = (info or {}).get("pid")
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            print(f"sandbox (pid {pid}) did not stop within {DOWN_TIMEOUT:.0f}s; killing it", file=sys.stderr)
            os.killpg(pid, signal.SIGKILL)
    leftovers = kill_recorded(state_dir / "pods") if state_dir.exists() else 0
    if leftovers:
        print(f"killed {leftovers} Ray node(s) left behind", file=sys.stderr)
    existed = state_dir.exists()
    shutil.rmtree(state_dir, ignore_errors=True)
    print("sandbox down" if (pid or existed) else "sandbox was not running")
    return 0


def status(state_dir: Path, as_json: bool) -> int:
    info = read_info(state_dir)
    if not info:
        print(json.dumps({"running": False}) if as_json else "sandbox is not running")
        return 1
    from .client import SandboxClient

    summary = SandboxClient(info).summary()
    if as_json:
        print(json.dumps({"running": True, **info, **summary}))
        return 0
    _print_info(info, False)
    print(f"cluster queue usage: {summary['queue_usage']}  pending workloads: {summary['pending_workloads']}")
    for rc in summary["rayclusters"]:
        print(f"  raycluster {rc['name']}: {rc['state'] or 'starting'}  workers {rc['ready_workers']}/{rc['workers']}")
    return 0


def serve(state_dir: Path, platform: str | None = None) -> int:
    """Run the sandbox in this process until SIGTERM/SIGINT (what `up` starts). However this
    process ends, its watchdog leaves no Ray process, temp dir, sandbox.json or kubeconfig;
    the logs stay for `down` (or the next `up`) to remove."""
    import logging

    from .core import Sandbox

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    box = Sandbox(state_dir, platform=platform)
    try:
        box.start()
        print(f"sandbox up: {box.info['api']}", flush=True)
        wait_interruptibly(stop)
    finally:
        box.stop()
        print("sandbox stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kfp-ray-sandbox", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "status", "serve"])
    parser.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    parser.add_argument("--state-dir", type=Path, default=None, help="where the sandbox keeps its state")
    parser.add_argument("--platform", choices=sorted(PLATFORMS), default=None,
                        help=f"the OpenShift AI release to play (default {DEFAULT_PLATFORM}; `up` only)")
    args = parser.parse_args(argv)
    state_dir = (args.state_dir or default_state_dir()).resolve()
    if args.command == "up":
        return up(state_dir, args.json, args.platform)
    if args.command == "down":
        return down(state_dir)
    if args.command == "status":
        return status(state_dir, args.json)
    return serve(state_dir, args.platform)
