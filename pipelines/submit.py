"""`kfp-ray submit NAME [--param k=v] [--experiment E] [--wait] [--file PATH | --from DIR]`: start
a run of a compiled pipeline on a Data Science Pipelines server, as the dashboard's "Create run"
does (the YAML: --file, DIR/NAME.yaml of a `kfp-ray compile --out DIR` build, or the default
build). The experiment is created when missing and reused when present. With --wait, follow the run's
tasks until it ends: the exit code is 0 only when it SUCCEEDED (1 when it failed or was
cancelled; kfp.Client's own wait never returns on CANCELED)."""

from __future__ import annotations

import argparse
import sys
import time

from . import connection, package
from .cli_args import parse_params
from .queue_default import with_default_queue

WAIT_TIMEOUT_S = 24 * 3600.0


def add_parser(sub) -> None:
    p = sub.add_parser("submit", help="start a run on a Data Science Pipelines server",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    package.add_arguments(p)
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="a pipeline parameter (repeatable)")
    p.add_argument("--experiment", default="kfp-ray", help="the run's experiment, created if missing (default kfp-ray)")
    p.add_argument("--run-name", help="the run's name (default: NAME-<local time>)")
    p.add_argument("--wait", action="store_true", help="follow the run until it ends; exit 1 unless it SUCCEEDED")
    p.add_argument("--timeout", type=float, default=WAIT_TIMEOUT_S, help="with --wait: seconds to wait (default 1 day)")
    connection.add_arguments(p)
    p.set_defaults(fn=cmd_submit)


def cmd_submit(args) -> int:
    with package.resolve(args) as pkg:
        params = parse_params(pkg.name, args.param or [], pkg.inputs())  # checked before anything is sent
        params = with_default_queue(params, pkg.inputs(), args.namespace)
        client = connection.connect(args)
        experiment = client.create_experiment(args.experiment)  # get-or-create by name
        run = client.run_pipeline(experiment.experiment_id,
                                  args.run_name or f"{pkg.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  pipeline_package_path=str(pkg.path), params=params)
    print(f"submitted run {run.run_id} in experiment {args.experiment}", flush=True)
    if not args.wait:
        return 0
    return report(wait(client, run.run_id, args.timeout))


def wait(client, run_id: str, timeout: float):
    from .follow import Follower
    from .run_tasks import run_reader

    return Follower(run_reader(client), sys.stdout).follow(run_id, timeout)


def report(run) -> int:
    """Print how the run ended; its exit code."""
    from .run_tasks import states

    failed = [name for name, state in states(run).items() if state == "FAILED"]
    # KFP's API says which tasks failed, not why: their pods' logs do (`kubectl logs -l pipeline/runid=...`)
    why = f" (failed: {', '.join(failed)}; their logs: kubectl logs -l pipeline/runid={run.run_id})" if failed else ""
    print(f"run {run.run_id} {run.state}{why}", flush=True)
    return 0 if run.state == "SUCCEEDED" else 1
