"""`kfp-ray runs usage`: what a project's runs cost, summed from their usage ledgers in S3
(kfp-ray/usage/<YYYY-MM>/<run id>.json in the data connection's bucket, written by each
run's publish task: runtime/kfp_ray/usage.py)."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, date, datetime

TIMEOUT = (5, 30)


def add_arguments(p) -> None:
    p.add_argument("--since", help="only runs finished on or after this day, YYYY-MM-DD (default: the 1st of this month)")
    p.add_argument("--by", choices=("pipeline", "namespace", "lifecycle"), default="pipeline",
                   help="what to sum per (default pipeline)")
    p.add_argument("--json", action="store_true", help="the runs' ledgers and the sums as JSON")
    p.add_argument("--data-connection", default="aws-connection-minio",
                   help="the data connection secret the runs wrote with (default aws-connection-minio); with "
                        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_S3_ENDPOINT and AWS_S3_BUCKET set, those are used")
    p.add_argument("--namespace", "-n", help="the project the secret is in (default: the kubeconfig context's)")


def since_day(text: str | None, today: date | None = None) -> date:
    if not text:
        today = today or datetime.now(UTC).date()
        return today.replace(day=1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise SystemExit(f"--since {text!r}: not a day. Fix: give YYYY-MM-DD, e.g. --since 2026-11-01") from None


def connection_env(args) -> dict[str, str]:
    """The S3 keys: from the environment when all are there, else the data connection secret
    read through the kubeconfig's credentials (never printed)."""
    from .doctor import KEYS as keys
    from .doctor import secret_values

    if all(os.environ.get(k) for k in keys):
        return {k: os.environ[k] for k in (*keys, "AWS_DEFAULT_REGION") if os.environ.get(k)}
    from kubernetes import client, config

    from .connection import kubeconfig_path

    try:
        config.load_kube_config(config_file=kubeconfig_path())
        _, context = config.list_kube_config_contexts(config_file=kubeconfig_path())
        ns = args.namespace or (context or {}).get("context", {}).get("namespace") or "default"
        secret = client.CoreV1Api().read_namespaced_secret(args.data_connection, ns, _request_timeout=TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - said with its fix
        reason = getattr(exc, "reason", "") or type(exc).__name__
        raise SystemExit(f"cannot read data connection {args.data_connection!r} ({reason}). Fix: log in (`oc login`) "
                         "and give --namespace and --data-connection, or set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                         "AWS_S3_ENDPOINT and AWS_S3_BUCKET") from None
    values = secret_values(secret)
    missing = [k for k in keys if not values.get(k)]
    if missing:
        raise SystemExit(f"data connection {args.data_connection!r} lacks {', '.join(missing)}. Fix: edit it in the "
                         "project's Data connections")
    return values


def months(since: date, until: date) -> list[str]:
    """YYYY-MM from since's month to until's."""
    out, y, m = [], since.year, since.month
    while (y, m) <= (until.year, until.month):
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def load_ledgers(env: dict, since: date, until: date | None = None) -> list[dict]:
    """Every ledger finished on or after `since` (listed by month up to `until`, default today)."""
    from kfp_ray import s3, usage
    from kfp_ray.wait import retry

    client, bucket = s3.client(env), env["AWS_S3_BUCKET"]
    out = []
    for month in months(since, until or datetime.now(UTC).date()):
        prefix = f"{usage.LEDGER_PREFIX}/{month}/"
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                body = retry(lambda k=obj["Key"]: client.get_object(Bucket=bucket, Key=k)["Body"].read(),
                             f"read s3://{bucket}/{obj['Key']}")
                try:
                    entry = json.loads(body)
                except ValueError:
                    print(f"skipping s3://{bucket}/{obj['Key']}: not a ledger (not JSON)", file=sys.stderr)
                    continue
                if entry.get("finished_at", "")[:10] >= since.isoformat():
                    out.append(entry)
    return out


def cmd_usage(args) -> int:
    from kfp_ray import usage

    since = since_day(args.since)
    entries = load_ledgers(connection_env(args), since)
    rows = usage.summarize(entries, by=args.by)
    if args.json:
        print(json.dumps({"since": since.isoformat(), "by": args.by, "sums": rows, "runs": entries}, indent=2, sort_keys=True))
        return 0
    print(f"usage since {since}: {len(entries)} run{'s' if len(entries) != 1 else ''}")
    if not rows:
        return 0
    print(f"{args.by:32} {'runs':>5} {'CPU-h':>10} {'GPU-h':>10} {'mem GiB-h':>10} {'queued s':>10} {'preempted s':>12}")
    for r in rows:
        print(f"{str(r[args.by])[:32]:32} {r['runs']:5d} {r['cpu_hours']:10.4f} {r['gpu_hours']:10.4f} "
              f"{r['memory_gib_hours']:10.4f} {r['queued_seconds']:10.0f} {r['lost_to_preemption_seconds']:12.0f}")
    total = {k: sum(r[k] for r in rows) for k in ("runs", "cpu_hours", "gpu_hours", "memory_gib_hours",
                                                   "queued_seconds", "lost_to_preemption_seconds")}
    print(f"{'total':32} {total['runs']:5d} {total['cpu_hours']:10.4f} {total['gpu_hours']:10.4f} "
          f"{total['memory_gib_hours']:10.4f} {total['queued_seconds']:10.0f} {total['lost_to_preemption_seconds']:12.0f}")
    return 0
