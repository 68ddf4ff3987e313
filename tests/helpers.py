"""Manifests and waits shared by tests."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest

# The OpenShift AI releases the sandbox plays (sandbox/platforms.py), for tests of what differs
# between them: provision, delete, the Ray client driver, RayJobs, doctor, diagnosis.
PLATFORMS = ("rhoai-3.3", "rhoai-2.25")


def on_platforms(*platforms: str):
    """Run the test (or, as `pytestmark`, the module) once on each platform's sandbox: the
    session's `box` (and every fixture built on it) is that platform's."""
    return pytest.mark.parametrize("box", platforms or PLATFORMS, indirect=True)


def raycluster(name: str, workers: int = 1, cpu: str = "1", memory: str = "2Gi", queue: str | None = "local-queue-test",
               gpu: int = 0, tolerations: list | None = None, image: str = "quay.io/modh/ray:2.52.1-py311-cu121") -> dict:
    """A RayCluster as KubeRay's CRD accepts it (what the CodeFlare SDK builds, trimmed)."""
    def container(n):
        res = {"cpu": cpu, "memory": memory}
        if gpu:
            res["nvidia.com/gpu"] = str(gpu)
        return {"name": n, "image": image, "resources": {"requests": dict(res), "limits": dict(res)}}

    def template(n):
        spec = {"containers": [container(n)]}
        if tolerations:
            spec["tolerations"] = tolerations
        return {"spec": spec}

    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {"rayVersion": "2.52.1",
                     "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": template("ray-head")},
                     "workerGroupSpecs": [{"groupName": "small-group", "replicas": workers, "minReplicas": workers,
                                           "maxReplicas": workers, "rayStartParams": {},
                                           "template": template("machine-learning")}]}}


POLL_CAP_S = 0.5


def eventually(fn, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    """Return fn()'s first truthy value, or fail naming what was awaited and the last value.
    Polls every `interval` s at first, backing off to POLL_CAP_S (or `interval`, if longer):
    a wait of minutes at 0.1 s was seconds of CPU in the sandbox that answered."""
    deadline = time.monotonic() + timeout
    last, wait = None, interval
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        wait = min(wait * 1.5, max(interval, POLL_CAP_S))
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


@contextlib.contextmanager
def kube_identity(kubeconfig: str):
    """Inside this block kfp_ray.kube talks to the API as that kubeconfig's user (what
    KUBECONFIG does in a task), for module-scoped fixtures that cannot use monkeypatch."""
    from kfp_ray import kube

    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = kubeconfig
    kube.api_client.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved
        kube.api_client.cache_clear()


def cpu_in_use(custom_objects) -> float:
    """CPUs the sandbox's ClusterQueue `cluster-queue` has admitted (its flavorsUsage), through
    a kubernetes CustomObjectsApi."""
    from kfp_ray.validate import quantity

    cq = custom_objects.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "cluster-queue")
    return sum(float(quantity(r["total"])) for f in (cq.get("status") or {}).get("flavorsUsage") or []
               for r in f["resources"] if r["name"] == "cpu")


class FakeClock:
    """A clock that only advance() (or sleep(), for code that takes a sleep) moves: a schedule
    of polls or timeouts, followed with no real waiting."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    sleep = advance


KUEUE_API = ("kueue.x-k8s.io", "v1beta1")
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


def labelled(body: dict, priority_class: str) -> dict:
    """A RayCluster or RayJob manifest with Kueue's priority-class label."""
    body["metadata"].setdefault("labels", {})[PRIORITY_CLASS_LABEL] = priority_class
    return body


@contextlib.contextmanager
def priority_classes(custom_objects, values: dict[str, int]):
    """Kueue WorkloadPriorityClasses {name: value}, deleted afterwards."""
    for name, value in values.items():
        custom_objects.create_cluster_custom_object(*KUEUE_API, "workloadpriorityclasses", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value, "description": f"kfp-ray test: {name}"})
    try:
        yield
    finally:
        for name in values:
            custom_objects.delete_cluster_custom_object(*KUEUE_API, "workloadpriorityclasses", name)


@contextlib.contextmanager
def preempting_queue(custom_objects, values: dict[str, int]):
    """The sandbox's ClusterQueue `cluster-queue` preempting withinClusterQueue LowerPriority, with
    the WorkloadPriorityClasses `values`; back to Never (the seed's) afterwards."""
    def within(policy):
        custom_objects.patch_cluster_custom_object(*KUEUE_API, "clusterqueues", "cluster-queue",
                                                   {"spec": {"preemption": {"withinClusterQueue": policy}}})

    with priority_classes(custom_objects, values):
        within("LowerPriority")
        try:
            yield
        finally:
            within("Never")


def in_thread(name: str, fn) -> tuple[threading.Thread, dict]:
    """fn() as a task would run it, in a daemon thread: its return value under "result", or what it
    raised under "error" (cancellations too), for the test to assert once it joined the thread."""
    out: dict = {}

    def run():
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test asserts it
            out["error"] = exc

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t, out


def ray_object(custom_objects, plural: str, name: str, namespace: str = "sandbox") -> dict:
    """A ray.io/v1 object ({} while it does not exist)."""
    from kubernetes import client as k8s

    try:
        return custom_objects.get_namespaced_custom_object("ray.io", "v1", namespace, plural, name)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


@contextlib.contextmanager
def preempting_sandbox(sbx, prefix: str):
    """The sandbox's ClusterQueue preempting within itself by priority, with WorkloadPriorityClasses
    `<prefix>-low` (100) and `<prefix>-high` (1000); RayClusters named `<prefix>-high*` (the
    preemptor) never start Ray (slow_start): they only take the quota. Yields a CustomObjectsApi."""
    from kubernetes import client as k8s

    co = k8s.CustomObjectsApi(sbx.api_client())
    sbx.set_faults({"clusters": {f"{prefix}-high*": {"slow_start": 600}}})
    with preempting_queue(co, {f"{prefix}-low": 100, f"{prefix}-high": 1000}):
        yield co
