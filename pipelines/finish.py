"""The exit handler of every kfp-ray training pipeline. Its own module: KFP reads the
PipelineTaskFinalStatus annotation as a type, so no `from __future__ import annotations` here."""

from kfp import dsl

from kfp_ray.components.report_run.component import report_run
from kfp_ray.components.teardown_ray_cluster.component import teardown_ray_cluster

RUN_ID = dsl.PIPELINE_JOB_ID_PLACEHOLDER


@dsl.pipeline(name="finish-run")
def finish_run(status: dsl.PipelineTaskFinalStatus, title: str = "Ray training run"):
    """The exit handler's work, two independent tasks (a report that could not run never
    holds the teardown back): delete the run's clusters, and write the run's report."""
    teardown = teardown_ray_cluster(run_id=RUN_ID)
    teardown.set_caching_options(False)
    report = report_run(status=status, run_id=RUN_ID, title=title)
    report.set_caching_options(False)
