"""Pipelines that exercise the four components together, for kfp.local tests."""

from kfp import dsl

from kfp_ray.components.follow_ray_job.component import follow_ray_job
from kfp_ray.components.provision_ray_cluster.component import provision_ray_cluster
from kfp_ray.components.submit_ray_job.component import submit_ray_job
from kfp_ray.components.teardown_ray_cluster.component import teardown_ray_cluster


@dsl.pipeline(name="ray-job-under-test")
def ray_job(entrypoint: str, cluster_name: str = "", local_queue: str = "local-queue-test", num_workers: int = 1,
            worker_cpu: str = "1", memory: str = "1Gi", admission_timeout: int = 120, startup_timeout: int = 120,
            job_timeout: int = 300, data_connection: str = ""):
    teardown = teardown_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, cluster_name=cluster_name)
    teardown.set_caching_options(False)
    with dsl.ExitHandler(teardown, name="ray-job"):
        cluster = provision_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                                        task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, cluster_name=cluster_name,
                                        local_queue=local_queue, num_workers=num_workers, head_memory=memory,
                                        worker_cpu=worker_cpu, worker_memory=memory, data_connection=data_connection,
                                        admission_timeout=admission_timeout, startup_timeout=startup_timeout)
        cluster.set_caching_options(False)
        job = submit_ray_job(dashboard_url=cluster.outputs["dashboard_url"], entrypoint=entrypoint,
                             run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                             cluster_name=cluster.outputs["cluster_name"])
        job.set_caching_options(False)
        follow = follow_ray_job(dashboard_url=cluster.outputs["dashboard_url"], job_id=job.output,
                                cluster_name=cluster.outputs["cluster_name"], timeout=job_timeout)
        follow.set_caching_options(False)
