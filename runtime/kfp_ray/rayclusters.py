"""RayCluster (and RayJob) objects: read, delete and wait until really gone.

Deletion is not instant on OpenShift AI: KubeRay's authentication controller (3.x) holds
`ray.io/authentication-resources`, the CodeFlare operator (2.x) `ray.openshift.ai/oauth-finalizer`,
until it has removed the cluster's auth objects, and
Kueue its `kueue.x-k8s.io/resource-in-use` on the Workload (KubeRay holds a RayJob's
`ray.io/rayjob-finalizer` until it has stopped the Ray job). Until then the object exists
with metadata.deletionTimestamp set; a create of the same name is refused (409).

Every function works on RayClusters unless given `kind=RAYJOB`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from . import kube
from .errors import ClusterError
from .validate import label_value
from .wait import Backoff, log, poll

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"


@dataclass(frozen=True)
class Kind:
    """A KubeRay custom resource kfp-ray creates: its plural (the API path) and its kind."""
    plural: str
    name: str


RAYCLUSTER = Kind(PLURAL, "RayCluster")
RAYJOB = Kind("rayjobs", "RayJob")
RUN_LABEL = "kfp-ray.io/run-id"
# How long to wait for a deleted cluster to be gone (finalizers take seconds normally).
GONE_TIMEOUT = 120.0


def get(name: str, namespace: str, deadline: float | None = None, attempts: int = 6, kind: Kind = RAYCLUSTER) -> dict | None:
    try:
        return kube.call(kube.custom().get_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural, name,
                         what=f"read {kind.name} {name}", deadline=deadline, attempts=attempts)
    except Exception as exc:  # noqa: BLE001
        if kube.not_found(exc):
            return None
        raise


def suspended(rc: dict) -> bool:
    return bool((rc.get("spec") or {}).get("suspend"))


def being_deleted(rc: dict) -> bool:
    return bool(rc["metadata"].get("deletionTimestamp"))


def run_of(rc: dict) -> str | None:
    return (rc["metadata"].get("labels") or {}).get(RUN_LABEL)


def kind_of(obj: dict) -> Kind:
    return RAYJOB if obj.get("kind") == RAYJOB.name else RAYCLUSTER


def wait_gone(rc: dict, timeout: float = GONE_TIMEOUT, why: str = "") -> None:
    """Wait (bounded) until this RayCluster (or RayJob) object (by uid) no longer exists."""
    name, ns, uid = rc["metadata"]["name"], rc["metadata"]["namespace"], rc["metadata"]["uid"]
    kind = kind_of(rc)
    deadline = time.monotonic() + timeout

    def current() -> dict | None:
        now = get(name, ns, deadline=deadline, kind=kind)
        return now if now is not None and now["metadata"]["uid"] == uid else None

    now = current()
    if now is None:
        return
    holders = ", ".join(now["metadata"].get("finalizers") or []) or "none"
    log(f"waiting up to {timeout:.0f}s for {kind.name} {name} to be gone{why} (finalizers: {holders})")

    def timed_out():
        left = ", ".join((current() or now)["metadata"].get("finalizers") or []) or "none"
        return ClusterError(
            f"{kind.name} {name!r} in {ns!r} still exists {timeout:.0f}s after its deletion was requested "
            f"(finalizers left: {left}). Fix: the operator that owns a finalizer removes it when done (KubeRay: "
            "ray.io/authentication-resources, ray.io/rayjob-finalizer; the CodeFlare operator on 2.x: "
            "ray.openshift.ai/oauth-finalizer); check that it is running, or ask your administrator")

    # Gone in ~2 s when the operators are well (the next task waits on it): every 0.5 s at
    # first, then every 2 s (a finalizer held up by its operator).
    poll(lambda: True if current() is None else None, timeout, f"{kind.name} {name} to be gone",
         Backoff(0.2, 1.5, 0.5, later=(10.0, 2.0)), on_timeout=timed_out)


def request_delete(name: str, namespace: str, uid: str | None = None, deadline: float | None = None,
                   attempts: int = 6, kind: Kind = RAYCLUSTER, lease: bool = True) -> bool:
    """Ask for the deletion of a RayCluster, without waiting. With `uid`, only that object
    is deleted (a precondition: never a namesake created since). False when there was
    nothing (any more) to delete.

    Its lease (lease.py) is set to now, so that the next sweep collects the cluster should
    the deletion fail or never be sent: before the delete, or, with a `deadline` (a
    cancelled task, where the delete must go out at once), only after a failed delete.
    `lease=False`: no lease is written (a cluster that is not kfp-ray's)."""
    from .lease import expire

    body = {"preconditions": {"uid": uid}} if uid else None
    if deadline is None and lease:
        expire(name, namespace, kind=kind)
    try:
        kube.call(kube.custom().delete_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural, name,
                  body=body, what=f"delete {kind.name} {name}", deadline=deadline, attempts=attempts)
        return True
    except Exception as exc:  # noqa: BLE001
        if kube.not_found(exc) or (uid and getattr(exc, "status", None) == 409):  # 409: another object now
            return False
        if deadline is not None and lease:
            expire(name, namespace, deadline, kind=kind)
        raise


def delete(name: str, namespace: str, timeout: float = GONE_TIMEOUT, rc: dict | None = None,
           lease: bool = True) -> float | None:
    """Delete a RayCluster (`rc` if given: that object only) and wait (bounded) until it is
    really gone (finalizers done). Returns its lifetime in seconds, or None if it did not
    exist. Already gone is success. `lease`: as request_delete's."""
    rc = rc or get(name, namespace)
    if rc is None:
        return None
    lifetime = age_seconds(rc)
    if not being_deleted(rc):
        request_delete(name, namespace, rc["metadata"]["uid"], lease=lease)
    wait_gone(rc, timeout)
    log(f"deleted RayCluster {name} (lived {lifetime:.0f}s)")
    return lifetime


def age_seconds(rc: dict) -> float:
    created = rc["metadata"].get("creationTimestamp")
    if not created:
        return 0.0
    t = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - t).total_seconds())


def of_run(namespace: str, run_id: str, kind: Kind = RAYCLUSTER) -> list[dict]:
    """The run's RayClusters (or RayJobs), by its label."""
    return kube.call(kube.custom().list_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural,
                     label_selector=f"{RUN_LABEL}={label_value(run_id)}", what=f"list the run's {kind.name}s")["items"]


def clusters_of_run(namespace: str, run_id: str) -> list[str]:
    return [rc["metadata"]["name"] for rc in of_run(namespace, run_id)]


def owning_rayjob(rc: dict) -> str | None:
    """The RayJob a RayCluster was created for (KubeRay sets itself as its controller
    owner): it goes with its RayJob, and is judged through it."""
    return next((r["name"] for r in rc["metadata"].get("ownerReferences") or [] if r.get("kind") == RAYJOB.name), None)
