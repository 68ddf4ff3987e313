"""What each kfp-ray task asks the cluster for: CPU and memory requests (what the scheduler and
a project's ResourceQuota count) and limits (what a LimitRange's max is checked against), on
every task of the shipped pipelines.

Sized from measurement: the peak RSS of each task's executor process, sampled every 2 s over a
whole `make test` on 2026-11-27 (run-ray-driver 312 MB, provision-ray-cluster and run-ray-job
259 MB, stage-dataset 155 MB, publish-training-results 93 MB, teardown-ray-cluster 77 MB,
follow- and submit-ray-job 74 MB, sweep-ray-clusters 51 MB), and the pip run that starts every
clean task (about 90 MB).
Requests are that peak rounded up; limits leave room for a longer job log and a bigger report.
CPU: the tasks wait on the cluster most of their life (100m); one core covers the pip install
and the imports at their start."""

from __future__ import annotations

# component name -> (cpu request, memory request, cpu limit, memory limit)
SIZES = {
    "provision-ray-cluster": ("100m", "384Mi", "1", "1Gi"),
    "run-ray-job": ("100m", "384Mi", "1", "1Gi"),
    "run-ray-driver": ("250m", "512Mi", "1", "2Gi"),
    "stage-dataset": ("250m", "256Mi", "1", "1Gi"),
    "submit-ray-job": ("100m", "192Mi", "1", "512Mi"),
    "follow-ray-job": ("100m", "192Mi", "1", "1Gi"),
    "publish-training-results": ("100m", "192Mi", "1", "1Gi"),
    "teardown-ray-cluster": ("100m", "192Mi", "1", "1Gi"),
    "sweep-ray-clusters": ("100m", "192Mi", "1", "512Mi"),
}


def size_tasks() -> None:
    """Give every task of the pipeline being defined its SIZES (call it last in the pipeline's
    function: it sizes the tasks made so far)."""
    from kfp.dsl import pipeline_context

    for task in pipeline_context.Pipeline.get_default_pipeline().tasks.values():
        size = SIZES.get(task.component_spec.name)
        if size is not None:
            cpu, memory, cpu_limit, memory_limit = size
            task.set_cpu_request(cpu).set_memory_request(memory).set_cpu_limit(cpu_limit).set_memory_limit(memory_limit)
