from pathlib import Path
from typing import NamedTuple

from kfp.dsl import Artifact, Metrics, Output

from kfp_ray.components._build import FOLLOW, ray_component


def follow_ray_job(
    dashboard_url: str,
    job_log: Output[Artifact],
    metrics: Output[Metrics],
    job_id: str = "",
    entrypoint: str = "",
    run_id: str = "",
    task_name: str = "follow-ray-job",
    working_dir: str = "",
    pip: list = [],
    env_vars: dict = {},
    metadata: dict = {},
    requirements_file: str = "",
    install_requirements: bool = True,
    cluster_name: str = "",
    namespace: str = "",
    timeout: int = 86400,
    delete_cluster: bool = True,
    max_poll_seconds: float = 0.5,
    outage_tolerance_seconds: float = 600.0,
    lease_seconds: int = 600,
    renew_every_seconds: int = 60,
    max_preemptions: int = 3,
    admission_timeout: int = 600,
    startup_timeout: int = 900,
) -> NamedTuple("FollowOutputs", [("status", str), ("duration_seconds", float), ("teardown_seconds", float)]):
    """Follow a Ray job to its end, streaming its logs into this task's log; given an
    entrypoint instead of a job_id, submit the job first (one task instead of submit_ray_job
    and this one: what the training pipelines do).

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

    Given the entrypoint, it also copies the job log to $KFP_RAY_OUTPUT/logs/job.log in S3
    (from env_vars; a part every 30 s, the whole log at the end), so it outlives the cluster.

    Metrics: the job reports them by printing lines `KFP_RAY_METRICS {"name": number, ...}`;
    the last value of each name becomes a KFP metric.

    Args:
        dashboard_url: provision_ray_cluster's dashboard_url output.
        job_id: submit_ray_job's output; empty when this task submits the job (entrypoint).
        entrypoint: The command the job runs, e.g. "python train.py", for this task to submit
            it (through the Job Submission API, as submit_ray_job does); the other job inputs
            below are submit_ray_job's. Empty: follow job_id.
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER), with entrypoint.
        task_name: The task's name (dsl.PIPELINE_TASK_NAME_PLACEHOLDER): with run_id, the
            submission id, so that a retried task adopts the job instead of submitting another.
        working_dir: The job's code ("code" for components made by follow_ray_job_with_code,
            an s3:// URI or an https:// zip URL). Empty: no code upload.
        pip: pip requirements installed for the job on every Ray node, after requirements_file's.
        env_vars: Environment variables for the job.
        metadata: Ray job metadata (run id and task are added).
        requirements_file: A pip requirements file in the embedded working_dir.
        install_requirements: False leaves requirements_file out (an image that has them).
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
        max_preemptions: How many Kueue preemptions of the cluster the run rides out when
            this task submits the job (entrypoint): it waits for the cluster to be admitted
            again and submits the job on its new pods (a job that keeps checkpoints in
            KFP_RAY_CHECKPOINTS resumes from the last one). 0: fail at the first.
        admission_timeout: After a preemption, seconds to wait for Kueue to admit the cluster again.
        startup_timeout: After a preemption, seconds to wait, once admitted, for its new pods.

    Returns:
        job_log: The job's full log.
        metrics: Metrics reported by the job, with job_duration_seconds, preemptions and preempted_seconds.
        status: The job's final status.
        duration_seconds: How long the job ran.
        teardown_seconds: How long deleting the cluster took once the job was over, until it
            was gone and its quota free (0 without delete_cluster).
    """
    import os
    from collections import namedtuple

    import kfp_ray
    from kfp_ray.jobs import LogShipper, log_uri
    from kfp_ray.tasks import follow

    submission = None
    if entrypoint:
        # the folder the embedded code/ is in (kfp_ray may be the image's: an --image build)
        root = globals().get("__KFP_EMBEDDED_ASSET_DIR") or os.path.dirname(os.path.dirname(kfp_ray.__file__))
        submission = dict(entrypoint=entrypoint, run_id=run_id, task=task_name, working_dir=working_dir,
                          embedded_root=root, pip=pip, env_vars=env_vars, metadata=metadata,
                          requirements_file=requirements_file if install_requirements else "")
    # the job log, copied to $KFP_RAY_OUTPUT/logs/job.log (a job this task submits) as it grows
    shipper = LogShipper(job_log.path, log_uri(env_vars) if entrypoint else "")
    result = follow(dashboard_url=dashboard_url, job_id=job_id, log_path=job_log.path, cluster_name=cluster_name,
                    namespace=namespace, timeout=timeout, delete_cluster=delete_cluster,
                    max_poll_seconds=max_poll_seconds, outage_tolerance_seconds=outage_tolerance_seconds,
                    lease_seconds=lease_seconds, renew_every_seconds=renew_every_seconds, submission=submission,
                    max_preemptions=max_preemptions, admission_timeout=admission_timeout,
                    startup_timeout=startup_timeout, shipper=shipper)
    job_log.metadata.update({"job_id": result.job_id, "status": result.status, "preemptions": result.preempted_times,
                             "released_at": result.released_at})  # the quota free: the usage ledger's end
    for name, value in sorted(result.metrics.items()):
        metrics.log_metric(name, value)
    metrics.log_metric("job_duration_seconds", result.duration_seconds)
    metrics.log_metric("preemptions", result.preemptions)
    metrics.log_metric("preempted_seconds", result.preempted_seconds)
    out = namedtuple("FollowOutputs", ["status", "duration_seconds", "teardown_seconds"])
    return out(result.status, result.duration_seconds, result.teardown_seconds)


_follow_ray_job = follow_ray_job
follow_ray_job = ray_component(packages=FOLLOW)(_follow_ray_job)


def follow_ray_job_with_code(code_dir: str | Path, files=None, strip_code: bool = False):
    """A follow_ray_job component with `code_dir` embedded as its `code/` directory: give it
    entrypoint and working_dir="code" to submit and follow a job of that code in one task.
    `files`: only these paths of code_dir (relative to it); default all. `strip_code`: its
    Python travels without comments and docstrings (each line where it was)."""
    return ray_component(packages=FOLLOW, code_dir=code_dir, code_files=files, strip_code=strip_code)(_follow_ray_job)
