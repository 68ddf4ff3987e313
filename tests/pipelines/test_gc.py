"""`kfp-ray gc` against the session sandbox, as RHOAI's pipeline-runner: a dry
run deletes nothing; --delete deletes the kfp-ray clusters whose lease expired, and never a
cluster without kfp-ray's labels, one without a lease, or one whose lease is being renewed.
(No Ray: the clusters are held in the queue; tests/reliability/test_sweeper.py has the real
thing end to end.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubernetes import client as k8s

from kfp_ray import lease, rayclusters
from tests.helpers import raycluster

ROOT = Path(__file__).resolve().parents[2]
NS = "sandbox"
# A short lease with a wide margin (4.5 s) over its renewal period, so a loaded machine's
# scheduling hiccups cannot let it lapse; gc-live starts with an expired lease, so without
# its renewals the first sweep would take it.
LIVE_LEASE_S, LIVE_RENEW_S = 5.0, 0.5


def gc(box, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": box.info["kubeconfig_pipeline_runner"],
           "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "gc", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def kfp_ray(name: str, run: str, expires: str | None) -> dict:
    body = raycluster(name, workers=0, cpu="250m", memory="512Mi")
    body["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "kfp-ray", rayclusters.RUN_LABEL: run})
    body["metadata"]["annotations"] = {"kfp-ray.io/run-id": run} | ({lease.ANNOTATION: expires} if expires else {})
    return body


def ago(seconds: float) -> str:
    return lease.format_time(datetime.now(UTC) - timedelta(seconds=seconds))


def line_of(out: str, name: str) -> str:
    """The table's row for a cluster (progress lines start with [kfp-ray])."""
    return next((line for line in out.splitlines() if f" {name} " in f" {line} " and not line.startswith("[")), "")


def test_gc_dry_run_then_delete_spares_foreign_unleased_and_renewed_clusters(box, sbx, as_pipeline_runner):
    sbx.set_faults({"clusters": {"gc-*": {"never_admit": True}}, "platform": {"finalizer_delay_s": 0.5}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    foreign = raycluster("gc-foreign", workers=0, cpu="250m", memory="512Mi")  # someone else's, lease or not
    foreign["metadata"]["annotations"] = {lease.ANNOTATION: ago(3600)}
    for body in (kfp_ray("gc-abandoned", "run-dead", ago(120)), kfp_ray("gc-unleased", "run-old", None),
                 kfp_ray("gc-live", "run-alive", ago(120)), foreign):
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)

    # A live run's task: renews gc-live's short lease from its loop, as follow does.
    renewer = lease.Renewer("gc-live", NS, LIVE_LEASE_S, LIVE_RENEW_S)
    stop = threading.Event()

    def task_loop():
        while not stop.is_set():
            renewer()
            stop.wait(0.1)

    task = threading.Thread(target=task_loop, daemon=True)
    task.start()
    try:
        while renewer.renewals == 0:  # its first renewal lands before the first sweep
            time.sleep(0.05)
        dry = gc(box, "--namespace", NS)
        assert dry.returncode == 0, dry.stderr
        assert "would delete" in line_of(dry.stdout, "gc-abandoned") and re.search(r"expired [23]m\d\ds ago", line_of(dry.stdout, "gc-abandoned"))
        assert "run-dead" in line_of(dry.stdout, "gc-abandoned")
        assert "kept" in line_of(dry.stdout, "gc-live") and "live" in line_of(dry.stdout, "gc-live")
        assert "kept" in line_of(dry.stdout, "gc-unleased") and "none" in line_of(dry.stdout, "gc-unleased")
        assert "gc-foreign" not in dry.stdout  # not kfp-ray's: not even listed
        assert "Dry run: nothing deleted" in dry.stdout and "Add --delete to delete them." in dry.stdout
        assert {"gc-abandoned", "gc-unleased", "gc-live", "gc-foreign"} <= names(co)

        # Sweep with --delete for longer than one of gc-live's leases: only the abandoned one goes.
        started, sweeps = time.monotonic(), []
        while time.monotonic() - started < LIVE_LEASE_S or len(sweeps) < 2:
            run = gc(box, "-n", NS, "--delete")
            assert run.returncode == 0, run.stderr
            sweeps.append(run.stdout)
        assert "deleted" in line_of(sweeps[0], "gc-abandoned") and "deleted 1" in sweeps[0]
        assert all("kept" in line_of(out, "gc-live") for out in sweeps)
        assert "gc-abandoned" not in sweeps[-1]
        left = names(co)
        assert "gc-abandoned" not in left and {"gc-unleased", "gc-live", "gc-foreign"} <= left
        assert renewer.failures == 0 and renewer.renewals >= 2
    finally:
        stop.set()
        task.join(timeout=10)


def test_gc_as_pipeline_runner_cannot_sweep_all_namespaces_and_says_why(box, sbx):
    run = gc(box, "--all-namespaces")
    assert run.returncode == 1
    assert "may not list RayClusters (ray.io) in all namespaces. Fix: sweep one namespace at a time" in run.stderr


def names(co) -> set[str]:
    return {rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]}
