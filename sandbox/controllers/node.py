"""The sandbox's one Node, as its kubelet registers and updates it (v1.31).

The node is this machine: capacity from its cores, memory and disk, allocatable less what
an OpenShift kubelet reserves (systemReserved cpu 500m, memory 1Gi, ephemeral-storage 1Gi;
eviction threshold memory.available 100Mi), and the ClusterQueues' GPU quota as logical
`nvidia.com/gpu` (the pods' GPUs are logical too). Conditions Ready and no pressure;
addresses InternalIP 127.0.0.1 and Hostname. While any `taint` cluster fault is set the
node carries the taint the scheduler simulation (controllers/kubelet.py) enforces.
"""

from __future__ import annotations

import os
import platform
import shutil
from fractions import Fraction
from pathlib import Path

from .. import quantity
from ..apiserver.store import now_rfc3339
from .base import Controller
from .kubelet import GPU_TAINT, NODE

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


def capacity(gpus: int, root: Path | None = None) -> dict[str, str]:
    disk = shutil.disk_usage(root or "/").total
    cap = {"cpu": str(os.cpu_count() or 1), "memory": _ki(machine_memory()), "ephemeral-storage": _ki(disk),
           "hugepages-1Gi": "0", "hugepages-2Mi": "0", "pods": MAX_PODS}
    if gpus:
        cap["nvidia.com/gpu"] = str(gpus)
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
    """Registers the node and keeps its capacity (GPU quota) and taints current."""

    name = "node"
    resync = 2.0

    def __init__(self, store, registry, faults, root: Path | None = None):
        super().__init__(store, registry)
        self.faults, self.root = faults, root
        self.node_t = self.rt("", "nodes")
        self.cq_t = self.rt("kueue.x-k8s.io", "clusterqueues")
        self._static: dict | None = None

    def _gpus(self) -> int:
        """The largest GPU quota of any ClusterQueue (summed over its flavors)."""
        best = 0
        for cq in self.store.list(self.cq_t)[0]:
            total = Fraction(0)
            for group in (cq.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for res in flavor.get("resources") or []:
                        if res.get("name") == "nvidia.com/gpu":
                            total += quantity.parse(res.get("nominalQuota", 0))
            best = max(best, int(total))
        return best

    def tainted(self) -> bool:
        return any((f or {}).get("taint") for f in (self.faults.get().get("clusters") or {}).values())

    def _static_parts(self) -> dict:
        if self._static is None:
            machine_id = _read("/etc/machine-id") or "0" * 32
            self._static = {
                "labels": {"beta.kubernetes.io/arch": _arch(), "beta.kubernetes.io/os": "linux",
                           "kubernetes.io/arch": _arch(), "kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                           # A single-node OpenShift: control plane and worker in one.
                           "node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/master": "",
                           "node-role.kubernetes.io/worker": ""},
                "nodeInfo": {"machineID": machine_id, "systemUUID": _uuid(machine_id),
                             "bootID": _read("/proc/sys/kernel/random/boot_id"),
                             "kernelVersion": platform.release(), "osImage": os_image(),
                             # No container runtime: pods are Ray process groups.
                             "containerRuntimeVersion": f"ray://{_ray_version()}",
                             "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
                             "operatingSystem": "linux", "architecture": _arch()},
            }
        return self._static

    def desired(self) -> dict:
        static = self._static_parts()
        cap = capacity(self._gpus(), self.root)
        spec: dict = {}
        if self.tainted():
            spec["taints"] = [dict(GPU_TAINT, timeAdded=now_rfc3339())]
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "labels": dict(static["labels"]),
                             "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": spec,
                "status": {"capacity": cap, "allocatable": allocatable(cap),
                           "conditions": _conditions(), "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                                                     {"type": "Hostname", "address": NODE}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": dict(static["nodeInfo"]), "images": []}}

    def reconcile(self) -> None:
        want = self.desired()
        node = self.store.find(self.node_t, None, NODE)
        if node is None:
            self.store.create(self.node_t, want)
            return
        if _taint_keys(node) != _taint_keys(want):
            def set_taints(n):
                n["spec"] = {k: v for k, v in (n.get("spec") or {}).items() if k != "taints"}
                if want["spec"].get("taints"):
                    n["spec"]["taints"] = want["spec"]["taints"]
            self.store.mutate(self.node_t, None, NODE, set_taints)
        status = node.get("status") or {}
        if status.get("capacity") != want["status"]["capacity"]:
            def set_capacity(n):
                n["status"]["capacity"] = want["status"]["capacity"]
                n["status"]["allocatable"] = want["status"]["allocatable"]
            self.store.mutate(self.node_t, None, NODE, set_capacity, subresource="status")


def _taint_keys(node: dict) -> list:
    return [(t.get("key"), t.get("value"), t.get("effect")) for t in (node.get("spec") or {}).get("taints") or []]


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

