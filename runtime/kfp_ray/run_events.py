"""A run's Kubernetes events, kept beside its job log in S3 ($KFP_RAY_OUTPUT/logs/events.jsonl).

Why Kueue held, admitted, evicted or preempted the cluster, what KubeRay did with its pods, the
scheduler's and the kubelet's word on them: the events of the RayCluster (or RayJob), its Kueue
Workload, pods, submitter Job and services. An event outlives its object (kube-apiserver keeps
it for --event-ttl, 1 h by default and 3 h on OpenShift), so the copy made when the task ends
still has a cluster KubeRay or Kueue deleted. jobs.LogShipper writes it with each part of the log.

Listing events takes `list` on events in the project, which RHOAI's pipeline-runner Role lacks:
part 4 of deploy/rbac-kfp-ray.yaml adds it. Without it nothing is written (said once in the log).
"""

from __future__ import annotations

import json

from . import kube
from .redact import redact


def ours(name: str, names) -> bool:
    """Whether an object named `name` is one of `names` (RayClusters or RayJobs) or theirs: its
    pods, services and submitter Job (`<name>-...`), its Workload (`raycluster-<name>-<hash>`,
    `rayjob-<name>-<hash>`, as Kueue's jobframework names them)."""
    return any(name == n or name.startswith((f"{n}-", f"raycluster-{n}-", f"rayjob-{n}-")) for n in names if n)


def collect(namespace: str, names) -> list[dict] | None:
    """The events of `names` and their objects, oldest first; None when this service account
    may not list events."""
    try:
        items = kube.call(kube.core().list_namespaced_event, namespace, what="list events", attempts=2).items
    except Exception as exc:
        if kube.forbidden(exc):
            return None
        raise
    picked = []
    for e in items:
        obj = e.involved_object
        if not ours(obj.name or "", names):
            continue
        when = e.last_timestamp or e.event_time or e.first_timestamp
        picked.append({"time": when.isoformat() if when else "", "type": e.type, "reason": e.reason,
                     "kind": obj.kind, "name": obj.name, "message": redact(e.message or ""), "count": e.count or 1,
                     "source": (e.source.component if e.source else "") or e.reporting_component or ""})
    return sorted(picked, key=lambda r: r["time"])


def jsonl(picked: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in picked).encode()
