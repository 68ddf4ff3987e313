"""`kfp-ray gc`: the lease sweeper from the command line.

Lists kfp-ray's RayClusters (label app.kubernetes.io/managed-by=kfp-ray) and their leases
(annotation kfp-ray.io/lease-expires); those whose lease has expired have no task left that
uses them (a deleted run, a killed task). Dry run by default; --delete deletes them, waits
until they are gone and says what it freed. Clusters without kfp-ray's labels are never
touched. Runs as whoever $KUBECONFIG names (in a pipeline: the kfp_ray_gc pipeline)."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    g = sub.add_parser("gc", help="find (and with --delete, delete) kfp-ray RayClusters whose lease expired",
                       description="\n".join(__doc__.splitlines()[2:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    where = g.add_mutually_exclusive_group()
    where.add_argument("--namespace", "-n", help="the namespace (default: the kubeconfig context's)")
    where.add_argument("--all-namespaces", "-A", action="store_true",
                       help="every namespace (needs list on rayclusters cluster-wide)")
    g.add_argument("--delete", action="store_true", help="delete the expired ones (default: dry run)")
    g.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each deletion (default 300)")
    g.set_defaults(fn=cmd_gc)


def cmd_gc(args) -> int:
    from kfp_ray import kube, lease
    from kfp_ray.errors import KfpRayError
    from kfp_ray.validate import Checker

    c = Checker()  # before anything is listed or deleted, as the sweep component checks its inputs
    c.positive_seconds("--timeout", args.timeout, example=300)
    if args.namespace:
        c.dns_label("--namespace", args.namespace)
    c.done()  # an InputError: main says it in one line, exit 2
    try:
        ns = None if args.all_namespaces else (args.namespace or kube.current_namespace())
        where = "in all namespaces" if ns is None else f"in namespace {ns}"
        entries = lease.sweep(ns, delete=args.delete, timeout=args.timeout)
    except KfpRayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - an API error, said in one line
        print(f"error: {lease.one_line(exc)}", file=sys.stderr)
        return 1
    print(lease.render(entries, args.delete, where), flush=True)
    if not args.delete and any(e.action == "would delete" for e in entries):
        print("Add --delete to delete them.")
    return 1 if any(e.action == "failed" for e in entries) else 0
