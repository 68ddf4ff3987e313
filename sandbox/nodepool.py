"""The sandbox's nodes: an OpenShift cluster's shape, as bookkeeping.

A node here is what the scheduler and Kueue see (capacity, allocatable, labels, taints);
every pod still runs as local Ray processes, whichever node it is bound to, so a node's
size is not this machine's. The default pool is an OpenShift 4.18 IPI cluster on AWS with
a GPU machine set:

- 3 control-plane nodes (m6i.2xlarge), labelled master and control-plane and tainted
  `node-role.kubernetes.io/master:NoSchedule` and `node-role.kubernetes.io/control-plane:NoSchedule`
  (the installer's machine config), so no workload lands there;
- 2 CPU workers (m6i.2xlarge: 8 CPUs, 32 GiB);
- 1 GPU worker (g5.12xlarge: 48 CPUs, 192 GiB, 4 NVIDIA A10G) with the labels NVIDIA's GPU
  feature discovery writes and the taint `nvidia.com/gpu=true:NoSchedule` an administrator
  (or the GPU operator's ClusterPolicy) sets, so only pods that tolerate it land there.

Allocatable is capacity less what an OpenShift kubelet reserves (systemReserved cpu 500m,
memory 1Gi, ephemeral-storage 1Gi; eviction threshold memory.available 100Mi). The seed
ClusterQueue grants 5 GPUs while the pool has 4: Kueue's quota and the nodes' capacity are
different things, and both apply. `Sandbox(nodes=...)` takes another pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MASTER_TAINTS = ({"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"},
                 {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodeGroup:
    """`count` nodes named `<name>-<i>` alike; `flavor`: the Kueue ResourceFlavor naming them
    (nodeLabels = `selector`), made at start for tests that use per-group flavors."""
    name: str
    count: int
    cpu: int
    memory_gi: int
    instance_type: str
    gpus: int = 0
    labels: dict = field(default_factory=dict)
    taints: tuple = ()
    flavor: str = ""
    selector: dict = field(default_factory=dict)

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


OPENSHIFT = (
    NodeGroup("master", 3, 8, 32, "m6i.2xlarge",
              labels={"node-role.kubernetes.io/master": "", "node-role.kubernetes.io/control-plane": ""},
              taints=MASTER_TAINTS),
    NodeGroup("worker", 2, 8, 32, "m6i.2xlarge", labels={"node-role.kubernetes.io/worker": ""},
              flavor="cpu-workers", selector={"node-role.kubernetes.io/worker": ""}),
    NodeGroup("gpu-worker", 1, 48, 192, "g5.12xlarge", gpus=4,
              labels={"node-role.kubernetes.io/worker": "", "nvidia.com/gpu.present": "true",
                      "nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/gpu.count": "4",
                      "nvidia.com/gpu.memory": "23028"},
              taints=(GPU_TAINT,), flavor="gpu-a10g", selector={"nvidia.com/gpu.present": "true"}),
)


def node_group(pool, node_name: str) -> NodeGroup | None:
    return next((g for g in pool if node_name in g.node_names()), None)


def flavors(pool) -> list[dict]:
    """A Kueue ResourceFlavor per node group that names one (Kueue v1beta1)."""
    out = []
    for g in pool:
        if not g.flavor:
            continue
        spec: dict = {"nodeLabels": dict(g.selector)}
        if g.taints:
            spec["nodeTaints"] = [dict(t) for t in g.taints]
        out.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                    "metadata": {"name": g.flavor}, "spec": spec})
    return out
