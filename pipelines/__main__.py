"""kfp-ray pipelines from the command line.

    kfp-ray list
    kfp-ray compile [--check]
    kfp-ray run NAME --local [--param k=v ...] [--verbose]
    kfp-ray submit NAME --host URL [--token T] [--param k=v ...] [--experiment E]
    kfp-ray schedule NAME --host URL --cron "0 0 2 * * *" [--param k=v ...]
    kfp-ray gc [--namespace N | --all-namespaces] [--delete]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import compile as compile_cli
from . import gc, registry


class UsageError(Exception):
    pass


def pipeline_inputs(name: str) -> dict[str, dict]:
    """The pipeline's parameters: name -> {type, default?}, from its compiled spec."""
    pipeline = registry.load(name)
    spec = pipeline.pipeline_spec.root.input_definitions.parameters
    out = {}
    for key, p in spec.items():
        entry = {"type": p.parameter_type}
        if p.HasField("default_value"):
            from google.protobuf import json_format

            entry["default"] = json_format.MessageToDict(p.default_value)
        out[key] = entry
    return out


_TYPES = {1: "float", 2: "int", 3: "str", 4: "bool", 5: "list", 6: "dict"}  # pipeline_spec ParameterType


def parse_params(name: str, pairs: list[str]) -> dict:
    inputs = pipeline_inputs(name)
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--param {pair!r}: write it as key=value")
        key, value = pair.split("=", 1)
        if key not in inputs:
            raise UsageError(f"--param {key}: {name} has no such parameter; it has: {', '.join(sorted(inputs))}")
        kind = _TYPES.get(inputs[key]["type"], "str")
        try:
            if kind == "int":
                out[key] = int(value)
            elif kind == "float":
                out[key] = float(value)
            elif kind == "bool":
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1", "yes")
            elif kind in ("list", "dict"):
                out[key] = json.loads(value)
                if not isinstance(out[key], list if kind == "list" else dict):
                    raise ValueError(value)
            else:
                out[key] = value
        except ValueError:
            raise UsageError(f"--param {key}={value!r}: expected {kind}"
                             + (" as JSON" if kind in ("list", "dict") else "")) from None
    missing = [k for k, v in inputs.items() if "default" not in v and k not in out]
    if missing:
        raise UsageError(f"{name} needs --param for: {', '.join(missing)}")
    return out


def need_pipeline(name: str) -> None:
    if name not in registry.PIPELINES:
        raise UsageError(f"unknown pipeline {name!r}; known: {', '.join(registry.PIPELINES)}")


# --- commands -------------------------------------------------------------------------
def cmd_list(args) -> int:
    for name in registry.PIPELINES:
        pipeline = registry.load(name)
        desc = pipeline.pipeline_spec.pipeline_info.description
        print(f"{name:14} {desc}")
    return 0


def cmd_run(args) -> int:
    need_pipeline(args.name)
    if not args.local:
        raise UsageError("only --local runs are supported by `run`; use `submit` for a cluster")
    params = parse_params(args.name, args.param or [])
    from . import local, summary

    compiled = registry.compiled_path(args.name)
    if not compiled.exists():
        raise UsageError(f"{compiled} is missing: run `kfp-ray compile` first")
    from kfp_ray_sandbox import Sandbox
    from kfp_ray_sandbox.client import SandboxClient
    from kfp_ray_sandbox.reaper import owned_tempdir, sigterm_as_interrupt

    started = time.monotonic()
    print("==> starting the sandbox (OpenShift AI: Kubernetes API, Kueue, KubeRay, S3)", flush=True)
    # The sandbox's own temp dir holds the run's outputs too: its watchdog removes it (and this
    # process's temp files), and stops every process of the run, if this process dies; SIGTERM
    # unwinds like Ctrl-C.
    with sigterm_as_interrupt(), Sandbox() as box, owned_tempdir(box.watchdog):
        tmp = str(box.state_dir)
        client = SandboxClient(box.info)
        # kfp-kubernetes settings do not apply locally: give the tasks what the pipeline
        # pod would get, the pipeline-runner identity and the data connection's env.
        from .common import data_connection_env

        env = {"KUBECONFIG": box.info["kubeconfig_pipeline_runner"], **data_connection_env(client.data_connection())}
        params = with_sandbox_queue(args.name, params, client)
        print(f"==> running {compiled.relative_to(registry.ROOT)} with kfp.local as pipeline-runner", flush=True)
        view = summary.LiveView(sys.stdout, verbose=args.verbose, secrets=list(env.values()))
        result = local.run(str(compiled), params, env=env, pipeline_root=os.path.join(tmp, "root"), output=view,
                           watchdog=box.watchdog)
        report = summary.build(result, view.text(), client)
        root = os.path.join(tmp, "root")
        for key in ("report", "job_log"):  # local artifacts go with the temp dir unless kept
            report[key] = report[key].replace(root, os.path.abspath(args.keep_outputs)) if args.keep_outputs else ""
        if args.keep_outputs:
            import shutil

            shutil.copytree(root, args.keep_outputs, dirs_exist_ok=True)
        print(summary.render(args.name, report, time.monotonic() - started), flush=True)
    return 0 if result["status"] == "SUCCESS" else 1


