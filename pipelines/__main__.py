"""kfp-ray pipelines from the command line.

    kfp-ray list
    kfp-ray compile [--check]
    kfp-ray run NAME --local [--param k=v ...] [--verbose] [--keep-outputs DIR]
    kfp-ray upload NAME [--version V] [--file PATH | --from DIR]
    kfp-ray submit NAME [--param k=v ...] [--experiment E] [--wait] [--file PATH | --from DIR]
    kfp-ray schedule NAME (--cron "0 0 2 * * *" | --every 6h) [--max-concurrency N] [--no-catchup] [--file|--from]
    kfp-ray runs list|get|cancel
    kfp-ray gc [--namespace N | --all-namespaces] [--delete]
    kfp-ray doctor [--namespace N]
    kfp-ray cluster up|status|details|list|down   (a Ray cluster from the terminal)

upload, submit, schedule and runs reach the Data Science Pipelines server at --host, $KFP_HOST,
or the namespace's DSPA route, with the token in $KFP_TOKEN, a --token-file, or the kubeconfig
(`oc login`); never a token on the command line. They send compiled/NAME.yaml (NAME compiled
now where there is none), --file PATH, or DIR/NAME.yaml of a `kfp-ray compile --out DIR` build.
"""

from __future__ import annotations

import argparse
import sys

from kfp_ray.errors import KfpRayError

from . import cluster_cli, doctor, gc, registry, run_local, runs, schedule, submit, upload
from . import compile as compile_cli
from .cli_args import UsageError
from .connection import ConnectionProblem


def cmd_list(args) -> int:
    for name in registry.PIPELINES:
        print(f"{name:14} {registry.description(name)}")
    return 0


class Parser(argparse.ArgumentParser):
    """No abbreviated options: `--token` must not quietly mean `--token-file`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kfp-ray", description=__doc__.splitlines()[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    sub.add_parser("list", help="list the pipelines",
                   description="The pipelines kfp-ray ships, each with its description.").set_defaults(fn=cmd_list)
    for module in (compile_cli, run_local, upload, submit, schedule, runs, gc, doctor, cluster_cli):
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KfpRayError as exc:  # bad input (2), or what the cluster said (1): its message says what to change
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    except ConnectionProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from kfp_server_api.exceptions import ApiException

        if not isinstance(exc, ApiException):
            raise
        print(f"error: the pipelines server answered {exc.status} {exc.reason}: {api_message(exc)}", file=sys.stderr)
        return 1


def api_message(exc) -> str:
    """The message of a grpc-gateway error body, else its start."""
    import json

    try:
        return json.loads(exc.body).get("message") or exc.body[:200]
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or "")[:200]


if __name__ == "__main__":
    sys.exit(main())
