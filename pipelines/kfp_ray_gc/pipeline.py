"""The lease sweeper as a pipeline of one task, for a recurring run every few minutes: it
deletes the kfp-ray RayClusters whose lease has expired (their run was deleted, or the task
that used them was killed), in the pipeline's own namespace."""

from kfp import dsl

from kfp_ray.components.sweep_ray_clusters.component import sweep_ray_clusters
from kfp_ray.pipelines.sizes import size_tasks


@dsl.pipeline(name="kfp-ray-gc", description="Delete kfp-ray RayClusters whose lease expired (no task left uses "
              "them); schedule it as a recurring run every few minutes.")
def kfp_ray_gc(namespace: str = "", delete: bool = True, timeout: int = 300):
    sweep = sweep_ray_clusters(namespace=namespace, delete=delete, timeout=timeout)
    sweep.set_caching_options(False)  # every run must look again
    size_tasks()
