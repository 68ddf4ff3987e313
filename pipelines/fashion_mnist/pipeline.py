"""Seed demo 1: a Ray Train data-parallel TorchTrainer over N workers (CPU here, GPU-ready on
the cluster), data staged in S3, checkpoints through Ray Train storage on S3, final model,
metrics, confusion matrix and report."""

from kfp import dsl

from kfp_ray.pipelines.common import job_tasks, train_on_ray, with_lifecycle_doc

follow_job, run_job = job_tasks("fashion_mnist_train")


@dsl.pipeline(name="fashion-mnist", description="Ray Train (TorchTrainer) data-parallel classifier on a Kueue-queued "
              "RayCluster; data and checkpoints in S3. dataset=fashion_mnist on a cluster, digits offline.")
@with_lifecycle_doc("Ray Train data-parallel classifier on a Kueue-queued cluster.")
def fashion_mnist(
    dataset: str = "digits",
    epochs: int = 15,
    training_workers: int = 2,
    use_gpu: bool = False,
    data_connection: str = "aws-connection-minio",
    s3_prefix: str = "",
    local_queue: str = "",
    priority_class: str = "",
    image: str = "",
    num_workers: int = 2,
    head_cpu: str = "1",
    head_memory: str = "2Gi",
    worker_cpu: str = "1",
    worker_memory: str = "2Gi",
    worker_gpus: int = 0,
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
        title="fashion_mnist",
        follow=follow_job, working_dir="code",
        entrypoint=f"python fashion_mnist_train.py --workers {training_workers} --epochs {epochs} --use-gpu {use_gpu}",
        dataset=dataset, data_connection=data_connection, s3_prefix=s3_prefix, local_queue=local_queue, priority_class=priority_class,
        image=image, num_workers=num_workers, head_cpu=head_cpu, head_memory=head_memory, worker_cpu=worker_cpu,
        worker_memory=worker_memory, worker_gpus=worker_gpus,
        # Tolerate GPU nodes' taint (harmless where there is none).
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        admission_timeout=admission_timeout, startup_timeout=startup_timeout, job_timeout=job_timeout, max_preemptions=max_preemptions,
        requirements_file="requirements/fashion_mnist_train.txt", install_requirements=install_requirements,
        pip=extra_requirements, pip_index_url=pip_index_url, pip_trusted_host=pip_trusted_host,
        lifecycle=lifecycle, run=run_job)
