from kfp.dsl import HTML, Artifact, ClassificationMetrics, Input, Markdown, Metrics, Model, Output

from kfp_ray.components._build import S3, ray_component


@ray_component(packages=S3)
def publish_training_results(
    output_uri: str,
    run_id: str,
    model: Output[Model],
    metrics: Output[Metrics],
    confusion_matrix: Output[ClassificationMetrics],
    report: Output[Markdown],
    html_report: Output[HTML],
    job_log: Input[Artifact] = None,
    job_metrics: Input[Metrics] = None,
    title: str = "Ray training run",
    cluster_name: str = "",
    cluster_shape: str = "",
    queued_seconds: float = 0.0,
    starting_seconds: float = 0.0,
    job_seconds: float = 0.0,
    teardown_seconds: float = 0.0,
):
    """Publish a Ray training job's results to the RHOAI UI.

    Reads results.json that the job wrote to output_uri (see pipelines/jobs/README.md) and
    outputs: the model (a copy, with its S3 location in metadata `s3_uri`), the metrics
    (accuracy, loss, training time, best trial...), a confusion matrix, a Markdown report
    with links to model, checkpoints and trial table in S3, and html_report, a page the UI
    renders (no scripts, fonts or network): the run's timeline as bars (queued, starting,
    job, teardown), the training curves with the best epoch or trial marked, the confusion
    matrix as a heatmap, the metrics, best hyperparameters, the cluster's shape and queue,
    and the S3 locations. Mount the data connection secret as env (kfp-kubernetes
    use_secret_as_env).

    A job that wrote no results.json (any training script of your own) does not fail the
    run: the report says so and shows what there is (the metrics the job printed as
    KFP_RAY_METRICS lines, the output location, the end of its log); the model artifact is
    then a note pointing at the output location.

    Args:
        output_uri: The run's s3:// output folder (stage_dataset's output_uri).
        run_id: The pipeline run's id, for the report's title.
        job_log: follow_ray_job's job_log, shown in the report when there is no results.json.
        job_metrics: follow_ray_job's metrics, published when there is no results.json.
        title: The HTML report's title (the pipeline's name).
        cluster_name: provision_ray_cluster's cluster_name, for the report.
        cluster_shape: provision_ray_cluster's shape (queue, head, workers), for the report.
        queued_seconds: provision_ray_cluster's queued_seconds: the timeline's first bar.
        starting_seconds: provision_ray_cluster's starting_seconds: the timeline's second bar.
        job_seconds: follow_ray_job's duration_seconds: the timeline's job bar.
        teardown_seconds: follow_ray_job's teardown_seconds: the timeline's last bar, until
            the cluster was gone and its quota free.
    """
    from kfp_ray import report as html
    from kfp_ray import results as res

    # the HTML report (KFP's UI renders it): phases laid end to end from the tasks' durations
    phases, t = [], 0.0
    for name, seconds in (("queued", queued_seconds), ("starting", starting_seconds), ("job", job_seconds),
                          ("teardown", teardown_seconds)):
        if seconds and seconds > 0:
            phases.append(html.Phase(name, t, t + seconds))
            t += seconds
    cluster = {k: v for k, v in (("name", cluster_name), ("shape", cluster_shape)) if v}

    results_uri = res.results_uri(output_uri)
    data = res.load(results_uri)
    if data is None:
        printed = dict(job_metrics.metadata) if job_metrics is not None else {}
        tail = ""
        if job_log is not None:
            with open(job_log.path, errors="replace") as fh:
                tail = "\n".join(fh.read().splitlines()[-40:])
        with open(model.path, "w") as fh:
            fh.write(f"No model: the job wrote no results.json. Its outputs, if any, are under {output_uri}\n")
        model.metadata.update({"s3_uri": output_uri, "results_uri": ""})
        for name, value in res.numeric(printed).items():
            metrics.log_metric(name, float(value))
        with open(report.path, "w") as fh:
            fh.write(res.markdown_without_results(output_uri, results_uri, run_id, printed, tail))
        with open(html_report.path, "w") as fh:
            fh.write(html.render(res.run_report(None, run_id, title, phases, cluster, {"output": output_uri},
                                                printed=printed, log_tail=tail)))
        print(f"[kfp-ray] the job wrote no results.json at {results_uri}: published its printed metrics and log")
        return
    with open(model.path, "wb") as fh:
        fh.write(res.fetch(data["model_uri"]))
    model.metadata.update({"s3_uri": data["model_uri"], "framework": data.get("framework", ""),
                           "format": data.get("model_format", ""), "results_uri": results_uri})
    for name, value in res.numeric(data.get("metrics", {})).items():
        metrics.log_metric(name, float(value))
    cm = data.get("confusion_matrix")
    if cm:
        confusion_matrix.log_confusion_matrix(cm["labels"], cm["matrix"])
    with open(report.path, "w") as fh:
        fh.write(res.markdown(data, results_uri, run_id))
    with open(html_report.path, "w") as fh:
        fh.write(html.render(res.run_report(data, run_id, title, phases, cluster, {"results": results_uri})))
