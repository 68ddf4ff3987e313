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


def load(results_uri: str) -> dict:
    try:
        body = fetch(results_uri)
    except Exception as exc:  # noqa: BLE001
        raise KfpRayError(f"the job left no results at {results_uri} ({type(exc).__name__}): it must write "
                          "results.json to $KFP_RAY_OUTPUT (see pipelines/jobs/README.md)") from None
    return json.loads(body)


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
