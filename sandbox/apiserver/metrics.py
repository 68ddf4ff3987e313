"""metrics.k8s.io/v1beta1: PodMetrics and NodeMetrics from the real processes' CPU and memory.

On OpenShift the cluster monitoring stack serves this aggregated API (APIService
v1beta1.metrics.k8s.io) from the kubelets' cAdvisor figures; `kubectl top` reads it. Here a
pod's usage is its running container's process tree as the kubelet knows it (the Ray node's
`ray start`, GCS, raylet, dashboard and workers; a command container's process): CPU as the
rate over a short window sampled for the request, memory as the resident set. A node's is
the sum of its bound pods' (the system daemons a real node counts too are left out). Only get and list are
served (no watch), as metrics-server serves them; containers without a process of their own
(a sidecar the sandbox does not run) are left out, as a pod without metrics is.
"""

from __future__ import annotations

import time

import psutil

from .errors import ApiError
from .resources import ResourceType
from .store import now_rfc3339

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
WINDOW_S = 0.5
TYPES = [ResourceType(GROUP, VERSION, "nodes", "NodeMetrics", False, verbs=("get", "list")),
         ResourceType(GROUP, VERSION, "pods", "PodMetrics", True, verbs=("get", "list"))]


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


def _rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


def _busy(times) -> float:
    return times.user + times.nice + times.system + times.irq + times.softirq + getattr(times, "steal", 0.0)


def _cpu(rate_cores: float) -> str:
    return f"{max(0, int(rate_cores * 1e9))}n"


def _memory(num_bytes: int) -> str:
    return f"{num_bytes // 1024}Ki"


def pod_metrics(kubelet, pods: list[dict]) -> list[dict]:
    """PodMetrics of the pods that run a process here, their CPU measured over WINDOW_S."""
    running = []
    for pod in pods:
        pids = kubelet.pod_pids(pod["metadata"]["namespace"], pod["metadata"]["name"]) if kubelet else None
        if pids:
            running.append((pod, pids))
    if not running:
        return []
    before, started = [_cpu_seconds(pids) for _, pids in running], time.monotonic()
    time.sleep(WINDOW_S)
    elapsed, stamp = time.monotonic() - started, now_rfc3339()
    items = []
    for (pod, pids), cpu0 in zip(running, before, strict=True):
        meta = pod["metadata"]
        container = (pod["spec"].get("containers") or [{}])[0].get("name", "")
        items.append({"metadata": {"name": meta["name"], "namespace": meta["namespace"], "creationTimestamp": stamp,
                                   "labels": dict(meta.get("labels") or {})},
                      "timestamp": stamp, "window": f"{WINDOW_S}s",
                      "containers": [{"name": container, "usage": {
                          "cpu": _cpu((_cpu_seconds(pids) - cpu0) / elapsed), "memory": _memory(_rss(pids))}}]})
    return items


def node_metrics(kubelet, nodes: list[dict], pods: list[dict]) -> list[dict]:
    """NodeMetrics of the pool's nodes: each the CPU and memory of the pods bound to it (every
    node runs on this one machine; the system daemons a real node also counts are left out)."""
    if not nodes:
        return []
    on: dict[str, list[int]] = {n["metadata"]["name"]: [] for n in nodes}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in on and kubelet:
            on[node] += kubelet.pod_pids(pod["metadata"]["namespace"], pod["metadata"]["name"]) or []
    before, started = {n: _cpu_seconds(pids) for n, pids in on.items()}, time.monotonic()
    time.sleep(WINDOW_S)
    elapsed, stamp = time.monotonic() - started, now_rfc3339()
    return [{"metadata": {"name": n["metadata"]["name"], "creationTimestamp": stamp,
                          "labels": dict(n["metadata"].get("labels") or {})},
             "timestamp": stamp, "window": f"{WINDOW_S}s",
             "usage": {"cpu": _cpu((_cpu_seconds(on[n["metadata"]["name"]]) - before[n["metadata"]["name"]]) / elapsed),
                       "memory": _memory(_rss(on[n["metadata"]["name"]]))}} for n in nodes]


def _nodes(api, nodes: list[dict]) -> list[dict]:
    return node_metrics(api.pod_runtime, nodes, api.store.list(api.registry.get("", "pods"))[0])


def serve(call, rt: ResourceType, namespace: str | None, name: str | None, query: dict) -> None:
    """Answer a get or list of NodeMetrics / PodMetrics through `call` (server._Call)."""
    api = call.api
    source = api.registry.get("", rt.plural)  # the pods or nodes they measure
    if name:
        obj = api.store.find(source, namespace, name)
        items = (pod_metrics(api.pod_runtime, [obj]) if rt.plural == "pods" else _nodes(api, [obj])) if obj else []
        if not items:  # metrics-server names a pod's as namespace/name
            shown = f"{namespace}/{name}" if namespace else name
            raise ApiError(404, "NotFound", f'{rt.plural}.{GROUP} "{shown}" not found',
                           {"name": shown, "group": GROUP, "kind": rt.plural})
        call._send(200, {"kind": rt.kind, "apiVersion": f"{GROUP}/{VERSION}", **items[0]})
        return
    objs, _ = api.store.list(source, namespace, call._matchers(query))
    items = pod_metrics(api.pod_runtime, objs) if rt.plural == "pods" else _nodes(api, objs)
    call._send(200, {"kind": f"{rt.kind}List", "apiVersion": f"{GROUP}/{VERSION}", "metadata": {}, "items": items})
