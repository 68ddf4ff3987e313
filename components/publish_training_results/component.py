from kfp.dsl import HTML, Artifact, ClassificationMetrics, Input, Markdown, Metrics, Model, Output

from kfp_ray.components._build import KUBE, S3, ray_component


@ray_component(packages=S3 + KUBE)
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
    image: str = "",
    lifecycle: str = "",
    dataset: str = "",
    entrypoint: str = "",
    parameters: str = "",
    namespace: str = "",
    admitted: str = "",
):
    """Publish a Ray training job's results to the RHOAI UI.

    Reads results.json that the job wrote to output_uri (see pipelines/jobs/README.md) and
    outputs: the model (a copy, with its S3 location in metadata `s3_uri`), the metrics
    (accuracy, loss, training time, best trial...), a confusion matrix, a Markdown report
    with links to model, checkpoints and trial table in S3, and html_report, a page the UI
    renders (no scripts, fonts or network; accessible, each chart with its data as a table):
    the run's parameters, image and Ray version, a link to the run in the project's KFP UI
    (when its Route exists), the run's tasks on a timeline at their real start and end
    times (read from the run's task pods), the phases' lengths (queued, starting, job,
    teardown), the training curves with the best epoch or trial marked, the confusion matrix
    as a heatmap, the metrics, best hyperparameters, the cluster's shape and queue, and the
    S3 locations, the job log's included (linked to the AWS S3 console when the data
    connection is AWS S3). Mount the data connection secret as env (kfp-kubernetes
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
        queued_seconds: provision_ray_cluster's queued_seconds: the report's queued phase.
        starting_seconds: provision_ray_cluster's starting_seconds: its starting phase.
        job_seconds: follow_ray_job's duration_seconds: its job phase.
        teardown_seconds: follow_ray_job's teardown_seconds: its teardown phase, until the
            cluster was gone and its quota free.
        image: The Ray image the run used, for the report.
        lifecycle: The run's lifecycle (raycluster or rayjob), for the report.
        dataset: The run's dataset, for the report.
        entrypoint: The job's entrypoint, for the report.
        parameters: The run's other parameters as a JSON object of strings, for the report.
        namespace: Where the run's task pods are (for the timeline); empty uses the
            pipeline's own.
        admitted: provision_ray_cluster's admitted output (what Kueue admitted), for the
            usage ledger; empty: run_ray_job's, read from job_log.

    The usage ledger (CPU-, GPU- and memory GiB-hours of the quota the run held, seconds
    queued, starting, running and lost to preemption) is published as metrics, in both
    reports, and as usage.json beside results.json and kfp-ray/usage/<month>/<run id>.json
    in the bucket, which `kfp-ray runs usage` sums.
    """
    from kfp_ray import results as res

    # Kueue preemptions the job task rode out (its metrics): in the run's metrics and report
    ran = dict(job_metrics.metadata) if job_metrics is not None else {}
    preempted = {k: float(ran[k]) for k in ("preemptions", "preempted_seconds") if k in ran}
    # the usage ledger: what Kueue admitted x how long the quota was held (kfp_ray/usage.py)
    import json
    from datetime import UTC, datetime

    from kfp_ray import usage
    from kfp_ray.kube import current_namespace

    logged = (job_log.metadata or {}) if job_log is not None else {}
    try:  # bookkeeping: a ledger that cannot be made is said, and the results are still published
        entry = usage.ledger(json.loads(admitted) if admitted else logged.get("admitted") or {}, queued=queued_seconds,
                             starting=starting_seconds, running=job_seconds, teardown=teardown_seconds,
                             released_at=logged.get("released_at") or "",
                             preempted=preempted.get("preempted_seconds", 0.0),
                             requeued=usage.requeued_seconds(logged.get("preemptions") or []), run_id=run_id,
                             pipeline=title, namespace=namespace or current_namespace(), lifecycle=lifecycle,
                             finished_at=datetime.now(UTC).isoformat(timespec="seconds"))
    except Exception as exc:  # noqa: BLE001
        print(f"[kfp-ray] no usage ledger for this run ({type(exc).__name__}: {exc})")
        entry = None
    ledger_uri = usage.publish(entry, output_uri) if entry else ""
    ledger_metrics = {**(usage.ledger_metrics(entry) if entry else {}), **preempted}  # beside the job's own
    if entry:
        print(f"[kfp-ray] usage: {entry['cpu_hours']:.4f} CPU-hours, {entry['gpu_hours']:.4f} GPU-hours, "
              f"{entry['memory_gib_hours']:.4f} memory GiB-hours ({entry['seconds']['held']:.1f}s of quota held; "
              f"admitted: {entry['admitted_source']})")
    # the HTML report (KFP's UI renders it): the run's facts, its tasks' real times, the phases
    page = dict(usage=usage.report_rows(entry) if entry else {}, ledger_uri=ledger_uri,title=title, output_uri=output_uri, namespace=namespace,
                durations={"queued": queued_seconds, "starting": starting_seconds, "job": job_seconds,
                           "teardown": teardown_seconds, "lost to preemption": preempted.get("preempted_seconds", 0)},
                cluster={k: v for k, v in (("name", cluster_name), ("shape", cluster_shape)) if v},
                run={"pipeline": title, "lifecycle": lifecycle, "dataset": dataset, "entrypoint": entrypoint,
                     "image": image, "preemptions": int(preempted.get("preemptions", 0)) or ""},
                parameters=parameters,
                job_log_uri=job_log.uri if job_log is not None else "",
                preempted=(job_log.metadata or {}).get("preemptions") or [] if job_log is not None else [])

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
        for name, value in {**res.numeric(printed), **ledger_metrics}.items():
            metrics.log_metric(name, float(value))
        with open(report.path, "w") as fh:
            fh.write(res.markdown_without_results(output_uri, results_uri, run_id, printed, tail) + (usage.markdown(entry, ledger_uri) if entry else ""))
        with open(html_report.path, "w") as fh:
            fh.write(res.run_page(None, run_id, printed=printed, log_tail=tail, **page))
        print(f"[kfp-ray] the job wrote no results.json at {results_uri}: published its printed metrics and log")
        return
    with open(model.path, "wb") as fh:
        fh.write(res.fetch(data["model_uri"]))
    model.metadata.update({"s3_uri": data["model_uri"], "framework": data.get("framework", ""),
                           "format": data.get("model_format", ""), "results_uri": results_uri})
    for name, value in {**res.numeric(data.get("metrics", {})), **ledger_metrics}.items():
        metrics.log_metric(name, float(value))
    cm = data.get("confusion_matrix")
    if cm:
        confusion_matrix.log_confusion_matrix(cm["labels"], cm["matrix"])
    with open(report.path, "w") as fh:
        fh.write(res.markdown(data, results_uri, run_id) + (usage.markdown(entry, ledger_uri) if entry else ""))
    with open(html_report.path, "w") as fh:
        fh.write(res.run_page(data, run_id, **page))
