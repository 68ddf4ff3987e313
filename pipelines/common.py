"""The shape every kfp-ray training pipeline shares: stage data in S3, provision a
Kueue-queued RayCluster, submit and follow the Ray job, publish its results, and tear the
cluster down in an exit handler whatever happens."""

from __future__ import annotations

from pathlib import Path

from kfp import dsl, kubernetes

from components.follow_ray_job.component import follow_ray_job
from components.provision_ray_cluster.component import provision_ray_cluster
from components.publish_training_results.component import publish_training_results
from components.stage_dataset.component import stage_dataset
from components.submit_ray_job.component import submit_ray_job_with_code
from components.teardown_ray_cluster.component import teardown_ray_cluster

RUN_ID = dsl.PIPELINE_JOB_ID_PLACEHOLDER
# The demo jobs' code (pipelines/jobs), embedded in the submit task as `code/`.
submit_with_jobs = submit_ray_job_with_code(Path(__file__).resolve().parent / "jobs")
# The data connection secret's keys, as RHOAI writes them, mounted as the same env names.
DATA_CONNECTION_KEYS = {k: k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_S3_ENDPOINT",
                                       "AWS_S3_BUCKET", "AWS_DEFAULT_REGION")}


def with_data_connection(task, data_connection):
    kubernetes.use_secret_as_env(task, secret_name=data_connection, secret_key_to_env=DATA_CONNECTION_KEYS)
    return task


def train_on_ray(*, submit, entrypoint, working_dir, dataset, data_connection, s3_prefix, local_queue, image,
                 num_workers, head_cpu, head_memory, worker_cpu, worker_memory, worker_gpus, tolerations,
                 admission_timeout, startup_timeout, job_timeout, pip=None):
    """Wire the tasks of a training run inside a pipeline function. Every task has caching
    off: each run must get a cluster and a job of its own."""
    teardown = teardown_ray_cluster(run_id=RUN_ID)
    teardown.set_caching_options(False)
    with dsl.ExitHandler(teardown, name="train-on-ray"):
        stage = with_data_connection(stage_dataset(dataset=dataset, run_id=RUN_ID, s3_prefix=s3_prefix), data_connection)
        cluster = provision_ray_cluster(
            run_id=RUN_ID, local_queue=local_queue, image=image, num_workers=num_workers, head_cpu=head_cpu,
            head_memory=head_memory, worker_cpu=worker_cpu, worker_memory=worker_memory, worker_gpus=worker_gpus,
            tolerations=tolerations, data_connection=data_connection, admission_timeout=admission_timeout,
            startup_timeout=startup_timeout)
        job = with_data_connection(submit(
            dashboard_url=cluster.outputs["dashboard_url"], entrypoint=entrypoint, run_id=RUN_ID,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER, working_dir=working_dir, pip=pip or [],
            env_vars={"KFP_RAY_DATA": stage.outputs["data_uri"], "KFP_RAY_OUTPUT": stage.outputs["output_uri"]}),
            data_connection)
        follow = follow_ray_job(dashboard_url=cluster.outputs["dashboard_url"], job_id=job.output,
                                cluster_name=cluster.outputs["cluster_name"], namespace=cluster.outputs["namespace"],
                                timeout=job_timeout)
        publish = with_data_connection(publish_training_results(output_uri=stage.outputs["output_uri"], run_id=RUN_ID),
                                       data_connection)
        publish.after(follow)
        for task in (stage, cluster, job, follow, publish):
            task.set_caching_options(False)
    return follow, publish
