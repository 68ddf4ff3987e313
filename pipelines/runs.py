"""`kfp-ray runs list|get|cancel`: the runs on a Data Science Pipelines server.

  runs list [--experiment E] [--limit N]   newest first: id, state, created, name
  runs get RUN_ID                          the run's state, error and tasks
  runs cancel RUN_ID [--wait]              terminate it, as the dashboard's Stop does (its exit
                                           handler still runs; KFP on Argo ends it FAILED)
  runs usage [--since DAY] [--by pipeline] CPU-, GPU- and memory GiB-hours of the project's runs,
                                           summed from their usage ledgers in S3"""

from __future__ import annotations

import argparse
import sys

from . import connection


def add_parser(sub) -> None:
    p = sub.add_parser("runs", help="list, inspect and cancel runs on a Data Science Pipelines server",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True)
    ls = verbs.add_parser("list", help="the newest runs", description="The newest runs, newest first: id, state, "
                          "created, name.")
    ls.add_argument("--experiment", help="only this experiment's runs (by name)")
    ls.add_argument("--limit", type=int, default=20, help="how many (default 20, at most 200)")
    get = verbs.add_parser("get", help="one run: state, error, tasks",
                           description="One run: its state, its error, and each task's state.")
    get.add_argument("run_id", help="the run's id (`runs list`, or the dashboard's run details)")
    cancel = verbs.add_parser("cancel", help="terminate a run",
                              description="Terminate a run as the dashboard's Stop does: its running tasks get "
                                          "SIGTERM, its exit handler still runs, and KFP on Argo ends it FAILED.")
    cancel.add_argument("run_id", help="the run's id")
    cancel.add_argument("--wait", action="store_true", help="wait until it has ended (its exit handler included)")
    for v in (ls, get, cancel):
        connection.add_arguments(v)
    from . import usage_cli

    used = verbs.add_parser("usage", help="what the project's runs cost (from their usage ledgers in S3)",
                            description=usage_cli.__doc__)
    usage_cli.add_arguments(used)
    used.set_defaults(fn=usage_cli.cmd_usage)
    ls.set_defaults(fn=cmd_list)
    get.set_defaults(fn=cmd_get)
    cancel.set_defaults(fn=cmd_cancel)


def cmd_list(args) -> int:
    client = connection.connect(args)
    experiment_id = client.get_experiment(experiment_name=args.experiment).experiment_id if args.experiment else None
    runs = client.list_runs(experiment_id=experiment_id, page_size=max(1, min(args.limit, 200)),
                            sort_by="created_at desc").runs or []
    for r in runs:
        print(f"{r.run_id}  {r.state or '':10} {r.created_at:%Y-%m-%d %H:%M:%S}  {r.display_name}")
    if not runs:
        print("no runs")
    return 0


def cmd_get(args) -> int:
    from .run_tasks import states

    run = connection.connect(args).get_run(args.run_id)
    print(f"run {run.run_id} ({run.display_name}): {run.state}")
    if run.error and run.error.message:  # the server could not read the run (KFP sets no error for a failed run)
        print(f"error: {run.error.message}")
    for name, state in states(run).items():
        print(f"  {name:28} {state}")
    return 0


def cmd_cancel(args) -> int:
    client = connection.connect(args)
    client.terminate_run(args.run_id)
    print(f"terminating run {args.run_id}", flush=True)
    if not args.wait:
        return 0
    from .follow import Follower

    run = Follower(client.get_run, sys.stdout).follow(args.run_id, 600.0)
    print(f"run {run.run_id} {run.state}")
    return 0
