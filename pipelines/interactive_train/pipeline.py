"""Seed demo 2: a Ray client driver as a pipeline step. The pipeline task connects to its
Kueue-queued RayCluster with ray.init("ray://..."), over OpenShift AI's Ray mTLS (KubeRay's
cert-manager certificates on 3.x, the CodeFlare operator's on 2.x), and trains with Ray Train
from there; Ray Train checkpoints to S3 through the data connection."""

from pathlib import Path

from kfp import dsl

from kfp_ray.components.run_ray_driver.component import run_ray_driver_with_code
from kfp_ray.components.stage_dataset.component import stage_dataset
from kfp_ray.pipelines.common import RUN_ID, exit_handlers, provision, publish_run, with_data_connection
from kfp_ray.pipelines.sizes import size_tasks

# The drivers (pipelines/drivers), embedded in the driver task as `code/`.
run_with_drivers = run_ray_driver_with_code(Path(__file__).resolve().parent.parent / "drivers")


@dsl.pipeline(name="interactive-train", description="Ray Train from a Ray client driver in the pipeline task (mTLS to "
              "the Kueue-queued RayCluster's client port), digits data from S3, checkpoints to S3, metrics and report.")
def interactive_train(
    epochs: int = 8,
    learning_rate: float = 0.5,
    train_workers: int = 2,
    data_connection: str = "aws-connection-minio",
    s3_prefix: str = "",
    local_queue: str = "",
    image: str = "",
    num_workers: int = 1,
    head_cpu: str = "1",
    head_memory: str = "2Gi",
    worker_cpu: str = "2",
    worker_memory: str = "2Gi",
    admission_timeout: int = 600,
    startup_timeout: int = 900,
):
    with exit_handlers("interactive_train", data_connection):
        stage = with_data_connection(stage_dataset(dataset="digits", run_id=RUN_ID, s3_prefix=s3_prefix), data_connection)
        cluster = provision(
            data_connection, local_queue=local_queue, image=image, num_workers=num_workers, head_cpu=head_cpu,
            head_memory=head_memory, worker_cpu=worker_cpu, worker_memory=worker_memory, worker_gpus=0, tolerations=[],
            admission_timeout=admission_timeout, startup_timeout=startup_timeout)
        driver = with_data_connection(run_with_drivers(
            dashboard_url=cluster.outputs["dashboard_url"], cluster_name=cluster.outputs["cluster_name"],
            namespace=cluster.outputs["namespace"], driver="code/interactive_train.py", function="train",
            kwargs=f'{{"epochs": {epochs}, "learning_rate": {learning_rate}, "num_workers": {train_workers}}}',
            data_uri=stage.outputs["data_uri"], output_uri=stage.outputs["output_uri"]), data_connection)
        publish = publish_run(stage, cluster, driver, driver.outputs["log"], "interactive_train", data_connection,
                              admitted=cluster.outputs["admitted"])
        for task in (stage, cluster, driver, publish):
            task.set_caching_options(False)
    size_tasks()
