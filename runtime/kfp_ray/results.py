"""Turn a job's results.json (see pipelines/jobs/README.md) into what the RHOAI UI shows:
a Model, Metrics, a confusion matrix and a Markdown report."""

from __future__ import annotations

import json

from . import s3
from .errors import KfpRayError
from .validate import Checker, s3_key_problem
from .wait import retry


def results_uri(output_uri: str) -> str:
    """Where the job's results.json is, once output_uri is checked: s3://<bucket>/<prefix>."""
    c = Checker()
    text = output_uri if isinstance(output_uri, str) else ""
    bucket, _, prefix = text[len("s3://"):].partition("/") if text.startswith("s3://") else ("", "", "")
    problem = "not an s3:// URI" if not bucket else s3_key_problem(prefix)
    if problem:
        c.fail("output_uri", f"{output_uri!r} is not the run's S3 output folder ({problem})",
               "wire stage_dataset's output_uri output, or give s3://<bucket>/<prefix>")
    c.done()
    return output_uri.rstrip("/") + "/results.json"


def stored(uri: str) -> bool:
    """Whether the object is there (a HEAD request; any failure reads as no)."""
    try:
        bucket, key = s3.split(uri)
        retry(lambda: s3.client().head_object(Bucket=bucket, Key=key), f"look for {uri}")
        return True
    except Exception:  # noqa: BLE001 - only a link in the report hangs on it
        return False


def load(results_uri: str) -> dict | None:
    """The job's results.json, or None if it wrote none (a user's script owes kfp-ray nothing)."""
    try:
        body = fetch(results_uri)
    except Exception as exc:  # noqa: BLE001 - a missing key is an answer; anything else fails the task
        if s3.not_found(exc):
            return None
        raise KfpRayError(f"could not read {results_uri} ({type(exc).__name__}: {str(exc)[:200]}). Fix: check the "
                          "data connection's keys and bucket") from None
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise KfpRayError(f"{results_uri} is not JSON ({exc}): the job must write it as "
                          "pipelines/jobs/README.md describes") from None
    if not isinstance(data, dict):
        raise KfpRayError(f"{results_uri} holds a {type(data).__name__}, not an object (pipelines/jobs/README.md)")
    return data


def numeric(metrics: dict) -> dict:
    """The metrics KFP can show (numbers, not booleans), sorted by name."""
    return {k: v for k, v in sorted(metrics.items()) if isinstance(v, (int, float)) and not isinstance(v, bool)}


def markdown_without_results(output_uri: str, results_uri: str, run_id: str, metrics: dict, log_tail: str) -> str:
    """The report of a job that wrote no results.json: what kfp-ray has of it."""
    lines = [f"# Training run {run_id}", "",
             f"The job wrote no `results.json` (looked for `{results_uri}`), so there is no model to show. "
             "Below is what the run has: the metrics the job printed as `KFP_RAY_METRICS` lines, where its "
             "outputs would be, and the end of its log (the full log is the follow task's `job_log`). For a "
             "model, a confusion matrix and a fuller report, write results.json as pipelines/jobs/README.md "
             "describes.", ""]
    numbers = numeric(metrics)
    if numbers:
        lines += ["| metric | value |", "| --- | --- |"]
        lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in numbers.items()]
    else:
        lines.append("The job printed no `KFP_RAY_METRICS` lines.")
    lines += ["", "## Where things are", "", f"- output location: `{output_uri.rstrip('/')}/`"]
    if log_tail.strip():
        fence = "~~~~" if "```" in log_tail else "```"
        lines += ["", "## End of the job log", "", fence, log_tail.rstrip(), fence]
    return "\n".join(lines) + "\n"


def fetch(uri: str) -> bytes:
    bucket, key = s3.split(uri)
    client = s3.client()
    return retry(lambda: client.get_object(Bucket=bucket, Key=key)["Body"].read(), f"read {uri}")


def markdown(results: dict, results_uri: str, run_id: str) -> str:
    m = results.get("metrics", {})
    lines = [f"# Training run {run_id}", "", f"Framework: **{results.get('framework', '?')}**", "",
             "| metric | value |", "| --- | --- |"]
    lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in sorted(m.items())]
    lines += ["", "## Where things are", "", f"- model: `{results.get('model_uri', '')}`",
              f"- results: `{results_uri}`"]
    if results.get("checkpoint_uri"):
        lines.append(f"- checkpoint: `{results['checkpoint_uri']}`")
    if results.get("trials_uri"):
        lines.append(f"- trial table: `{results['trials_uri']}`")
    if results.get("best_config"):
        lines += ["", "## Best trial", "", "```json", json.dumps(results["best_config"], indent=2, sort_keys=True), "```"]
    cm = results.get("confusion_matrix")
    if cm:
        labels = cm["labels"]
        lines += ["", "## Confusion matrix (rows: true, columns: predicted)", "",
                  "| | " + " | ".join(labels) + " |", "|" + " --- |" * (len(labels) + 1)]
        lines += [f"| **{labels[i]}** | " + " | ".join(str(v) for v in row) + " |" for i, row in enumerate(cm["matrix"])]
    return "\n".join(lines) + "\n"


