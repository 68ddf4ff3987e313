"""The pipelines the fault-matrix rows run (tests/reliability/test_fault_matrix.py): the four
real components, as a user wires them (pipelines/common.py's shape), made small: a head-only
cluster, short timeouts, teardown in an ExitHandler; and lifecycle "rayjob"'s shape, run_ray_job
with the same teardown."""

from kfp import dsl

from kfp_ray.components.follow_ray_job.component import follow_ray_job
from kfp_ray.components.provision_ray_cluster.component import provision_ray_cluster
from kfp_ray.components.run_ray_job.component import run_ray_job
from kfp_ray.components.submit_ray_job.component import submit_ray_job
from kfp_ray.components.teardown_ray_cluster.component import teardown_ray_cluster


@dsl.pipeline(name="fault-matrix-run")
def fault_matrix_run(entrypoint: str, cluster_name: str, local_queue: str = "local-queue-test",
                     head_memory: str = "1Gi", admission_timeout: int = 60, startup_timeout: int = 240,
                     job_timeout: int = 300, max_poll_seconds: float = 2.0, num_workers: int = 0,
                     worker_gpus: int = 0, tolerations: list = []):  # noqa: B006 - a KFP input default
    teardown = teardown_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, cluster_name=cluster_name, timeout=60)
    teardown.set_caching_options(False)
    with dsl.ExitHandler(teardown, name="fault-matrix"):
        cluster = provision_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, cluster_name=cluster_name,
                                        local_queue=local_queue, num_workers=num_workers, head_cpu="1",
                                        head_memory=head_memory, worker_cpu="500m", worker_memory="1Gi",
                                        worker_gpus=worker_gpus, tolerations=tolerations,
                                        admission_timeout=admission_timeout, startup_timeout=startup_timeout)
        cluster.set_caching_options(False)
        job = submit_ray_job(dashboard_url=cluster.outputs["dashboard_url"], entrypoint=entrypoint,
                             run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                             cluster_name=cluster.outputs["cluster_name"])
        job.set_caching_options(False)
        follow = follow_ray_job(dashboard_url=cluster.outputs["dashboard_url"], job_id=job.output,
                                cluster_name=cluster.outputs["cluster_name"], timeout=job_timeout,
                                max_poll_seconds=max_poll_seconds)
        follow.set_caching_options(False)


@dsl.pipeline(name="fault-matrix-rayjob")
def fault_matrix_rayjob(entrypoint: str, job_name: str, local_queue: str = "local-queue-test", head_memory: str = "1Gi",
                        admission_timeout: int = 60, startup_timeout: int = 240, job_timeout: int = 300,
                        max_poll_seconds: float = 2.0, lease_seconds: int = 600, renew_every_seconds: int = 60,
                        priority_class: str = "", max_preemptions: int = 3):
    teardown = teardown_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, timeout=60)
    teardown.set_caching_options(False)
    with dsl.ExitHandler(teardown, name="fault-matrix"):
        job = run_ray_job(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, entrypoint=entrypoint, job_name=job_name,
                          local_queue=local_queue, num_workers=0, head_cpu="1", head_memory=head_memory,
                          admission_timeout=admission_timeout, startup_timeout=startup_timeout, job_timeout=job_timeout,
                          max_poll_seconds=max_poll_seconds, lease_seconds=lease_seconds,
                          renew_every_seconds=renew_every_seconds, priority_class=priority_class,
                          max_preemptions=max_preemptions)
        job.set_caching_options(False)


@dsl.pipeline(name="fault-matrix-preempt")
def fault_matrix_preempt(entrypoint: str, cluster_name: str, local_queue: str, priority_class: str,
                         max_preemptions: int = 3, admission_timeout: int = 120, startup_timeout: int = 240,
                         job_timeout: int = 300):
    """The training pipelines' shape (provision, then follow submitting the job), queued with a
    priority class: the preemption rows'."""
    teardown = teardown_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, cluster_name=cluster_name, timeout=60)
    teardown.set_caching_options(False)
    with dsl.ExitHandler(teardown, name="fault-matrix"):
        cluster = provision_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, cluster_name=cluster_name,
                                        local_queue=local_queue, priority_class=priority_class, num_workers=0,
                                        head_cpu="1", head_memory="1Gi", admission_timeout=admission_timeout,
                                        startup_timeout=startup_timeout)
        cluster.set_caching_options(False)
        follow = follow_ray_job(dashboard_url=cluster.outputs["dashboard_url"], entrypoint=entrypoint,
                                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                                cluster_name=cluster.outputs["cluster_name"], timeout=job_timeout,
                                max_preemptions=max_preemptions, admission_timeout=admission_timeout,
                                startup_timeout=startup_timeout, max_poll_seconds=2.0)
        follow.set_caching_options(False)
