"""What each kfp-ray component does, behind its typed KFP signature (components/*/component.py).

Each function takes the component's inputs, does the work through the library, and
returns plain values for the component's outputs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC

from . import cluster, jobs, kube, lease, preemption, rayclusters
from .errors import Cancelled, ClusterError, InputError, InputErrors, JobFailed, JobLost, JobTimeout, Preempted
from .signals import cleanup_deadline, sigterm_raises
from .validate import Checker, derive_cluster_name, label_value, task_identity
from .wait import Backoff, Outage, beat, combine, first_line, is_transient, log


def _namespace(namespace: str) -> str:
    return namespace or kube.current_namespace()


def pip_mirror_env(index_url: str, trusted_host: str) -> dict[str, str]:
    """PIP_INDEX_URL/PIP_TRUSTED_HOST for the Ray pods (whose runtime_env pip reads them), checked."""
    c = Checker()
    c.pip_mirror("pip_index_url", index_url, "pip_trusted_host", trusted_host)
    c.done()
    env = {"PIP_INDEX_URL": index_url} if index_url else {}
    return env | ({"PIP_TRUSTED_HOST": trusted_host} if trusted_host else {})


def cluster_spec(run_id: str, name: str, task_name: str, task_id: str, namespace: str, pip_index_url: str,
                 pip_trusted_host: str, env: dict | None, tolerations: list | None, node_selector: dict | None,
                 labels: dict | None, **shape) -> cluster.ClusterSpec:
    """The cluster of one task (provision's, or run_ray_job's RayJob's): its name, when not
    given, derives from the run and the task identity (task_name, task_id), so each such task
    of a run gets its own; a pip mirror becomes env of every Ray pod."""
    env = {**(env or {}), **pip_mirror_env(pip_index_url, pip_trusted_host)}
    name = name or derive_cluster_name(run_id or "", task_identity(task_name or "", task_id or ""))
    return cluster.ClusterSpec(name=name, namespace=_namespace(namespace), run_id=run_id, task_name=task_name or "",
                               task_id=task_id or "", env=env, tolerations=list(tolerations or []),
                               node_selector=dict(node_selector or {}), labels=dict(labels or {}), **shape)


def provision(run_id: str, cluster_name: str = "", namespace: str = "", local_queue: str = "", priority_class: str = "",
              num_workers: int = 1,
              head_cpu: str = "1", head_memory: str = "4Gi", worker_cpu: str = "1", worker_memory: str = "4Gi",
              head_cpu_limit: str = "", head_memory_limit: str = "", worker_cpu_limit: str = "",
              worker_memory_limit: str = "", worker_gpus: int = 0, image: str = "", env: dict | None = None,
              data_connection: str = "", tolerations: list | None = None, node_selector: dict | None = None,
              labels: dict | None = None, admission_timeout: float = 600, startup_timeout: float = 900,
              lease_seconds: float = lease.DEFAULT_LEASE_S, renew_every_seconds: float = lease.DEFAULT_RENEW_S,
              task_name: str = "", task_id: str = "", image_pull_grace: float | None = None,
              pip_index_url: str = "", pip_trusted_host: str = "") -> cluster.Provisioned:
    """Provision one task's cluster. Its name, when not given, derives from the run and the
    task identity (task_name, task_id), so each provision task of a run gets its own.
    image_pull_grace: how long an image may keep failing to pull (default
    diagnose.IMAGE_PULL_GRACE; not a component input, tests shorten it)."""
    spec = cluster_spec(run_id, cluster_name, task_name, task_id, namespace, pip_index_url, pip_trusted_host, env,
                        tolerations, node_selector, labels, local_queue=local_queue, priority_class=priority_class,
                        num_workers=num_workers,
                        head_cpu=head_cpu, head_cpu_limit=head_cpu_limit, head_memory=head_memory,
                        head_memory_limit=head_memory_limit, worker_cpu=worker_cpu, worker_cpu_limit=worker_cpu_limit,
                        worker_memory=worker_memory, worker_memory_limit=worker_memory_limit, worker_gpus=worker_gpus,
                        image=image, data_connection=data_connection)
    derived = not cluster_name
    return cluster.provision(spec, admission_timeout, startup_timeout, lease_seconds=lease_seconds,
                             renew_every_seconds=renew_every_seconds, derived_name=derived,
                             image_pull_grace=image_pull_grace)


def submit(dashboard_url: str, entrypoint: str, run_id: str, task: str = "submit-ray-job", working_dir: str = "",
           embedded_root: str | None = None, pip: list | None = None, env_vars: dict | None = None,
           metadata: dict | None = None, requirements_file: str = "", cluster_name: str = "", namespace: str = "",
           lease_seconds: float = lease.DEFAULT_LEASE_S) -> str:
    """Submit the job (jobs.submit). The cluster (cluster_name) is held from provision to
    follow: its lease is handed on (lease.HANDOFF_S) as submit starts, covering the submission,
    and again as it ends, covering the start of follow (or of a retry of this task)."""
    renewer = _renewer(cluster_name, namespace, lease_seconds, lease.DEFAULT_RENEW_S)
    if renewer is not None:
        renewer.hand_off()
    try:
        return jobs.submit(dashboard_url, entrypoint, run_id, task, working_dir, embedded_root, pip, env_vars,
                           metadata, requirements_file)
    finally:  # to follow, or on a failure to a retry of this task or the exit handler's teardown
        if renewer is not None:
            renewer.hand_off()


def follow(dashboard_url: str, job_id: str, log_path: str, cluster_name: str = "", namespace: str = "",
           timeout: float = 86400, delete_cluster: bool = True, max_poll_seconds: float = jobs.MAX_POLL,
           outage_tolerance_seconds: float = jobs.OUTAGE_TOLERANCE, heartbeat: Callable[[], None] | None = None,
           lease_seconds: float = lease.DEFAULT_LEASE_S, renew_every_seconds: float = lease.DEFAULT_RENEW_S,
           submission: dict | None = None, max_preemptions: int = preemption.MAX_PREEMPTIONS,
           admission_timeout: float = 600, startup_timeout: float = 900, shipper=None):  # jobs.LogShipper
    """Follow the job; write its log (as read so far) to log_path whatever happens, and with a
    `shipper` (jobs.LogShipper of log_path) copy it to S3 as it grows and, whole, at the end.

    With `submission` (jobs.submit's arguments after the dashboard URL) instead of a job_id,
    the job is submitted first, as submit_ray_job would, under the same cancellation, lease
    and cluster handling: one task on the critical path instead of two. Its id comes from the
    run and task, so a retried task adopts the job its first attempt submitted.

    A Kueue preemption of the cluster (spec.suspend: KubeRay deletes its pods) is ridden out
    up to max_preemptions times when this task submitted the job: it waits for re-admission
    and new pods (admission_timeout and startup_timeout apply again), submits the job again
    on the new head (a job that keeps checkpoints resumes from its last one) and follows it,
    its log appended. Past the budget, or with only a job_id (nothing to submit again), the
    task fails naming the preemption and deletes the cluster.

    The cluster (delete_cluster, cluster_name) is deleted when the job is over (terminal,
    lost, or timed out and stopped) and when the task is cancelled: then the job's stop and
    the cluster's deletion are requested at once, and awaited only for what is left of the
    grace period. An unreachable dashboard is ridden out for outage_tolerance_seconds; past
    that, and on any failure to read that is not the job's end (401/403, an answer that is not
    the Job API's), the task fails with the cause WITHOUT deleting the cluster, since the job
    may still be running (a retry of the task follows it again; else the exit handler's
    teardown, and failing that the lease sweeper, frees it). Returns jobs.JobResult.

    While it follows (outages included) it renews cluster_name's lease (lease.py) every
    renew_every_seconds to lease_seconds ahead, so the sweeper leaves the cluster alone; once
    the job is over it renews no more."""
    c = Checker()
    jobs.check_dashboard_url(c, dashboard_url)
    lease.check(c, lease_seconds, renew_every_seconds)
    c.at_least("max_preemptions", max_preemptions, 0, f"give how many Kueue preemptions the run rides out, e.g. "
               f"{preemption.MAX_PREEMPTIONS} (0: fail at the first)")
    c.positive_seconds("admission_timeout", admission_timeout)
    c.positive_seconds("startup_timeout", startup_timeout)
    if submission is not None:
        jobs.check_job(c, submission.get("entrypoint", ""), submission.get("run_id", ""), submission.get("env_vars"),
                       submission.get("pip"))
        if job_id:
            c.fail("job_id", f"{job_id!r} is given with an entrypoint", "give one of them: job_id to follow a job "
                   "submit_ray_job submitted, or entrypoint for this task to submit the job")
    elif not job_id:
        c.fail("job_id", "is empty", "wire submit_ray_job's job_id output, or give entrypoint (and run_id) for this "
               "task to submit the job")
    c.done()
    if submission is not None:
        job_id = jobs.submission_id(submission["run_id"], submission["task"])
    deleting = bool(delete_cluster and cluster_name)
    ns = _namespace(namespace) if deleting else namespace
    _check_cluster_exists(cluster_name, namespace, job_id)
    renewer = _renewer(cluster_name, namespace, lease_seconds, renew_every_seconds)
    preemptions = preemption.Preemptions(cluster_name, max_preemptions,
                                         what="the job is submitted again on the cluster's new pods")

    def follower_for() -> jobs.Follower:
        # The log streams into log_path as it is read (redacted), whatever happens; after a
        # preemption, appended below a heading.
        options = dict(max_poll=max_poll_seconds, outage_tolerance=outage_tolerance_seconds,
                       heartbeat=combine(renewer, heartbeat), log_path=log_path, heading=preemptions.heading(),
                       shipper=shipper)
        if not cluster_name:
            return jobs.Follower(dashboard_url, job_id, timeout, **options)
        return preemption.ClusterFollower(dashboard_url, job_id, timeout, cluster_name, _namespace(namespace), **options)

    if shipper and cluster_name:
        shipper.events = (_namespace(namespace), [cluster_name])  # the cluster's events beside the log
    follower = follower_for()
    with sigterm_raises():
        try:
            try:
                while True:
                    if submission is not None:
                        _submit(dashboard_url, submission, renewer, cluster_name if deleting else "")
                    started = time.monotonic()
                    try:
                        result = follower.run()
                        break
                    except Preempted as exc:
                        if submission is None:
                            raise Preempted(f"{exc}. Its pods are gone, and the job with them; this task was given "
                                            "a job_id, not the job, so it cannot submit it again. Fix: give "
                                            "follow_ray_job the entrypoint instead of submit_ray_job's job_id") from None
                        preemptions.preempted(exc, follower.lost_seconds(started))
                        _readmitted(cluster_name, _namespace(namespace), follower.mark, admission_timeout,
                                    startup_timeout, combine(renewer, heartbeat))
                        preemptions.running_again()
                        follower = follower_for()
                result.preemptions, result.preempted_seconds = preemptions.count, round(preemptions.lost_seconds, 1)
                result.preempted_times = preemptions.times
            except (JobFailed, JobTimeout, ClusterError):  # over: failed, stopped, lost, timed out, not back
                if deleting:
                    _delete_cluster_when_over(cluster_name, ns, outage_tolerance_seconds, heartbeat)
                raise
            except Exception as exc:  # not known to be over (unreachable, refused, an unreadable answer)
                if deleting:
                    log(f"leaving RayCluster {cluster_name}: Ray job {job_id} may still be running "
                        f"({type(exc).__name__}); a retry of this task follows it again, else the pipeline's exit "
                        "handler (teardown) deletes the cluster")
                if renewer is not None:
                    renewer.hand_off()  # to a retry of this task (it follows the job again), or to teardown
                raise
            if deleting:
                result.teardown_seconds = _delete_cluster_when_over(cluster_name, ns, outage_tolerance_seconds, heartbeat,
                                                                    shipper)
                result.released_at = preemption.utc_now()
            return result
        except Cancelled as exc:
            _cancel_follow(follower, cluster_name if deleting else "", ns, exc)
            raise
        finally:
            if shipper:
                shipper.ship(whole=True)  # the whole log beside its parts


def _readmitted(name: str, namespace: str, mark: str, admission_timeout: float, startup_timeout: float,
                heartbeat) -> None:
    preemption.wait_readmitted(name, namespace, mark, admission_timeout, startup_timeout, heartbeat)
    log(f"RayCluster {name} is ready again; dashboard {cluster.dashboard_url(name, namespace)}")


def _submit(dashboard_url: str, submission: dict, renewer: lease.Renewer | None, cluster_name: str) -> None:
    """Submit the job that follow then follows. The lease is renewed first (one lease: this
    process is alive to renew it again); a failed submission leaves the cluster and hands its
    lease on, as a failed follow does: a retry of this task adopts or submits the job."""
    if renewer is not None:
        renewer.renew()
    try:
        jobs.submit(dashboard_url, **submission)
    except Exception as exc:
        if cluster_name:
            log(f"leaving RayCluster {cluster_name}: the job's submission failed ({type(exc).__name__}); a retry of "
                "this task submits it again (or adopts it, if it got through), else the pipeline's exit handler "
                "(teardown) deletes the cluster")
        if renewer is not None:
            renewer.hand_off()
        raise


def _check_cluster_exists(cluster_name: str, namespace: str, job_id: str) -> None:
    """A retried follow whose first attempt saw the job end (and deleted the cluster) fails at
    once, instead of waiting out an unreachable dashboard for the outage window. Only a cluster
    known gone counts: a read that fails leaves it to the follow loop."""
    if not cluster_name:
        return
    try:
        gone = rayclusters.get(cluster_name, _namespace(namespace), attempts=1) is None
    except Exception as exc:  # noqa: BLE001 - the dashboard may still answer; follow finds out
        log(f"could not read RayCluster {cluster_name} ({type(exc).__name__}: {first_line(exc)}); following anyway")
        return
    if gone:
        raise JobLost(f"RayCluster {cluster_name} does not exist, so Ray job {job_id} cannot be running: the job "
                      "ended and an earlier attempt of this task deleted its cluster (that attempt's log has the "
                      "job's outcome), or the cluster was deleted. Fix: run the pipeline again")


def _renewer(cluster_name: str, namespace: str, lease_seconds: float, every: float) -> lease.Renewer | None:
    if not cluster_name:
        return None
    try:
        return lease.Renewer(cluster_name, _namespace(namespace), lease_seconds, every)
    except Exception as exc:  # noqa: BLE001 - following the job matters more; the lease runs out
        log(f"cannot renew the lease of RayCluster {cluster_name} ({exc}); following the job without renewing it")
        return None


def _write_log(path: str, text: str) -> None:
    from .redact import redact

    try:
        with open(path, "w") as fh:
            fh.write(redact(text))
    except OSError as exc:
        log(f"could not write the job log to {path}: {exc}")


def _delete_cluster_when_over(name: str, namespace: str, tolerance: float, heartbeat=None, shipper=None) -> float:
    """Delete the cluster of a job that is over and wait until it is gone, riding out an
    unreachable Kubernetes API for `tolerance` seconds (single tries, the outage paces them);
    past that, the exit handler's teardown tries again (the job's result stands). A `shipper`
    copies the whole log to S3 once the deletion is asked for, before the wait: the quota is
    not held for it. Returns the seconds it took (the run report's teardown bar)."""
    started = time.monotonic()
    outage = Outage("the Kubernetes API", tolerance, consequence="The exit handler's teardown will delete it.")
    while True:
        beat(heartbeat)
        try:
            rc = rayclusters.get(name, namespace, attempts=1)
            if rc is None:
                outage.ok()
                return round(time.monotonic() - started, 2)
            if not rayclusters.being_deleted(rc):
                rayclusters.request_delete(name, namespace, rc["metadata"]["uid"], attempts=1)
            outage.ok()
            if shipper:  # once: an outage runs this loop again
                shipper.ship(whole=True)
                shipper = None
            rayclusters.wait_gone(rc)
            log(f"deleted RayCluster {name} (lived {rayclusters.age_seconds(rc):.0f}s)")
            return round(time.monotonic() - started, 2)
        except Exception as exc:  # noqa: BLE001 - transient: ridden out; else reported
            try:
                if not is_transient(exc):
                    raise
                outage.failed(exc)
            except Exception as final:  # noqa: BLE001 - the exit handler's teardown tries again
                log(f"could not delete RayCluster {name} ({type(final).__name__}: {first_line(final, 400)}); "
                    "teardown will retry")
                return round(time.monotonic() - started, 2)
        time.sleep(outage.pause())


def _cancel_follow(follower: jobs.Follower, cluster_name: str, namespace: str, cancelled: Cancelled) -> None:
    """A cancelled task: request the job's stop and the cluster's deletion at once (the stop
    from a thread, so that neither waits for the other), then wait until the cluster is
    gone (or, without one to delete, the job stopped), never past the grace period."""
    deadline = cleanup_deadline(cancelled)

    def since() -> str:
        return f"+{time.monotonic() - cancelled.at:.2f}s"

    log(f"the task was cancelled: stopping Ray job {follower.job_id}"
        + (f" and deleting RayCluster {cluster_name}" if cluster_name else "") + " now")
    stopped: dict = {}

    def stop() -> None:
        log(f"stop of Ray job {follower.job_id} requested ({since()} after SIGTERM)")
        stopped["answer"] = follower.request_stop(deadline)
        log(f"stop of Ray job {follower.job_id} answered {stopped['answer']} ({since()})")

    stopper = threading.Thread(target=stop, name="stop-ray-job", daemon=True)
    stopper.start()
    if not cluster_name:
        status = follower.wait_stopped(deadline)
        log(f"Ray job {follower.job_id} {status} ({since()})" if status else
            f"Ray job {follower.job_id} not stopped yet as the grace period ends ({since()})")
        return
    _delete_cluster_by(cluster_name, namespace, deadline, since)


def _delete_cluster_by(cluster_name: str, namespace: str, deadline: float, since: Callable[[], str]) -> None:
    """A cancelled task's cluster: request its deletion and wait until it is gone, never past
    `deadline` (the end of the grace period)."""
    try:
        log(f"deletion of RayCluster {cluster_name} requested ({since()} after SIGTERM)")
        rayclusters.request_delete(cluster_name, namespace, deadline=deadline)
    except Exception as exc:  # noqa: BLE001 - waited on below all the same; teardown makes sure
        log(f"deleting RayCluster {cluster_name} failed ({type(exc).__name__}: {first_line(exc)})")
    backoff = Backoff(0.2, 1.5, 1.0)
    while time.monotonic() < deadline:
        try:
            if rayclusters.get(cluster_name, namespace, deadline=deadline) is None:
                log(f"RayCluster {cluster_name} is gone ({since()} after SIGTERM)")
                return
        except Exception:  # noqa: BLE001 - keep looking until the deadline
            pass
        time.sleep(min(backoff.next(), max(0.0, deadline - time.monotonic())))
    log(f"RayCluster {cluster_name} is still being deleted as the grace period ends ({since()}); the exit handler's "
        "teardown makes sure it goes")


def drive(dashboard_url: str, cluster_name: str, namespace: str, driver: str, function: str = "main",
          kwargs: str | dict | None = None, log_path: str = "", embedded_root: str | None = None, output_uri: str = "",
          data_uri: str = "",
          delete_cluster: bool = True, lease_seconds: float = lease.DEFAULT_LEASE_S,
          renew_every_seconds: float = lease.DEFAULT_RENEW_S):
    """Run `function(**kwargs)` of `driver` as a Ray client driver of the cluster (driver.py),
    its output streamed to this task's log and kept in log_path. Returns (its result, seconds
    it ran, seconds the cluster's deletion took).

    kwargs: a dict, or its JSON text. KFP_RAY_DATA and KFP_RAY_OUTPUT are data_uri and
    output_uri while it runs (as a job's env has them); a dict it returns is also written to
    <output_uri>/results.json, for publish_training_results. While it runs the cluster's lease
    is renewed; when it is over (returned, raised, or the task cancelled) the cluster is
    deleted (delete_cluster), as follow_ray_job deletes a job's."""
    import contextlib
    import json
    import sys

    from . import driver as ray_driver
    from . import results, s3

    c = Checker()
    jobs.check_dashboard_url(c, dashboard_url)
    lease.check(c, lease_seconds, renew_every_seconds)
    example = 'give a JSON object, as \'{"epochs": 8}\''
    try:
        kwargs = json.loads(kwargs or "{}") if isinstance(kwargs, str) else (kwargs or {})
    except ValueError as exc:
        c.fail("kwargs", f"not JSON ({exc})", example)
    else:
        if not isinstance(kwargs, dict):
            c.fail("kwargs", f"a JSON {type(kwargs).__name__}, not an object", example)
    c.done()
    if output_uri:
        target = results.results_uri(output_uri)
    fn = ray_driver.load_function(driver, function, embedded_root)
    ns = _namespace(namespace)
    renewer = _renewer(cluster_name, ns, lease_seconds, renew_every_seconds)
    stop = threading.Event()

    def renew() -> None:  # a daemon thread: it ends with the task's process
        while renewer is not None and not stop.wait(1.0):
            renewer()

    threading.Thread(target=renew, name="renew-lease", daemon=True).start()
    tee_out, tee_err = ray_driver.Tee(sys.stdout), ray_driver.Tee(sys.stderr)
    env = {k: v for k, v in (("KFP_RAY_DATA", data_uri), ("KFP_RAY_OUTPUT", output_uri)) if v}
    started = time.monotonic()
    deleting = bool(delete_cluster and cluster_name)
    with sigterm_raises():
        try:
            try:
                with contextlib.redirect_stdout(tee_out), contextlib.redirect_stderr(tee_err), \
                        ray_driver.environ(env), ray_driver.connected(cluster_name, ns, dashboard_url):
                    log(f"running {function}() of {driver}")
                    value = fn(**kwargs)
                seconds = round(time.monotonic() - started, 2)
                log(f"{function}() returned after {seconds:.1f}s")
                if output_uri and isinstance(value, dict):
                    bucket, key = s3.split(target)
                    s3.client().put_object(Bucket=bucket, Key=key, Body=json.dumps(value, indent=2, default=str).encode())
                    log(f"wrote {target}")
            except Cancelled as exc:
                stop.set()
                if deleting:
                    log(f"the task was cancelled: deleting RayCluster {cluster_name} now")
                    at = exc.at
                    _delete_cluster_by(cluster_name, ns, cleanup_deadline(exc), lambda: f"+{time.monotonic() - at:.2f}s")
                raise
            except Exception:
                stop.set()
                if deleting:
                    _delete_cluster_when_over(cluster_name, ns, jobs.OUTAGE_TOLERANCE)
                raise
            stop.set()
            teardown = _delete_cluster_when_over(cluster_name, ns, jobs.OUTAGE_TOLERANCE) if deleting else 0.0
            return value, seconds, teardown
        finally:
            stop.set()
            if log_path:
                _write_log(log_path, tee_out.text() + tee_err.text())


def run_job(run_id: str, entrypoint: str, task_name: str = "", task_id: str = "", job_name: str = "",
            namespace: str = "", local_queue: str = "", priority_class: str = "", num_workers: int = 1,
            head_cpu: str = "1",
            head_memory: str = "4Gi", worker_cpu: str = "1", worker_memory: str = "4Gi", head_cpu_limit: str = "",
            head_memory_limit: str = "", worker_cpu_limit: str = "", worker_memory_limit: str = "",
            worker_gpus: int = 0, image: str = "", env: dict | None = None, data_connection: str = "",
            tolerations: list | None = None, node_selector: dict | None = None, labels: dict | None = None,
            working_dir: str = "", embedded_root: str | None = None, pip: list | None = None,
            env_vars: dict | None = None, requirements_file: str = "", submission_mode: str = "K8sJobMode",
            admission_timeout: float = 600, startup_timeout: float = 900, job_timeout: float = 86400,
            ttl_seconds_after_finished: int = 0, log_path: str = "", max_poll_seconds: float = jobs.MAX_POLL,
            outage_tolerance_seconds: float = jobs.OUTAGE_TOLERANCE, lease_seconds: float = lease.DEFAULT_LEASE_S,
            renew_every_seconds: float = lease.DEFAULT_RENEW_S, pip_index_url: str = "", pip_trusted_host: str = "",
            image_pull_grace: float | None = None, max_preemptions: int = 3):
    """The RayJob path in one task (rayjobs.py): every input is checked before anything is
    created, as provision, submit and follow check theirs. Returns rayjobs.Ran."""
    from . import rayjobs

    derived = not job_name
    spec = cluster_spec(run_id, job_name, task_name, task_id, namespace, pip_index_url, pip_trusted_host, env,
                        tolerations, node_selector, labels, local_queue=local_queue, priority_class=priority_class,
                        num_workers=num_workers,
                        head_cpu=head_cpu, head_cpu_limit=head_cpu_limit, head_memory=head_memory,
                        head_memory_limit=head_memory_limit, worker_cpu=worker_cpu, worker_cpu_limit=worker_cpu_limit,
                        worker_memory=worker_memory, worker_memory_limit=worker_memory_limit, worker_gpus=worker_gpus,
                        image=image, data_connection=data_connection)
    errors: list[InputError] = []
    try:
        spec.check(derived_name=derived)
    except InputErrors as exc:
        errors = list(exc.errors)
    except InputError as exc:
        errors = [exc]
    c = Checker()
    jobs.check_job(c, entrypoint, run_id, env_vars, pip)
    rayjobs.check_inputs(c, submission_mode, working_dir, job_timeout, ttl_seconds_after_finished, max_preemptions)
    c.positive_seconds("admission_timeout", admission_timeout)
    c.positive_seconds("startup_timeout", startup_timeout)
    lease.check(c, lease_seconds, renew_every_seconds)
    # the cluster's checks, with this task's name for the name
    c.errors[:0] = [InputError("job_name" if e.field == "cluster_name" else e.field, e.problem,
                               e.fix.replace("cluster_name", "job_name")) for e in errors]
    c.done()
    if requirements_file:
        pip = jobs.read_requirements(requirements_file, working_dir, embedded_root) + list(pip or [])
    uri, data = jobs.package_working_dir(working_dir, embedded_root)
    runtime_env = jobs.build_runtime_env(uri, pip, env_vars)

    ran = rayjobs.run(spec, entrypoint, runtime_env, (uri, data) if data is not None else None,
                      jobs.submission_id(run_id, task_identity(task_name or "", task_id or "") or "run-ray-job"),
                      submission_mode, admission_timeout, startup_timeout, job_timeout, ttl_seconds_after_finished,
                      derived, lease_seconds, renew_every_seconds, max_poll_seconds, outage_tolerance_seconds,
                      image_pull_grace, log_path or None, max_preemptions,
                      jobs.LogShipper(log_path, jobs.log_uri(env_vars), events=(spec.namespace, [spec.name]))
                      if log_path else None)
    gpus = f", {worker_gpus} GPU" if worker_gpus else ""
    ran.shape = (f"RayJob ({submission_mode}); LocalQueue {local_queue or '(the namespace default)'}; head {head_cpu} CPU, "
                 f"{head_memory}; {num_workers} worker{'s' if num_workers != 1 else ''} x ({worker_cpu} CPU, "
                 f"{worker_memory}{gpus})")
    return ran


TEARDOWN_TIMEOUT = 300.0


def teardown(run_id: str, namespace: str = "", cluster_name: str = "", timeout: float = TEARDOWN_TIMEOUT) -> float:
    """Delete the run's clusters and RayJobs (by name, and every one labelled with the run id).
    Idempotent: nothing left is success. Returns the longest lifetime in seconds.
    A bad `timeout` fails the task, but only after the deletions (with the default wait):
    an exit handler that refused to delete would leave the quota held."""
    c = Checker()
    c.positive_seconds("timeout", timeout, example=TEARDOWN_TIMEOUT)
    if c.errors:
        log(f"{c.errors[0]}; deleting the run's clusters anyway, waiting up to {TEARDOWN_TIMEOUT:.0f}s for each")
        timeout = TEARDOWN_TIMEOUT
    longest = _teardown(run_id, namespace, cluster_name, timeout)
    c.done()
    return longest


def _teardown(run_id: str, namespace: str, cluster_name: str, timeout: float) -> float:
    """The run's RayJobs first (KubeRay's clusters go with them), then its other RayClusters:
    all deletions requested, then awaited (their finalizers run side by side)."""
    ns = _namespace(namespace)
    found: dict[tuple[str, str], dict] = {}
    if run_id:
        for obj in rayclusters.of_run(ns, run_id, rayclusters.RAYJOB):
            found[("RayJob", obj["metadata"]["name"])] = obj
        for obj in rayclusters.of_run(ns, run_id):
            found[("RayCluster", obj["metadata"]["name"])] = obj
    if cluster_name and ("RayCluster", cluster_name) not in found:
        rc = rayclusters.get(cluster_name, ns)
        if rc is not None and rayclusters.run_of(rc) not in (None, label_value(run_id)):
            log(f"RayCluster {cluster_name} belongs to another run; leaving it")
        elif rc is not None:
            found[("RayCluster", cluster_name)] = rc
    if not found:
        log(f"no RayCluster or RayJob of run {run_id} left in {ns}: nothing to tear down")
        return 0.0
    for (kind_name, name), obj in sorted(found.items()):
        kind = rayclusters.RAYJOB if kind_name == "RayJob" else rayclusters.RAYCLUSTER
        # a RayJob's cluster goes with its RayJob: deleting it alone would make KubeRay make another
        owner = rayclusters.owning_rayjob(obj)
        if owner and ("RayJob", owner) in found:
            continue
        if not rayclusters.being_deleted(obj):
            rayclusters.request_delete(name, ns, obj["metadata"]["uid"], kind=kind)
    for (kind_name, name), obj in sorted(found.items()):
        obj.setdefault("kind", kind_name)
        rayclusters.wait_gone(obj, timeout)
        log(f"deleted {kind_name} {name} (lived {rayclusters.age_seconds(obj):.0f}s)")
    return round(max((rayclusters.age_seconds(o) for o in found.values()), default=0.0), 2)


def sweep(namespace: str = "", all_namespaces: bool = False, delete: bool = True, timeout: float = 300,
          report_path: str = "") -> list:
    """The lease sweeper (lease.py) as one task: judge kfp-ray's RayClusters in the namespace
    (empty: the pipeline's own) by their leases, delete the expired ones when asked, print
    the table (and write it as Markdown to report_path). Raises, after reporting, when a
    deletion failed. Returns lease.Swept entries."""
    c = Checker()
    c.positive_seconds("timeout", timeout)
    c.done()
    ns = None if all_namespaces else _namespace(namespace)
    where = "in all namespaces" if ns is None else f"in namespace {ns}"
    entries = lease.sweep(ns, delete=delete, timeout=timeout)
    print(lease.render(entries, delete, where), flush=True)
    if report_path:
        with open(report_path, "w") as fh:
            fh.write(lease.markdown(entries, delete, where))
    failed = [e for e in entries if e.action == "failed"]
    if failed:
        from .errors import KfpRayError

        raise KfpRayError("could not delete RayClusters whose lease expired: " + "; ".join(
            f"{e.namespace}/{e.name}: {e.error}" for e in failed) + ". The next sweep tries again")
    return entries


def report_run(run_id: str, title: str = "Ray training run", namespace: str = "") -> str:
    """The exit task's HTML report (postmortem.py): how the run ended, where it failed and why,
    and when each task ran. The state comes from the run's task pods: FAILED if one failed by
    itself; TERMINATED if the only failures are tasks stopped by a terminate (SIGTERM);
    SUCCEEDED if all the others succeeded; UNKNOWN when no pod could be read (the page says
    why). Never raises."""
    from datetime import datetime

    from . import postmortem, runinfo
    from . import report as html

    pods, problem = runinfo.task_pods(run_id, _namespace(namespace))
    problem = f"{problem[:1].upper()}{problem[1:]}." if problem else ""
    failed = [p for p in pods if p.failed and not p.cancelled]
    stopped = [p for p in pods if p.cancelled]
    others = [p for p in pods if p.phase not in ("Running", "Pending")]  # this task's own pod is running
    if failed:
        state = "FAILED"
    elif stopped:
        state = "TERMINATED"
        problem = "Stopped: " + ", ".join(sorted({p.task for p in stopped})) + "."
    elif others and all(p.phase == "Succeeded" for p in others):
        state = "SUCCEEDED"
    else:
        state = "UNKNOWN"
        problem = problem or f"No finished task pod of run {run_id} was found (label pipeline/runid)."
    phases = postmortem.timeline(pods, now=datetime.now(UTC))
    common = dict(run_id=run_id, title=title, status=state, phases=phases, started_at=postmortem.started(pods))
    if not failed:
        log(f"run report: {state}" + (f" ({problem})" if problem else ""))
        return html.render(html.RunReport(**common, error=problem if state != "SUCCEEDED" else "",
                                          locations={"results": "publish-training-results › html_report"}
                                          if state == "SUCCEEDED" else {}))
    first = failed[0]
    log(f"run report: task {first.task} failed: {first.why}")
    return html.render(html.RunReport(**common, failed_at=first.task, error=first.why, log_tail=first.log_tail))
