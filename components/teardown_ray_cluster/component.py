from typing import NamedTuple

from kfp_ray.components._build import KUBE, ray_component


@ray_component(packages=KUBE)
def teardown_ray_cluster(
    run_id: str,
    namespace: str = "",
    cluster_name: str = "",
    timeout: int = 300,
) -> NamedTuple("TeardownOutputs", [("cluster_seconds", float)]):
    """Delete the run's RayClusters and wait until they are really gone (finalizers done).

    Meant for a dsl.ExitHandler, so it runs after success, failure and cancellation. An
    exit task cannot take other tasks' outputs: it finds the clusters by the run id label
    (and by cluster_name if given). Already gone is success.

    Args:
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER).
        namespace: Namespace; empty uses the pipeline's own.
        cluster_name: A cluster name to delete as well (if it belongs to this run).
        timeout: Seconds to wait for each deletion.

    Returns:
        cluster_seconds: The longest lifetime, in seconds, of the clusters deleted (0 if
            none was left).
    """
    from collections import namedtuple

    from kfp_ray.tasks import teardown

    seconds = teardown(run_id=run_id, namespace=namespace, cluster_name=cluster_name, timeout=timeout)
    return namedtuple("TeardownOutputs", ["cluster_seconds"])(seconds)
