from kfp.dsl import HTML, Output

from kfp_ray.components._build import KUBE, ray_component


@ray_component(packages=KUBE)
def report_run(
    status: dict,
    run_id: str,
    html_report: Output[HTML],
    title: str = "Ray training run",
    namespace: str = "",
):
    """Write the run's HTML report from its exit handler, whatever became of the run: the
    page says which task failed and why (the last error line of its log, and the end of that
    log, redacted), and shows when each task ran as a timeline. On success it shows the
    timeline and points at publish_training_results' html_report, which has the results.

    Use it in an exit handler: kfp-ray's pipelines run it beside the teardown in finish_run
    (pipelines/finish.py), a graph whose PipelineTaskFinalStatus it gets as a dict. It reads
    the run's task pods (pods list, pods/log get: DSPO's pipeline-runner Role allows both).
    It never fails the run: what it cannot read, the page says.

    Args:
        status: The run's final status, as KFP passes a PipelineTaskFinalStatus on: state,
            error {code, message}, pipelineJobResourceName, pipelineTaskName.
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER).
        title: The report's title (the pipeline's name).
        namespace: Where the run's pods are; empty: the pipeline's own.

    Returns:
        html_report: The report page (KFP's UI renders it).
    """
    from kfp_ray.tasks import report_run as report

    with open(html_report.path, "w") as fh:
        fh.write(report(state=str(status.get("state", "")), error_message=str((status.get("error") or {}).get("message", "")),
                        run_id=run_id, title=title, namespace=namespace))
