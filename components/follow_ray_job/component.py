from typing import NamedTuple

from kfp.dsl import Artifact, Metrics, Output

from kfp_ray.components._build import FOLLOW, ray_component


@ray_component(packages=FOLLOW)
def follow_ray_job(
    dashboard_url: str,
    job_id: str,
    job_log: Output[Artifact],
    metrics: Output[Metrics],
    cluster_name: str = "",
    namespace: str = "",
    timeout: int = 86400,
    delete_cluster: bool = True,
    max_poll_seconds: float = 0.5,
    outage_tolerance_seconds: float = 600.0,
    lease_seconds: int = 600,
    renew_every_seconds: int = 60,
) -> NamedTuple("FollowOutputs", [("status", str), ("duration_seconds", float), ("teardown_seconds", float)]):
    """Follow a Ray job to its end, streaming its logs into this task's log.

    Checks the job's status with backoff from 0.2 s up to max_poll_seconds (0.5: its end is
    seen within a second), and streams its log (only what is new is read, into job_log as it
    comes). SUCCEEDED, FAILED and STOPPED are final. At the timeout the job is stopped. A failed job fails this task with the
    job's error and the end of its log. When delete_cluster is set, the RayCluster is
    deleted as soon as the job is over, so its quota is released at once.

    An unreachable Ray dashboard (or Kubernetes API) is ridden out for
    outage_tolerance_seconds, with a log line a minute; past that, and at once on any other
    failure to read (401/403, an answer that is not the Ray Job API's), the task fails with
    the cause and leaves the cluster (the job may still be running: a retry of this task
    follows it again, else the exit handler's teardown deletes it). When the run is cancelled (SIGTERM) the job's
    stop and the cluster's deletion are requested at once, within the 30 s grace period.
    Turn caching off for this task.

    While it follows the job (outages included) it renews the cluster's lease, so that the
    kfp_ray_gc sweeper leaves the cluster alone; if this task is killed, the lease runs out
    and the sweeper frees the cluster.

    Metrics: the job reports them by printing lines `KFP_RAY_METRICS {"name": number, ...}`;
    the last value of each name becomes a KFP metric.

    Args:
        dashboard_url: provision_ray_cluster's dashboard_url output.
        job_id: submit_ray_job's output.
        cluster_name: The RayCluster to delete when the job is over (delete_cluster).
        namespace: Its namespace; empty uses the pipeline's own.
        timeout: Seconds the job may run before it is stopped.
        delete_cluster: Delete the RayCluster once the job is over.
        max_poll_seconds: Longest pause between status checks.
        outage_tolerance_seconds: How long an unreachable dashboard or Kubernetes API is
            ridden out before the task fails.
        lease_seconds: Length of the cluster's lease (from each renewal).
        renew_every_seconds: How often the lease is renewed (lease_seconds must be at
            least twice as long).

    Returns:
        job_log: The job's full log.
        metrics: Metrics reported by the job.
        status: The job's final status.
        duration_seconds: How long the job ran.
        teardown_seconds: How long deleting the cluster took once the job was over, until it
            was gone and its quota free (0 without delete_cluster).
    """
    from collections import namedtuple

    from kfp_ray.tasks import follow

    result = follow(dashboard_url=dashboard_url, job_id=job_id, log_path=job_log.path, cluster_name=cluster_name,
                    namespace=namespace, timeout=timeout, delete_cluster=delete_cluster,
                    max_poll_seconds=max_poll_seconds, outage_tolerance_seconds=outage_tolerance_seconds,
                    lease_seconds=lease_seconds, renew_every_seconds=renew_every_seconds)
    job_log.metadata.update({"job_id": job_id, "status": result.status})
    for name, value in sorted(result.metrics.items()):
        metrics.log_metric(name, value)
    metrics.log_metric("job_duration_seconds", result.duration_seconds)
    out = namedtuple("FollowOutputs", ["status", "duration_seconds", "teardown_seconds"])
    return out(result.status, result.duration_seconds, result.teardown_seconds)
