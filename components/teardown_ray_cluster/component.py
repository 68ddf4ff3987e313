from typing import NamedTuple

from kfp.dsl import HTML, Output

from kfp_ray.components._build import KUBE, ray_component


@ray_component(packages=KUBE)
def teardown_ray_cluster(
    run_id: str,
    html_report: Output[HTML],
    namespace: str = "",
    cluster_name: str = "",
    timeout: int = 300,
    title: str = "Ray training run",
) -> NamedTuple("TeardownOutputs", [("cluster_seconds", float)]):
    """Delete the run's RayClusters and wait until they are really gone (finalizers done).

    Meant for a dsl.ExitHandler, so it runs after success, failure and cancellation. An
    exit task cannot take other tasks' outputs: it finds the clusters by the run id label
    (and by cluster_name if given). Already gone is success.

    Then, the clusters gone, it writes the run's report (html_report) from the run's task
    pods, which an exit task can still read: if a task failed, which one and why (the last
    error line of its log), the end of that log (redacted), and when each task ran. What it
    cannot read, the page says; the report never fails the teardown.

    Args:
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER).
        namespace: Namespace; empty uses the pipeline's own.
        cluster_name: A cluster name to delete as well (if it belongs to this run).
        timeout: Seconds to wait for each deletion.
        title: The report's title (the pipeline's name).

    Returns:
        html_report: The run's report: where it failed and why, and its tasks' timeline.
        cluster_seconds: The longest lifetime, in seconds, of the clusters deleted (0 if
            none was left).
    """
    from collections import namedtuple

    from kfp_ray.tasks import report_run, teardown

    try:
        seconds = teardown(run_id=run_id, namespace=namespace, cluster_name=cluster_name, timeout=timeout)
    finally:
        with open(html_report.path, "w") as fh:
            fh.write(report_run(run_id=run_id, title=title, namespace=namespace))
    return namedtuple("TeardownOutputs", ["cluster_seconds"])(seconds)
