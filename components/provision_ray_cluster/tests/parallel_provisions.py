"""A pipeline with two provision tasks in one run, one per ParallelFor iteration, wired as
pipelines/common.py wires provision (task name and id placeholders). Run by test_identity.py."""

from kfp import dsl

from kfp_ray.components.provision_ray_cluster.component import provision_ray_cluster


@dsl.pipeline(name="two-provisions")
def two_provisions(admission_timeout: int = 20):
    with dsl.ParallelFor(items=["a", "b"], parallelism=2):
        task = provision_ray_cluster(run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                                     task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, local_queue="local-queue-test",
                                     num_workers=0, head_cpu="500m", head_memory="1Gi",
                                     admission_timeout=admission_timeout)
        task.set_caching_options(False)
