"""The sandbox's nodes (nodepool.py), as their kubelets register and update them (v1.31).

Each node of the pool gets capacity and allocatable from its group (allocatable less what an
OpenShift kubelet reserves: systemReserved cpu 500m, memory 1Gi, ephemeral-storage 1Gi;
eviction threshold memory.available 100Mi), its group's labels and taints, conditions Ready
and no pressure, and addresses InternalIP 127.0.0.1 and Hostname (every pod runs on this
machine). The `taint` cluster fault leaves the Nodes as they are: the scheduler sees the GPU taint
on the CPU workers for that cluster's pods alone (kubelet.py), so concurrent tests do not see it.
"""

from __future__ import annotations

import os
import platform
import shutil
from fractions import Fraction
from pathlib import Path

from .. import quantity
from ..apiserver.store import now_rfc3339
from ..nodepool import OPENSHIFT, NodeGroup
from .base import Controller

KUBELET_VERSION = "v1.31.6"  # the API server's gitVersion
MAX_PODS = "250"  # OpenShift's kubelet maxPods
RESERVED = {"cpu": Fraction(1, 2), "memory": 2**30 + 100 * 2**20, "ephemeral-storage": 2**30}


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def machine_memory() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return platform.platform()


def _arch() -> str:
    m = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def _ray_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        return "unknown"


def _ki(value) -> str:
    return f"{int(value) // 1024}Ki"


def capacity(group: NodeGroup, disk: int) -> dict[str, str]:
    cap = {"cpu": str(group.cpu), "memory": _ki(group.memory_gi * 2**30), "ephemeral-storage": _ki(disk),
           "hugepages-1Gi": "0", "hugepages-2Mi": "0", "pods": MAX_PODS}
    if group.gpus:
        cap["nvidia.com/gpu"] = str(group.gpus)
    return cap


def allocatable(cap: dict[str, str]) -> dict[str, str]:
    out = dict(cap)
    cpu = max(Fraction(0), quantity.parse(cap["cpu"]) - RESERVED["cpu"])
    out["cpu"] = quantity.fmt("cpu", cpu)
    for key in ("memory", "ephemeral-storage"):
        left = max(0, int(quantity.parse(cap[key])) - RESERVED[key])
        out[key] = _ki(left) if key == "memory" else str(left)
    return out


class NodeController(Controller):
    """Registers the pool's nodes, as each node's kubelet does: a Node that is missing (never
    made, or deleted) is created from its group; one that exists is left as it is (a taint or
    cordon someone adds stays, as on a real cluster)."""

    name = "node"
    resync = 2.0

    def __init__(self, store, registry, root: Path | None = None, pool=OPENSHIFT):
        super().__init__(store, registry)
        self.root, self.pool = root, tuple(pool)
        self.node_t = self.rt("", "nodes")
        self._static: dict | None = None

    def _static_parts(self) -> dict:
        if self._static is None:
            machine_id = _read("/etc/machine-id") or "0" * 32
            self._static = {
                "labels": {"beta.kubernetes.io/arch": _arch(), "beta.kubernetes.io/os": "linux",
                           "kubernetes.io/arch": _arch(), "kubernetes.io/os": "linux"},
                "nodeInfo": {"machineID": machine_id, "systemUUID": _uuid(machine_id),
                             "bootID": _read("/proc/sys/kernel/random/boot_id"),
                             "kernelVersion": platform.release(), "osImage": os_image(),
                             # No container runtime: pods are Ray process groups.
                             "containerRuntimeVersion": f"ray://{_ray_version()}",
                             "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
                             "operatingSystem": "linux", "architecture": _arch()},
                "disk": shutil.disk_usage(self.root or "/").total,
            }
        return self._static

    def desired(self, group: NodeGroup, name: str) -> dict:
        static = self._static_parts()
        cap = capacity(group, static["disk"])
        taints = [dict(t) for t in group.taints]
        labels = {**static["labels"], **group.labels, "kubernetes.io/hostname": name,
                  "node.kubernetes.io/instance-type": group.instance_type,
                  "beta.kubernetes.io/instance-type": group.instance_type}
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"taints": taints} if taints else {},
                "status": {"capacity": cap, "allocatable": allocatable(cap),
                           "conditions": _conditions(), "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                                                     {"type": "Hostname", "address": name}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": dict(static["nodeInfo"]), "images": []}}

    def reconcile(self) -> None:
        # runs on every change to the store: a lookup per node, the Node built only when missing
        for group in self.pool:
            for name in group.node_names():
                if self.store.find(self.node_t, None, name) is None:
                    self.store.create(self.node_t, self.desired(group, name))


def _uuid(hex32: str) -> str:
    h = (hex32 + "0" * 32)[:32]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _conditions() -> list[dict]:
    now = now_rfc3339()
    rows = [("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status")]
    return [{"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
            for t, s, r, m in rows]