def with_sandbox_queue(name: str, params: dict, client) -> dict:
    """Without local_queue the provision task uses the namespace's default LocalQueue, and
    as pipeline-runner (no Kueue access) the one named `default`. Where the sandbox has no
    `default`, give its default-queue LocalQueue explicitly, as a user would on a cluster."""
    if params.get("local_queue") or "local_queue" not in pipeline_inputs(name):
        return params
    from kubernetes import client as k8s

    queues = k8s.CustomObjectsApi(client.api_client()).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", client.namespace, "localqueues")["items"]
    if any(q["metadata"]["name"] == "default" for q in queues):
        return params
    annotated = [q["metadata"]["name"] for q in queues
                 if (q["metadata"].get("annotations") or {}).get("kueue.x-k8s.io/default-queue") == "true"]
    if not annotated:
        return params
    print(f"==> local_queue={annotated[0]} (the sandbox's default LocalQueue: pipeline-runner may not list "
          "LocalQueues, and there is none named `default`)", flush=True)
    return {**params, "local_queue": annotated[0]}


def _client(args):
    import kfp

    token = args.token or os.environ.get("KFP_TOKEN")
    return kfp.Client(host=args.host, existing_token=token) if token else kfp.Client(host=args.host)


def cmd_submit(args) -> int:
    need_pipeline(args.name)
    params = parse_params(args.name, args.param or [])
    run = _client(args).create_run_from_pipeline_package(
        str(registry.compiled_path(args.name)), arguments=params, experiment_name=args.experiment,
        run_name=args.run_name or f"{args.name}-{time.strftime('%Y%m%d-%H%M%S')}", enable_caching=False)
    print(f"submitted run {run.run_id}")
    return 0


def cron_fields(cron: str) -> str:
    """KFP recurring runs take 6 cron fields (seconds first); a 5-field cron is misread."""
    fields = cron.split()
    if len(fields) != 6:
        raise UsageError(f"--cron {cron!r} has {len(fields)} fields; KFP needs 6, seconds first "
                         f"(e.g. '0 {' '.join(fields)}' for the 5-field '{cron}')")
    return cron


def cmd_schedule(args) -> int:
    need_pipeline(args.name)
    params = parse_params(args.name, args.param or [])
    cron = cron_fields(args.cron)
    client = _client(args)
    experiment = client.create_experiment(args.experiment)
    job = client.create_recurring_run(
        experiment_id=experiment.experiment_id, job_name=args.run_name or f"{args.name}-schedule",
        cron_expression=cron, max_concurrency=1, no_catchup=True, params=params,
        pipeline_package_path=str(registry.compiled_path(args.name)), enable_caching=False)
    print(f"scheduled recurring run {job.recurring_run_id} ({cron})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kfp-ray", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the pipelines").set_defaults(fn=cmd_list)
    compile_cli.add_parser(sub)
    r = sub.add_parser("run", help="run a pipeline")
    r.add_argument("name")
    r.add_argument("--local", action="store_true", help="on this machine: sandbox + kfp.local")
    r.add_argument("--param", action="append", metavar="KEY=VALUE")
    r.add_argument("--verbose", action="store_true", help="show kfp.local's whole log")
    r.add_argument("--keep-outputs", metavar="DIR", help="copy the run's local artifacts to DIR")
    r.set_defaults(fn=cmd_run)
    for verb, fn, helptext in (("submit", cmd_submit, "submit a run to a Data Science Pipelines server"),
                               ("schedule", cmd_schedule, "create a recurring run")):
        s = sub.add_parser(verb, help=helptext)
        s.add_argument("name")
        s.add_argument("--host", required=True, help="the DSPA route, https://ds-pipeline-<dspa>-<ns>.apps...")
        s.add_argument("--token", help="OpenShift bearer token (default: $KFP_TOKEN; `oc whoami -t`)")
        s.add_argument("--param", action="append", metavar="KEY=VALUE")
        s.add_argument("--experiment", default="kfp-ray")
        s.add_argument("--run-name")
        if verb == "schedule":
            s.add_argument("--cron", required=True, help="6 fields, seconds first, e.g. '0 0 2 * * *'")
        s.set_defaults(fn=fn)
    gc.add_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
