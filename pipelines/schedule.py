"""`kfp-ray schedule NAME --cron C | --every D`: a recurring run on a Data Science Pipelines
server (the dashboard's "Schedules"). KFP's cron has 6 fields, seconds first
('0 0 2 * * *' is 02:00 every day); a 5-field cron is refused with the 6-field one to use.
--every takes 90s, 15m, 6h or 1d. --max-concurrency caps runs of it at once (1..10);
--no-catchup starts only the latest missed run after a pause, not every one. The YAML sent:
--file PATH, DIR/NAME.yaml of a `kfp-ray compile --out DIR` build (--from DIR), or the default
build."""

from __future__ import annotations

import argparse
import re

from . import connection, package
from .cli_args import UsageError, cron_fields, parse_params
from .queue_default import with_default_queue

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_parser(sub) -> None:
    p = sub.add_parser("schedule", help="create a recurring run (cron or period)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    package.add_arguments(p)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="6 fields, seconds first, e.g. '0 0 2 * * *'")
    when.add_argument("--every", help="a period: 90s, 15m, 6h, 1d")
    p.add_argument("--max-concurrency", type=int, default=1, help="runs of it at once, 1..10 (default 1)")
    p.add_argument("--no-catchup", action="store_true", help="after a pause, run only the latest missed time")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="a pipeline parameter (repeatable)")
    p.add_argument("--experiment", default="kfp-ray", help="its runs' experiment, created if missing (default kfp-ray)")
    p.add_argument("--schedule-name", help="the recurring run's name (default: NAME-schedule)")
    connection.add_arguments(p)
    p.set_defaults(fn=cmd_schedule)


def every_seconds(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text or "")
    if not m or int(m.group(1)) < 1:
        raise UsageError(f"--every {text!r}: write a period as a whole number and a unit: 90s, 15m, 6h or 1d")
    return int(m.group(1)) * UNITS[m.group(2) or "s"]


def cmd_schedule(args) -> int:
    cron = cron_fields(args.cron) if args.cron else None
    period = every_seconds(args.every) if args.every else None
    if not 1 <= args.max_concurrency <= 10:
        raise UsageError(f"--max-concurrency {args.max_concurrency}: KFP takes 1 to 10")
    with package.resolve(args) as pkg:
        params = parse_params(pkg.name, args.param or [], pkg.inputs())
        params = with_default_queue(params, pkg.inputs(), args.namespace)
        client = connection.connect(args)
        experiment = client.create_experiment(args.experiment)
        rr = client.create_recurring_run(
            experiment.experiment_id, args.schedule_name or f"{pkg.name}-schedule", cron_expression=cron,
            interval_second=period, max_concurrency=args.max_concurrency, no_catchup=args.no_catchup, params=params,
            pipeline_package_path=str(pkg.path))
    print(f"recurring run {rr.recurring_run_id}: {f'cron {cron}' if cron else f'every {period}s'}, "
          f"at most {args.max_concurrency} at once{', no catch-up' if args.no_catchup else ''}")
    return 0
