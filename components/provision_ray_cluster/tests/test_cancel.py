"""A cancelled provision (real SIGTERM to a real task process, as pipeline-runner against the
session sandbox) deletes its cluster at once, whatever the phase: queued (never admitted),
starting (pods not ready), and while the create request itself is still in flight (the
cluster lands after the signal). After the signal (or the cluster's landing) the task asks
the API for nothing but the cluster (GETs) before its DELETE: it waits for no admission, no
start, no poll's turn. It exits by itself (its cleanup is bounded by its own grace period), and
no RayCluster is left. No Ray needed: none of these clusters ever runs Ray. No wall-clock
figure is asserted, only the order of events (the seconds are printed)."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest
from kubernetes import client as k8s

from tests.helpers import eventually
from tests.task_process import TaskProcess

HANG_S = 120.0  # a bound on a hang: the task's own cleanup ends within its 30 s grace period
RUNNER = "system:serviceaccount:sandbox:pipeline-runner-dspa"
ROUNDING = 0.001  # the audit's times are rounded to the millisecond


def provision_code(name: str) -> str:
    return (f"from kfp_ray import tasks\n"
            f"tasks.provision(run_id='r-{name}', cluster_name='{name}', local_queue='local-queue-test', num_workers=0,"
            f" head_cpu='500m', head_memory='1Gi', admission_timeout=300, startup_timeout=300)\n")


def create_in_flight(box, name: str) -> bool:
    """The in-process sandbox apiserver holds a POST that creates RayClusters (delayed by the
    latency fault): read from its request threads' current frames."""
    from kfp_ray_sandbox.apiserver.server import _Call

    for frame in sys._current_frames().values():
        while frame is not None:
            call = frame.f_locals.get("self") if frame.f_code.co_name == "dispatch" else None
            if isinstance(call, _Call) and call.method == "POST" and call.path.endswith("/rayclusters"):
                return True
            frame = frame.f_back
    return False


def audit(sbx, method: str, name: str, create: bool = False) -> list[dict]:
    suffix = "/rayclusters" if create else f"/rayclusters/{name}"
    return [e for e in sbx.audit() if e["method"] == method and e["user"] == RUNNER and e["path"].endswith(suffix)]


def sent_at(entry: dict) -> float:
    """When the request reached the apiserver (the audit line is written as it is answered)."""
    return entry["ts"] - entry["ms"] / 1000.0


PHASES = {
    # phase: (faults, the sign in the task log that it is in that phase)
    "queued": ({"clusters": {"cx-queued": {"never_admit": True}}}, "queued: waiting for Kueue admission"),
    "starting": ({"clusters": {"cx-starting": {"slow_start": 600}}}, "admitted by Kueue after"),
    "create-in-flight": ({"api": {"latency_ms": 2000, "latency_path": "/rayclusters$"}}, None),  # held: see the test
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_cancel_deletes_the_cluster_at_once_in_every_phase(box, sbx, phase, monkeypatch):
    name = f"cx-{phase}"[:40]
    faults, sign = PHASES[phase]
    landing = threading.Event()  # create-in-flight: the create is held until the task is cancelled
    if phase == "create-in-flight":  # the in-process apiserver's injected latency waits for it, not 2 s
        from kfp_ray_sandbox.apiserver import server

        monkeypatch.setattr(server, "time", types.SimpleNamespace(
            time=time.time, time_ns=time.time_ns, monotonic=time.monotonic, sleep=lambda _: landing.wait(HANG_S)))
    else:
        landing.set()
    sbx.set_faults({**faults, "platform": {"finalizer_delay_s": 0.5, "termination_grace_s": 2}})
    task = TaskProcess(box, provision_code(name))
    try:
        if sign:
            eventually(lambda: task.saw(sign) or task.proc.poll() is not None, 120, what=f"the task to be {phase}")
        else:
            eventually(lambda: create_in_flight(box, name) or task.proc.poll() is not None, 120,
                       what="the create request to be in flight")
        assert task.proc.poll() is None, task.output
        signalled = task.sigterm()
        if not landing.is_set():
            eventually(lambda: task.saw("cancelled: deleting") or task.proc.poll() is not None, HANG_S,
                       what="the task to take the cancellation")
            landing.set()  # now the create lands, after the signal
        rc = task.wait(timeout=HANG_S)
    finally:
        landing.set()
        task.kill()
    took = task.exited_at - signalled
    out = task.output
    assert rc != 0 and "Cancelled" in out and f"cancelled: deleting RayCluster {name} now" in out, out
    deletes = audit(sbx, "DELETE", name)
    assert deletes, out
    if phase == "create-in-flight":
        # The create was sent before the signal and landed after it; the delete followed it.
        posts = audit(sbx, "POST", name, create=True)
        assert posts and sent_at(posts[-1]) < signalled < posts[-1]["ts"], (posts, signalled)
        reference = posts[-1]["ts"]
    else:
        reference = signalled
    before = [(e["method"], e["path"]) for e in sorted(sbx.audit(), key=sent_at)
              if e["user"] == RUNNER and reference + ROUNDING < sent_at(e) < sent_at(deletes[0])]
    assert all(m == "GET" and p.endswith(f"/rayclusters/{name}") for m, p in before), (before, out)
    co = k8s.CustomObjectsApi(sbx.api_client())
    eventually(lambda: name not in [rc["metadata"]["name"] for rc in
                                    co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]],
               HANG_S, what=f"RayCluster {name} to be gone")
    print(f"{phase}: delete sent {sent_at(deletes[0]) - signalled:+.2f}s after SIGTERM, exited after {took:.1f}s")
