from typing import NamedTuple

from kfp.dsl import Markdown, Output

from kfp_ray.components._build import KUBE, ray_component


@ray_component(packages=KUBE)
def sweep_ray_clusters(
    report: Output[Markdown],
    namespace: str = "",
    delete: bool = True,
    all_namespaces: bool = False,
    timeout: int = 300,
) -> NamedTuple("SweepOutputs", [("expired", int), ("deleted", int)]):
    """Delete the kfp-ray RayClusters whose lease has expired: the backstop for clusters no
    task is left to clean up (a deleted run runs no exit handler; a killed task runs no
    cleanup code).

    Every RayCluster kfp-ray creates carries the annotation kfp-ray.io/lease-expires, kept
    in the future by the task that uses it (provision while waiting, follow while the job
    runs) and set to the past by every deletion kfp-ray makes. This task lists the clusters
    labelled app.kubernetes.io/managed-by=kfp-ray, deletes those whose lease has passed
    (never a cluster without kfp-ray's labels, nor one without a lease or with an unreadable
    one), waits until they are gone, and prints what they held. Schedule it as a recurring
    run every few minutes (the kfp_ray_gc pipeline). Turn caching off for this task.

    Args:
        namespace: Namespace to sweep; empty uses the pipeline's own.
        delete: Delete the expired clusters; false only reports them (a dry run).
        all_namespaces: Sweep every namespace (needs list/patch/delete on rayclusters
            cluster-wide, which the pipeline-runner service account does not have).
        timeout: Seconds to wait for each deleted cluster to be gone.

    Returns:
        report: The table of clusters, their leases and what was done, in Markdown.
        expired: How many clusters had an expired lease.
        deleted: How many of them this task deleted.
    """
    from collections import namedtuple

    from kfp_ray.lease import expired
    from kfp_ray.tasks import sweep

    entries = sweep(namespace=namespace, all_namespaces=all_namespaces, delete=delete, timeout=timeout,
                    report_path=report.path)
    out = namedtuple("SweepOutputs", ["expired", "deleted"])
    return out(len(expired(entries)), sum(1 for e in entries if e.action == "deleted"))
