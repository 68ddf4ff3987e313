"""The generic Ray training pipeline: your entrypoint and code (S3 or https archive) on a
Kueue-queued RayCluster, with data/output folders in S3 and the results published."""

from kfp import dsl

from kfp_ray.components.follow_ray_job.component import follow_ray_job
from kfp_ray.pipelines.common import train_on_ray, with_lifecycle_doc


@dsl.pipeline(name="ray-training", description="Run a Ray training job (your code from S3 or an https zip) on a "
              "Kueue-queued RayCluster; metrics from KFP_RAY_METRICS log lines, and model, confusion matrix and "
              "report from a results.json the job may write to $KFP_RAY_OUTPUT.")
@with_lifecycle_doc("Your Ray training job on a Kueue-queued cluster.")
def ray_training(
    entrypoint: str,
    working_dir: str = "",
    dataset: str = "",
    requirements: list = [],
    data_connection: str = "aws-connection-minio",
    s3_prefix: str = "",
    local_queue: str = "",
    priority_class: str = "",
    image: str = "",
    num_workers: int = 1,
    head_cpu: str = "1",
    head_memory: str = "4Gi",
    worker_cpu: str = "1",
    worker_memory: str = "4Gi",
    worker_gpus: int = 0,
    admission_timeout: int = 600,
    startup_timeout: int = 900,
    job_timeout: int = 86400,
    max_preemptions: int = 3,
    pip_index_url: str = "",
    pip_trusted_host: str = "",
    lifecycle: str = "raycluster",
):
    train_on_ray(
        title="ray_training",
        follow=follow_ray_job, working_dir=working_dir, entrypoint=entrypoint, dataset=dataset,
        data_connection=data_connection, s3_prefix=s3_prefix, local_queue=local_queue, priority_class=priority_class, image=image,
        num_workers=num_workers, head_cpu=head_cpu, head_memory=head_memory, worker_cpu=worker_cpu,
        worker_memory=worker_memory, worker_gpus=worker_gpus,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        admission_timeout=admission_timeout, startup_timeout=startup_timeout, job_timeout=job_timeout, max_preemptions=max_preemptions, pip=requirements,
        pip_index_url=pip_index_url, pip_trusted_host=pip_trusted_host,
        lifecycle=lifecycle)
