"""`kfp-ray run NAME --local`: the compiled pipeline run on this machine the way a user runs it
on OpenShift AI. The sandbox starts (Kubernetes API, Kueue, KubeRay, S3 and a Data Science
Pipelines server), the compiled YAML is uploaded and run with kfp.Client, each task in its
own pod as pipeline-runner with the YAML's kfp-kubernetes settings; the run is followed live
(task states, queue, cluster start, job logs) and summed up from the API and S3; then the
sandbox goes, and everything the run made with it."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from pathlib import Path

from . import connection, local_code, registry
from .cli_args import UsageError, need_pipeline, parse_params
from .connection import Connection
from .queue_default import with_default_queue

EXPERIMENT = "kfp-ray"
TIMEOUT_S = 1800.0  # the whole run
CANCEL_WAIT_S = 120.0  # past --timeout: how long the terminated run gets for its exit handler


def add_parser(sub) -> None:
    r = sub.add_parser("run", help="run a pipeline on this machine (--local)",
                       description="\n".join(__doc__.splitlines()[:6]), formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("name", help=f"the pipeline: {', '.join(registry.PIPELINES)}")
    r.add_argument("--local", action="store_true", help="in the sandbox on this machine (use `submit` for a cluster)")
    r.add_argument("--param", action="append", metavar="KEY=VALUE", help="a pipeline parameter (repeatable)")
    r.add_argument("--verbose", action="store_true", help="show the tasks' whole logs, pip and executor lines too")
    r.add_argument("--keep-outputs", metavar="DIR",
                   help="copy the run's folder under the pipeline root (artifacts, executor outputs) to DIR")
    r.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds the run may take (default {TIMEOUT_S:.0f})")
    r.add_argument("--platform", choices=("rhoai-3.3", "rhoai-2.25"), default=None,
                   help="the OpenShift AI release the sandbox plays (default rhoai-3.3)")
    r.set_defaults(fn=cmd_run)


def cmd_run(args) -> int:
    need_pipeline(args.name)
    if not args.local:
        raise UsageError("only --local runs are supported by `run`; use `submit` for a cluster")
    compiled = registry.compiled_path(args.name)
    if not compiled.exists():
        raise UsageError(f"{compiled} is missing: run `kfp-ray compile` first")
    from .package import Package, read

    pkg = Package(args.name, compiled, read(compiled, "compiled/"))
    inputs = pkg.inputs()
    params = parse_params(args.name, args.param or [], inputs)
    local_code.local_dirs(params)  # a local path that is no directory: refused before the sandbox starts
    from kfp_ray_sandbox import Sandbox
    from kfp_ray_sandbox.reaper import owned_tempdir, sigterm_as_interrupt

    started = time.monotonic()
    from kfp_ray_sandbox.platforms import platform

    plat = platform(args.platform)
    print(f"==> starting the sandbox (OpenShift AI {plat.rhoai}: Kubernetes API, Kueue, KubeRay, S3, Data Science "
          "Pipelines)", flush=True)
    # SIGTERM unwinds like Ctrl-C; the sandbox's watchdog stops its pods (the tasks, the Ray
    # nodes) and removes its temp dirs if this process dies however it dies
    with sigterm_as_interrupt(), Sandbox(platform=plat.name) as box, owned_tempdir(box.watchdog) as tmp:
        return _run(args, box, _for_release(compiled, plat.rhoai, Path(tmp)), pkg.spec["pipelineInfo"]["name"], params,
                    inputs, started)


def _for_release(compiled: Path, rhoai: str, tmp: Path) -> Path:
    """The YAML as a user of that release uploads it: for RHOAI 2.x `compile --rhoai` rewrites
    what its KFP 2.5 does not take (pipelines/compat.py); 3.x takes compiled/ as it is."""
    from . import compat

    todo = compat.needs(compat.parse_version(rhoai), "")
    if not todo:
        return compiled
    print(f"==> RHOAI {rhoai}: the YAML as `kfp-ray compile --rhoai {rhoai}` writes it ({', '.join(todo)})", flush=True)
    out = tmp / compiled.name
    out.write_text(compat.rewrite(compiled.read_text(), todo))
    return out


def _run(args, box, compiled: Path, name: str, params: dict, inputs: dict, started: float) -> int:
    """`name`: the pipeline's own (pipelineInfo.name), its folder under the pipeline root."""
    from kubernetes import client as k8s

    from kfp_ray_sandbox.client import SandboxClient

    from . import run_tasks, summary
    from .follow import Follower

    sbx = SandboxClient(box.info)
    # the user's credentials (the sandbox's admin) find the default queue pipeline-runner cannot
    params = with_default_queue(params, inputs, box.info["namespace"], sbx.api_client())
    if local_code.local_dirs(params):
        params = local_code.upload(params, sbx.s3(), box.info["s3_bucket"])
    conn = Connection(box.info["pipelines_api"], sbx.token(), box.info["ca_file"], "the sandbox")
    connection.check(conn)
    client = conn.client()
    shown = compiled.relative_to(registry.ROOT) if compiled.is_relative_to(registry.ROOT) else compiled.name
    print(f"==> uploading {shown} to the Data Science Pipelines server", flush=True)
    # kfp prints links to a dashboard the sandbox does not have: not shown
    with contextlib.redirect_stdout(io.StringIO()):
        pipeline = client.upload_pipeline(str(compiled), pipeline_name=args.name)
        version = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions[0]
        experiment = client.create_experiment(EXPERIMENT)  # reused when it exists
        run = client.run_pipeline(experiment.experiment_id, f"{args.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  pipeline_id=pipeline.pipeline_id, version_id=version.pipeline_version_id,
                                  params=params)
    print(f"==> run {run.run_id}: each task a pod as pipeline-runner, its settings from the YAML", flush=True)
    core = k8s.CoreV1Api(sbx.api_client())
    view = summary.LiveView(sys.stdout, verbose=args.verbose, secrets=list(sbx.data_connection().values()))
    ns = box.info["namespace"]
    follower = Follower(run_tasks.run_reader(client), view, read_log=lambda pod: _pod_log(core, ns, pod),
                        find_pods=lambda run_id: run_tasks.executor_pods(core, ns, run_id))
    try:
        follower.follow(run.run_id, args.timeout)
    except KeyboardInterrupt:
        # the sandbox goes now and the run with it (pods, Ray nodes, quota): nothing to wait for
        print("==> interrupted: stopping the sandbox and the run in it", flush=True)
        raise
    except TimeoutError as exc:
        _terminate(client, follower, run.run_id, str(exc))
    done = client.get_run(run.run_id)  # the whole run, for the summary
    s3, bucket = sbx.s3(), box.info["s3_bucket"]
    prefix = f"{name}/{run.run_id}/"
    why = "" if done.state == "SUCCEEDED" else _why(k8s.CustomObjectsApi(sbx.api_client()), ns, run.run_id)
    report = summary.build(done, summary.task_outputs(s3, bucket, prefix), view.text(), sbx, why)
    report["platform"] = box.info["platform"]
    root = f"s3://{bucket}/{prefix}"
    for key in ("report", "job_log"):  # the pipeline root goes with the sandbox unless kept
        local = os.path.join(os.path.abspath(args.keep_outputs), report[key][len(root):]) if args.keep_outputs else ""
        report[key] = local if report[key].startswith(root) else ""
    if args.keep_outputs:
        download(s3, bucket, prefix, Path(args.keep_outputs))
    print(summary.render(args.name, report, time.monotonic() - started), flush=True)
    return 0 if done.state == "SUCCEEDED" else 1


def _terminate(client, follower, run_id: str, why: str) -> None:
    """Terminate the run as the dashboard's Stop does, and follow it while its exit handler runs."""
    print(f"==> {why}: terminating the run (its exit handler tears the cluster down)", flush=True)
    client.terminate_run(run_id)
    follower.follow(run_id, CANCEL_WAIT_S)


def _why(custom, namespace: str, run_id: str) -> str:
    """Why the run failed, from its Workflow (KFP's API does not say)."""
    from . import run_tasks

    try:
        return run_tasks.workflow_failure(custom, namespace, run_id)
    except Exception as exc:  # noqa: BLE001 - the summary is best effort
        return f"(its Workflow could not be read: {type(exc).__name__})"


def _pod_log(core, namespace: str, pod: str) -> str | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_pod_log(pod, namespace, _request_timeout=30)
    except ApiException:  # gone (deleted with its run) or not yet started
        return None


def download(s3, bucket: str, prefix: str, into: Path) -> None:
    """Everything under s3://bucket/prefix, into `into` (same relative paths)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            target = into / o["Key"][len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, o["Key"], str(target))
