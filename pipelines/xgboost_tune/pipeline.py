"""Seed demo 3: Ray Tune over XGBoost hyperparameters, several concurrent trials in one
Kueue-admitted RayCluster, breast-cancer data from S3, best model and trial table to S3."""

from kfp import dsl

from kfp_ray.pipelines.common import job_tasks, train_on_ray, with_lifecycle_doc

follow_job, run_job = job_tasks("xgboost_tune")


@dsl.pipeline(name="xgboost-tune", description="Ray Tune over XGBoost hyperparameters on a Kueue-queued RayCluster "
              "(breast cancer data from S3; best model, trial table, metrics and report).")
@with_lifecycle_doc("Ray Tune over XGBoost hyperparameters on a Kueue-queued cluster.")
def xgboost_tune(
    samples: int = 6,
    concurrent_trials: int = 3,
    boosting_rounds: int = 60,
    data_connection: str = "aws-connection-minio",
    s3_prefix: str = "",
    local_queue: str = "",
    priority_class: str = "",
    image: str = "",
    num_workers: int = 0,  # a head-only cluster: 3 trials of 1 CPU fit on it, one Ray node to start
    head_cpu: str = "3",
    head_memory: str = "4Gi",
    worker_cpu: str = "2",
    worker_memory: str = "2Gi",
    admission_timeout: int = 600,
    startup_timeout: int = 900,
    job_timeout: int = 3600,
    max_preemptions: int = 3,
    install_requirements: bool = True,
    extra_requirements: list = [],
    pip_index_url: str = "",
    pip_trusted_host: str = "",
    lifecycle: str = "raycluster",
):
    train_on_ray(
        title="xgboost_tune",
        follow=follow_job, working_dir="code",
        entrypoint=f"python xgboost_tune.py --samples {samples} --concurrent {concurrent_trials} --rounds {boosting_rounds}",
        dataset="breast_cancer", data_connection=data_connection, s3_prefix=s3_prefix, local_queue=local_queue, priority_class=priority_class,
        image=image, num_workers=num_workers, head_cpu=head_cpu, head_memory=head_memory, worker_cpu=worker_cpu,
        worker_memory=worker_memory, worker_gpus=0, tolerations=[], admission_timeout=admission_timeout,
        startup_timeout=startup_timeout, job_timeout=job_timeout, max_preemptions=max_preemptions,
        requirements_file="requirements/xgboost_tune.txt", install_requirements=install_requirements,
        pip=extra_requirements, pip_index_url=pip_index_url, pip_trusted_host=pip_trusted_host,
        lifecycle=lifecycle, run=run_job)