def run_report(results: dict | None, run_id: str, title: str = "Ray training run", phases=(), cluster: dict | None = None,
               locations: dict | None = None, printed: dict | None = None, log_tail: str = "", status: str = "SUCCEEDED",
               failed_at: str = "", error: str = "", **more):
    """The HTML report's content (kfp_ray.report.RunReport) from results.json (None: the job
    wrote none; then the metrics it printed and the end of its log). `more`: RunReport's other
    fields (run, durations, started_at, links...)."""
    from .report import RunReport

    r = results or {}
    history = r.get("history") or {}
    cm = r.get("confusion_matrix") or {}
    where = {"model": r.get("model_uri", ""), "checkpoints": r.get("checkpoint_uri", ""),
             "trial table": r.get("trials_uri", ""), **(locations or {})}
    return RunReport(run_id=run_id, title=title, status=status, failed_at=failed_at, error=error, phases=list(phases),
                     curves=dict(history.get("series") or {}), steps=history.get("steps") or "epoch",
                     best_step=history.get("best"), labels=list(cm.get("labels") or []),
                     matrix=[list(row) for row in cm.get("matrix") or []],
                     metrics=numeric(r.get("metrics") or printed or {}), best_config=dict(r.get("best_config") or {}),
                     cluster=dict(cluster or {}), locations={k: v for k, v in where.items() if v},
                     log_tail=log_tail if results is None or status != "SUCCEEDED" else "", **more)


def _parameters(text: str) -> dict:
    """publish's `parameters`: a JSON object; anything else is shown as it came."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"parameters": text}
    return value if isinstance(value, dict) else {"parameters": text}


def preemption_phases(times: list, started_at) -> list:
    """The timeline's rows for the Kueue preemptions the job task rode out: [when preempted, when
    running again] (UTC ISO; "" while it never ran again)."""
    from datetime import datetime

    from .report import Phase

    rows = []
    for i, (at, back) in enumerate(times, 1):
        try:
            start = (datetime.fromisoformat(at) - started_at).total_seconds()
            end = (datetime.fromisoformat(back) - started_at).total_seconds() if back else start
        except (TypeError, ValueError):  # no timeline, or a time it cannot read: the count still shows
            continue
        rows.append(Phase(f"preempted ({i})", round(start, 1), round(end, 1), "waiting for Kueue and new pods",
                          "terminated"))
    return rows


def run_page(results: dict | None, run_id: str, *, title: str, output_uri: str, durations: dict, cluster: dict,
             run: dict, parameters: str = "", job_log_uri: str = "", printed: dict | None = None,
             log_tail: str = "", namespace: str = "", preempted: list | None = None, usage: dict | None = None,
             ledger_uri: str = "") -> str:
    """publish_training_results' HTML page: results.json (or what the job printed) with the
    run's parameters, image and Ray version, its tasks at their real times (runinfo.py), the
    phases' lengths, and where things are, linked to the KFP run and the S3 console where
    those exist."""
    import os

    from . import report as html
    from . import runinfo

    phases, started_at, why_not = runinfo.task_timeline(run_id, namespace)
    phases += preemption_phases(preempted or [], started_at)
    from .redact import redact

    facts = {**run, **_parameters(parameters)}
    facts = {k: redact(str(v)) for k, v in facts.items() if v not in ("", None)}  # an entrypoint may hold a key
    version = runinfo.ray_version(results, str(run.get("image", "")))
    if version:
        facts["Ray version"] = version
    resumed = (results or {}).get("resumed_from") or {}
    if resumed.get("uri"):  # a preempted run's job, submitted again, went on from its checkpoint
        facts["resumed from"] = resumed["uri"] + (f" (after epoch {resumed['epoch'] + 1})" if "epoch" in resumed else "")
    where = {"results": results_uri(output_uri)} if results is not None else {"output": output_uri.rstrip("/") + "/"}
    if job_log_uri:
        where["job log"] = job_log_uri
    if ledger_uri:
        where["usage ledger"] = ledger_uri
    logs = output_uri.rstrip("/") + "/logs/"  # the follow task's copies (jobs.LogShipper), kept with the run
    for what, name in (("job log in S3", "job.log"), ("run events in S3", "events.jsonl")):
        if stored(logs + name):
            where[what] = logs + name
    report = run_report(results, run_id, title, phases, cluster, where, printed=printed, log_tail=log_tail,
                        run=facts, durations={k: v for k, v in durations.items() if v and v > 0},
                        started_at=started_at, run_url=runinfo.kfp_run_url(run_id, namespace), usage=dict(usage or {}),
                        timeline_note=f"No timeline: {why_not}. The phases' lengths are below." if why_not else "")
    # console links for the data connection's own bucket only (the job log may be in the
    # pipeline root's store, another endpoint)
    endpoint, bucket = os.environ.get("AWS_S3_ENDPOINT", ""), os.environ.get("AWS_S3_BUCKET", "")
    report.links = {k: url for k, v in report.locations.items()
                    if (not bucket or v.startswith(f"s3://{bucket}/")) and (url := html.s3_console_url(v, endpoint))}
    return html.render(report)
