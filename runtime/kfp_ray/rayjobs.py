"""The RayJob path: KubeRay (v1.4) creates the cluster, submits the job, and deletes the
cluster when the job ends, enforcing activeDeadlineSeconds and ttlSecondsAfterFinished
itself, even when no pipeline pod is left.

One task does what provision, submit and follow do on the RayCluster path, with the same
library: the same inputs and checks (cluster.ClusterSpec), the same two-phase wait
(readiness.py, through `RayJobTarget`), the same log streaming through the dashboard
(jobs.Follower), the same lease (lease.py, on the RayJob), the same cleanup on failure and
SIGTERM (cluster.py's create-or-adopt and cancellation).

What KubeRay does, as v1.4.2's rayjob_controller.go writes it: a RayJob created with a
queue-name label is suspended by Kueue until admitted; once admitted its status goes
Initializing (status.rayClusterName names the cluster it creates, a fresh one after each
eviction) -> Running (status.dashboardURL set once the cluster is ready; in K8sJobMode a
submitter Job runs `ray job submit` then `ray job logs --follow`) -> Complete or Failed
(status.reason AppFailed, SubmissionFailed, DeadlineExceeded), then deletes the cluster
after ttlSecondsAfterFinished. The RayJob object itself stays (no quota): this task, the
exit handler's teardown or the lease sweeper deletes it.

Where the CodeFlare SDK's RayJob (0.34) does not serve, and why this module talks to the API
itself: its client loads a kubeconfig or the in-cluster config and nothing else (fine in a
pipeline pod), but it cannot label the RayJob with the run and task (adopt on retry, teardown,
sweeper), set a lease, a submitter template or timeouts and retries on its requests; its
status() blocks up to 60 s while the status is empty; and it ships local code in a Secret,
which RHOAI's pipeline-runner may not create. The cluster itself is still built by the SDK
(cluster.build_manifest), as on the RayCluster path.

How the job's code gets there: a working_dir that is a URL is given to Ray as is. Embedded
code (or an s3:// one) is zipped here and uploaded to the cluster's GCS once the cluster is
ready, as submit does; the submitter pod first waits (bounded) until that package is there,
then runs KubeRay's own command (common/job.go GetK8sJobCommand, v1.4.2) with
RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID, the variables KubeRay sets for a
user-provided submitter command. HTTPMode (no submitter pod) takes only URL code."""

from __future__ import annotations

import base64
import json
import shlex
import threading
import time
from dataclasses import dataclass, field

from . import cluster, jobs, kube, lease
from .errors import Cancelled, ClusterError, JobFailed, JobTimeout, Preempted
from .preemption import MAX_PREEMPTIONS, Preemptions, utc_now
from .rayclusters import GROUP, RAYJOB, VERSION, age_seconds, being_deleted, get, request_delete, wait_gone
from .readiness import PODS_EVERY, ClusterTarget, wait_ready
from .signals import cleanup_deadline, sigterm_raises
from .validate import Checker
from .wait import Backoff, beat, first_line, log

MODES = ("K8sJobMode", "HTTPMode")
# KubeRay's default submitter pod (common/job.go GetDefaultSubmitterTemplate, v1.4.2); Kueue
# (jobs/rayjob v0.11) counts it as the Workload's "submitter" pod set.
SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
SUBMITTER_REQUESTS = {"cpu": cluster.quantity("500m"), "memory": cluster.quantity("200Mi"), "pods": 1}
# The RayJob (KubeRay's view: deadline, submission failure, eviction) is read this often while
# the job runs: 12 GETs a minute (issue 13's budget is 20 a cluster-minute); the job's own end
# is seen through the dashboard within a second.
CHECK_EVERY = 5.0
SUBMIT_TIMEOUT = 600.0  # from the cluster ready to the Ray job known to the dashboard
PACKAGE_WAIT = 600  # how long the submitter pod waits for the job's code before it gives up
TERMINAL_DEPLOYMENT = ("Complete", "Failed")
# A preempted RayJob (Kueue sets spec.suspend; KubeRay deletes its cluster and submitter and
# resets the status: Suspending -> Suspended) is admitted again when quota frees, and KubeRay
# then creates a new cluster and submits the job again under the same spec.jobId. This task
# rides that out up to max_preemptions times (preemption.MAX_PREEMPTIONS by default).
NOT_SUBMITTED = "NOT_SUBMITTED_YET"


# --- the manifest ---------------------------------------------------------------------------
def submitted_entrypoint(entrypoint: str, mode: str) -> str:
    """The entrypoint to give KubeRay, so that the head runs `/bin/sh -c <entrypoint>` exactly
    as the RayCluster path's submit has it run (Ray's job supervisor: Popen(shell=True)).

    HTTPMode: KubeRay posts spec.entrypoint to the dashboard as it is. K8sJobMode mangles it
    twice: KubeRay splices it unquoted into the submitter's bash line (GetK8sJobCommand:
    `ray job submit ... -- <entrypoint> ; fi ; ...`), so bash splits it into words, expands
    `$VAR` in the submitter pod (not on the head) and runs what follows `&&` or `;` itself;
    then Ray's job CLI rejoins the words with subprocess.list2cmdline, without the quotes bash
    removed (`python -c 'print("x")'` reaches the head as `python -c print(\"x\")`, a sh
    syntax error). So K8sJobMode gets a wrapper, shell-quoted word by word for KubeRay's bash:
        eval `echo B1|base64 -d`     with B1 = base64 of  eval "$(echo B2|base64 -d)"
    and B2 = base64 of the entrypoint. Its words hold no blank, tab, double quote, `$(` or
    `$$`, so bash hands them to the CLI as written, list2cmdline (or a plain join) gives the
    line back unchanged, and Kubernetes' $(VAR) expansion of the submitter's args leaves it
    alone. On the head, sh splits the backquotes' output at its single blanks (no glob
    characters in it) and eval rejoins it as it was; that second eval runs B2 decoded, the
    entrypoint byte for byte, in the head's own /bin/sh with the job's environment: the same
    shell, variables and quoting as on the RayCluster path. (Only Ray's "Running entrypoint"
    log line shows the wrapper.)"""
    entrypoint = entrypoint.strip()
    if mode != "K8sJobMode":
        return entrypoint
    inner = base64.b64encode(entrypoint.encode()).decode()
    outer = base64.b64encode(f'eval "$(echo {inner}|base64 -d)"'.encode()).decode()
    return shlex.join(["eval", "`echo", f"{outer}|base64", "-d`"])


def submitter_template(image: str, package: str, runtime_env: dict, entrypoint: str, wait_s: int = PACKAGE_WAIT) -> dict:
    """A submitter pod that waits until `package` is in the cluster's GCS, then runs KubeRay's
    command (GetK8sJobCommand, v1.4.2) through the variables KubeRay gives a user command.
    `entrypoint` is spliced as KubeRay splices it: give submitted_entrypoint()'s."""
    name = package.split("://", 1)[1]
    waiter = (
        "import os, sys, time, urllib.request as u\n"
        f"url = 'http://' + os.environ['RAY_DASHBOARD_ADDRESS'].removeprefix('http://') + '/api/packages/gcs/{name}'\n"
        f"end = time.time() + {int(wait_s)}\n"
        "while True:\n"
        "    try:\n"
        "        u.urlopen(url, timeout=10).close()\n"
        "        break\n"
        "    except Exception:\n"
        "        if time.time() > end:\n"
        f"            sys.exit('the job code {package} was not uploaded to the cluster within {int(wait_s)}s: the task "
        "that uploads it (run_ray_job) is gone')\n"
        "        time.sleep(1)\n"
        f"print('the job code {package} is in the cluster', flush=True)\n")
    address = "http://${RAY_DASHBOARD_ADDRESS#http://}"
    command = (f"python -c {shlex.quote(waiter)} ; "
               f"if ! ray job status --address {address} $RAY_JOB_SUBMISSION_ID >/dev/null 2>&1 ; then "
               f"ray job submit --address {address} --no-wait --runtime-env-json {shlex.quote(json.dumps(runtime_env))} "
               f"--submission-id $RAY_JOB_SUBMISSION_ID -- {entrypoint} ; fi ; "
               f"ray job logs --address {address} --follow $RAY_JOB_SUBMISSION_ID")
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": image, "command": ["/bin/bash", "-ce", "--"], "args": [command],
        "resources": json.loads(json.dumps(SUBMITTER_RESOURCES))}]}}


# HTTPMode has no submitter pod reading the log to its end before KubeRay counts the job as
# over: KubeRay polls the dashboard and, with ttlSecondsAfterFinished 0, deletes the head while
# Ray still sends the last second of the log (its tail reads the file about once a second), so
# this task's final read met a refused connection and the log was lost. The cluster is kept this
# long at the least; this task deletes the RayJob as soon as it has read the log, so the grace
# only counts when the task is gone.
HTTP_MODE_MIN_TTL_S = 10


def effective_ttl(mode: str, ttl_seconds_after_finished: int) -> int:
    """The ttlSecondsAfterFinished the RayJob gets (HTTP_MODE_MIN_TTL_S says why HTTPMode's has a floor)."""
    ttl = int(ttl_seconds_after_finished)
    return max(ttl, HTTP_MODE_MIN_TTL_S) if mode == "HTTPMode" else ttl


def build(spec: cluster.ClusterSpec, queue: str, entrypoint: str, runtime_env: dict, job_id: str, mode: str,
          active_deadline_seconds: int, ttl_seconds_after_finished: int, lease_seconds: float,
          package: str | None = None) -> dict:
    """The RayJob: the cluster the RayCluster path would create as its rayClusterSpec (its
    labels and annotations on the RayJob, which KubeRay copies onto the cluster),
    shutdownAfterJobFinishes (Kueue requires it), the deadlines, no retries (backoffLimit 0:
    a retry is the pipeline task's)."""
    import yaml

    rc = cluster.build_manifest(spec, queue, lease_seconds=lease_seconds)
    submitted = submitted_entrypoint(entrypoint, mode)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "RayJob",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(rc["metadata"].get("labels") or {}),
                     "annotations": dict(rc["metadata"].get("annotations") or {})},
        "spec": {"entrypoint": submitted, "jobId": job_id, "submissionMode": mode,
                 "shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": effective_ttl(mode, ttl_seconds_after_finished),
                 "activeDeadlineSeconds": int(active_deadline_seconds), "backoffLimit": 0, "suspend": True,
                 "rayClusterSpec": rc["spec"]},
    }
    if runtime_env:
        body["spec"]["runtimeEnvYAML"] = yaml.safe_dump(runtime_env, sort_keys=True)
    if package:
        image = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
        body["spec"]["submitterPodTemplate"] = submitter_template(image, package, runtime_env, submitted)
    return body


# --- reading a RayJob -----------------------------------------------------------------------
def status(rj: dict) -> dict:
    return rj.get("status") or {}


def deployment(rj: dict) -> str:
    return status(rj).get("jobDeploymentStatus") or ""


class RayJobTarget(ClusterTarget):
    """readiness.py's view of a RayJob: queued while Kueue keeps it suspended, starting while
    KubeRay brings its cluster up (status.rayClusterName), ready once KubeRay has seen the
    cluster ready (status.dashboardURL) or the job is already past it."""

    kind = "RayJob"

    def __init__(self, name: str, namespace: str, stale: str = ""):
        super().__init__(name, namespace)
        self.stale = stale  # a preempted cluster KubeRay may still be stopping: never ready
        self._cluster: dict | None = None
        self._cluster_read = -1e9

    def read(self) -> dict | None:
        return get(self.name, self.ns, kind=RAYJOB)

    def ready(self, obj: dict) -> bool:
        if deployment(obj) in TERMINAL_DEPLOYMENT:
            return True
        if self.stale and self.cluster_name(obj) in ("", self.stale):
            return False
        return bool(status(obj).get("dashboardURL")) or deployment(obj) == "Running"

    def cluster_name(self, obj: dict) -> str:
        return status(obj).get("rayClusterName") or ""

    def cluster(self, obj: dict, now: float) -> dict | None:
        """The cluster, read at most every readiness.PODS_EVERY (one more GET)."""
        name = self.cluster_name(obj)
        if not name:
            return None
        if self._cluster is None or self._cluster["metadata"]["name"] != name or now - self._cluster_read >= PODS_EVERY:
            self._cluster_read = now
            try:
                self._cluster = get(name, self.ns, attempts=1)
            except Exception as exc:  # noqa: BLE001 - only for KubeRay's ReplicaFailure: the next look tries again
                log(f"could not read RayCluster {name} ({type(exc).__name__}: {first_line(exc)})")
        return self._cluster


# --- following ------------------------------------------------------------------------------
class RayJobFollower(jobs.Follower):
    """jobs.Follower for a job KubeRay submits: until the dashboard knows the job (the
    submitter is at work) it waits instead of calling it lost, and every CHECK_EVERY seconds
    it reads the RayJob: KubeRay's end (DeadlineExceeded, SubmissionFailed, a cluster deleted
    before the dashboard said so), Kueue's eviction, or a RayJob deleted by someone else."""

    def __init__(self, rayjob: str, namespace: str, dashboard_url: str, job_id: str, timeout: float,
                 cluster_name: str = "", **kwargs):
        super().__init__(dashboard_url, job_id, timeout, **kwargs)
        self.rayjob, self.ns, self.cluster_name = rayjob, namespace, cluster_name
        self.seen = False
        self.last: dict | None = None  # the RayJob as last read

    def _poll(self) -> dict | None:
        try:
            info = super()._poll()
        except JobFailed as exc:
            if self.seen or not isinstance(exc, jobs.JobLost):
                raise
            return {"status": NOT_SUBMITTED}
        if info is not None:
            self.seen = True
        return info

    def _check(self) -> dict | None:
        """KubeRay's end of the job, as a final info dict; None while it runs."""
        try:
            rj = get(self.rayjob, self.ns, attempts=1, kind=RAYJOB)
        except Exception as exc:  # noqa: BLE001 - only a second opinion; the dashboard is followed
            log(f"could not read RayJob {self.rayjob} ({type(exc).__name__}: {first_line(exc)})")
            return None
        if rj is None or being_deleted(rj):
            raise ClusterError(f"RayJob {self.rayjob!r} was deleted (by someone else?) while its job ran")
        self.last = rj
        st = status(rj)
        if suspended(rj, self.cluster_name):
            raise Preempted(suspension(rj))
        if deployment(rj) not in TERMINAL_DEPLOYMENT:
            return None
        reason, message = st.get("reason") or "", st.get("message") or ""
        if reason == "DeadlineExceeded":
            raise JobTimeout(f"KubeRay ended RayJob {self.rayjob!r}: {message}. It counts from admission, so the "
                             "deadline is startup_timeout + job_timeout. Fix: raise job_timeout. Last log lines:\n"
                             f"{jobs._tail(self.logs)}")
        if reason == "SubmissionFailed":
            raise JobFailed(f"KubeRay could not submit the job of RayJob {self.rayjob!r}: {message}. Its submitter "
                            f"pod's log:\n{submitter_log(self.rayjob, self.ns, 30)}")
        times = st.get("rayJobInfo") or {}
        return {"status": st.get("jobStatus") or ("SUCCEEDED" if deployment(rj) == "Complete" else "FAILED"),
                "message": message, "start_time": _epoch_ms(times.get("startTime")),
                "end_time": _epoch_ms(times.get("endTime"))}

    def _run(self):  # jobs.Follower.run closes the log stream and file whatever happens
        started = self.clock()
        backoff = Backoff(0.2, 1.5, self.max_poll)
        last_status, checked = None, -CHECK_EVERY
        while True:
            beat(self.heartbeat)
            if self.clock() - checked >= CHECK_EVERY:
                checked = self.clock()
                final = self._check()
                if final is not None and final["status"] in jobs.TERMINAL:
                    if self.info is None or self.info.get("status") not in jobs.TERMINAL:
                        self.info = final  # the cluster may be gone: KubeRay's word is the last
                        self._final_log_or_submitter()
                    break
            info = self._poll()
            if info is not None:
                if info["status"] == NOT_SUBMITTED:
                    if last_status is None:
                        log(f"waiting for KubeRay's submitter to submit Ray job {self.job_id}")
                        last_status = NOT_SUBMITTED
                    if self.clock() - started > SUBMIT_TIMEOUT:
                        raise JobFailed(f"Ray job {self.job_id} of RayJob {self.rayjob!r} was not submitted within "
                                        f"{SUBMIT_TIMEOUT:.0f}s of the cluster being ready. The submitter pod's log:\n"
                                        f"{submitter_log(self.rayjob, self.ns, 30)}")
                else:
                    self.info = info
                    if info["status"] != last_status:
                        log(f"job {self.job_id}: {info['status']}")
                        last_status = info["status"]
                    if info["status"] in jobs.TERMINAL:
                        break
            if self.clock() - started > self.timeout:
                raise self._timed_out()
            if info is None:
                self.sleep(self.outage.pause())
            elif not self.more:  # more log waiting: read on at once (KubeRay and the status are checked first)
                self.sleep(backoff.next())
        return self._result(started)

    def _final_log_or_submitter(self) -> None:
        try:
            self._take(jobs.RayJobsClient(self.url, timeout=self.request_timeout, attempts=2).logs(self.job_id) or self.logs)
        except Exception:  # noqa: BLE001 - the cluster is gone: the submitter pod's log has the job's
            self._take(submitter_log(self.rayjob, self.ns))  # what it has beyond what was streamed


def suspended(rj: dict, cluster_name: str) -> bool:
    """Kueue has suspended the RayJob whose cluster `cluster_name` ran its job: spec.suspend
    set, KubeRay stopping it, or already on a new cluster (a whole cycle between two looks)."""
    name = status(rj).get("rayClusterName") or ""
    return bool((rj.get("spec") or {}).get("suspend") or deployment(rj) in ("Suspending", "Suspended")
                or (cluster_name and name and name != cluster_name))


def suspension(rj: dict) -> str:
    """What suspended the RayJob, in Kueue's words where this service account may read its Workload."""
    from .queues import KueueView

    name = rj["metadata"]["name"]
    ev = KueueView().eviction(rj)
    if ev and ev.reason:
        return f"Kueue suspended RayJob {name!r} while its job ran: {ev.reason}: {ev.message}"
    return (f"Kueue suspended RayJob {name!r} while its job ran (preempted, or its queue stopped; Kueue's reason is in "
            "its Workload, which this service account may not read)")


def _epoch_ms(ts: str | None) -> int | None:
    """KubeRay's rayJobInfo times (RFC 3339) as the dashboard gives them (ms since the epoch)."""
    try:
        return int(lease.parse(ts).timestamp() * 1000) if ts else None
    except ValueError:
        return None


def submitter_log(rayjob: str, namespace: str, tail: int | None = None) -> str:
    """The log of the RayJob's newest submitter pod (K8sJobMode: `ray job logs --follow`
    writes the job's whole log there), redacted; '' when there is none or it is unreadable."""
    from .redact import redact

    try:
        pods = kube.call(kube.core().list_namespaced_pod, namespace, label_selector=f"batch.kubernetes.io/job-name={rayjob}",
                         what="list the submitter pods", attempts=2).items
        if not pods:
            return ""
        newest = max(pods, key=lambda p: p.metadata.creation_timestamp or 0)
        text = kube.call(kube.core().read_namespaced_pod_log, newest.metadata.name, namespace, tail_lines=tail,
                         what=f"read the log of {newest.metadata.name}", attempts=2)
    except Exception as exc:  # noqa: BLE001 - a hint, never the failure itself
        return f"(unreadable: {type(exc).__name__}: {first_line(exc)})"
    return redact(text or "")


# --- the whole run --------------------------------------------------------------------------
@dataclass
class Ran:
    rayjob: str
    namespace: str
    cluster_name: str
    queued_seconds: float
    starting_seconds: float
    result: jobs.JobResult
    preemptions: int = 0  # ridden out
    preempted_seconds: float = 0.0  # Preemptions.lost_seconds
    admitted: dict = field(default_factory=dict)  # readiness.admission: Kueue's record (the usage ledger's)
    shape: str = ""  # the cluster as the run report shows it (tasks.run_job)

    def record(self) -> dict:
        """The job log artifact's metadata: the job, and the usage ledger's facts."""
        r = self.result
        return {"job_id": r.job_id, "status": r.status, "rayjob": self.rayjob, "preemptions": r.preempted_times,
                "admitted": self.admitted, "released_at": r.released_at}

    def outputs(self) -> tuple:
        """run_ray_job's outputs, in its NamedTuple's order: status, duration_seconds,
        teardown_seconds, rayjob_name, cluster_name, queued_seconds, starting_seconds, shape."""
        r = self.result
        return (r.status, r.duration_seconds, r.teardown_seconds, self.rayjob, self.cluster_name, self.queued_seconds,
                self.starting_seconds, self.shape)

    def metrics(self) -> dict:
        """The task's metrics: the job's own (KFP_RAY_METRICS), then how it ran."""
        return {**self.result.metrics, "job_duration_seconds": self.result.duration_seconds,
                "preemptions": self.preemptions, "preempted_seconds": self.preempted_seconds}


def check_inputs(c: Checker, mode: str, working_dir: str, active_deadline_seconds, ttl_seconds_after_finished,
                 max_preemptions=MAX_PREEMPTIONS) -> None:
    c.at_least("max_preemptions", max_preemptions, 0,
               f"give how many Kueue preemptions the run rides out, e.g. {MAX_PREEMPTIONS} (0: fail at the first)")
    if mode not in MODES:
        c.fail("submission_mode", f"{mode!r} is not one of {', '.join(MODES)}",
               "give K8sJobMode (KubeRay's submitter pod runs `ray job submit`; the default) or HTTPMode (KubeRay "
               "submits through the dashboard)")
    elif mode == "HTTPMode" and working_dir and not working_dir.startswith(("https://", "http://")):
        c.fail("working_dir", f"{working_dir!r} must be uploaded to the cluster before KubeRay submits the job, which "
                              "only K8sJobMode's submitter pod can wait for",
               "use submission_mode K8sJobMode, or give the code as an https:// zip URL")
    c.positive_seconds("job_timeout", active_deadline_seconds)
    if not isinstance(ttl_seconds_after_finished, int) or isinstance(ttl_seconds_after_finished, bool) \
            or ttl_seconds_after_finished < 0:
        c.fail("ttl_seconds_after_finished", f"{ttl_seconds_after_finished!r} is not a whole number of seconds >= 0",
               "give 0 (KubeRay deletes the cluster as soon as the job ends) or more")


def run(spec: cluster.ClusterSpec, entrypoint: str, runtime_env: dict, package: tuple[str, bytes] | None, job_id: str,
        mode: str, admission_timeout: float, startup_timeout: float, job_timeout: float,
        ttl_seconds_after_finished: int, derived_name: bool, lease_seconds: float,
        renew_every_seconds: float, max_poll_seconds: float = jobs.MAX_POLL,
        outage_tolerance_seconds: float = jobs.OUTAGE_TOLERANCE, image_pull_grace: float | None = None,
        log_path: str | None = None, max_preemptions: int = MAX_PREEMPTIONS, shipper=None) -> Ran:
    """Create (or adopt) the RayJob, wait for admission and pods, upload the code, follow the
    job to its end, then delete the RayJob (KubeRay's cluster with it) and wait until both
    are gone. A preemption (Kueue suspends the RayJob; KubeRay deletes its cluster) is ridden
    out up to `max_preemptions` times: the wait for admission and pods starts again (with its
    timeouts), the code is uploaded to the new cluster and the job KubeRay submits there is
    followed, its log appended. On any failure the RayJob is deleted before raising; on SIGTERM the job's stop
    and the RayJob's deletion are requested at once and awaited within the grace period. The
    job's log streams into log_path (redacted) as it is read, and with a `shipper`
    (jobs.LogShipper of log_path) to S3 as it grows and, whole, at the end."""
    deadline_s = int(startup_timeout + job_timeout)
    cluster.check_namespace(spec)
    cluster.check_data_connection(spec)
    from .queue_position import QueuePosition
    from .queues import read_once

    with read_once():
        queue = cluster.resolve_queue(spec)
        cluster.check_quota(spec, queue, SUBMITTER_REQUESTS if mode == "K8sJobMode" else None)
    body = build(spec, queue, entrypoint, runtime_env, job_id, mode, deadline_s, ttl_seconds_after_finished,
                 lease_seconds=admission_timeout + startup_timeout + lease_seconds,
                 package=package[0] if package else None)
    creation = cluster.Creation(kind=RAYJOB)
    follower: RayJobFollower | None = None
    with sigterm_raises():
        try:
            try:
                rj, adopted = cluster.create_or_adopt(body, creation)
                log(f"RayJob {spec.name} {'adopted' if adopted else 'created'} in {spec.namespace}, LocalQueue {queue}: "
                    f"KubeRay creates its cluster once Kueue admits it, submits `{entrypoint.strip()}` ({mode}) and "
                    f"deletes the cluster {effective_ttl(mode, ttl_seconds_after_finished)}s after the job ends (this "
                    f"task sooner, once it has the job's log), or {deadline_s}s after "
                    "admission (activeDeadlineSeconds)")
                renewer = lease.Renewer(spec.name, spec.namespace, lease_seconds, renew_every_seconds,
                                        first_in=0.0 if adopted else renew_every_seconds, kind=RAYJOB)
                preemptions, queued, starting, stale, admitted = Preemptions(spec.name, max_preemptions), 0.0, 0.0, "", {}
                while True:
                    waited = wait_ready(spec.name, spec.namespace, queue, admission_timeout, startup_timeout,
                                        queue_note="" if spec.local_queue else ", chosen because local_queue was empty",
                                        heartbeat=renewer, target=RayJobTarget(spec.name, spec.namespace, stale),
                                        position=QueuePosition(queue, spec.namespace),
                                        **({} if image_pull_grace is None else {"image_pull_grace": image_pull_grace}))
                    queued, starting = queued + waited.queued_seconds, starting + waited.starting_seconds
                    admitted = admitted or waited.admitted  # the first admission: the ledger's start
                    preemptions.running_again()
                    rj = creation.rc = get(spec.name, spec.namespace, kind=RAYJOB) or rj
                    cluster_name = status(rj).get("rayClusterName") or ""
                    url = cluster.dashboard_url(cluster_name, spec.namespace)
                    if deployment(rj) in TERMINAL_DEPLOYMENT:
                        # A retry adopting a RayJob whose job already ended: KubeRay may have deleted
                        # its cluster, so nothing is uploaded; the follower reports KubeRay's outcome.
                        log(f"RayJob {spec.name}'s job already ended ({deployment(rj)}"
                            f"{': ' + status(rj)['reason'] if status(rj).get('reason') else ''}): reporting its outcome")
                    else:
                        log(f"RayJob {spec.name}: RayCluster {cluster_name} is ready; dashboard {url}")
                        if package:
                            jobs.RayJobsClient(url).upload_package(package[0], package[1], "of the job")
                    follower = RayJobFollower(spec.name, spec.namespace, url, status(rj).get("jobId") or job_id,
                                              timeout=deadline_s + 60, cluster_name=cluster_name,
                                              max_poll=max_poll_seconds, outage_tolerance=outage_tolerance_seconds,
                                              heartbeat=renewer, log_path=log_path, heading=preemptions.heading(),
                                              shipper=shipper)
                    followed = time.monotonic()
                    try:
                        result = follower.run()
                        break
                    except Preempted as exc:
                        preemptions.preempted(exc, time.monotonic() - followed)
                        stale = cluster_name
                result.teardown_seconds = _delete_after_success(spec, creation, shipper)
                result.released_at = utc_now()
                result.preempted_times = preemptions.times
                return Ran(spec.name, spec.namespace, cluster_name, round(queued, 2), round(starting, 2), result,
                           preemptions.count, round(preemptions.lost_seconds, 1), admitted)
            except Exception as exc:
                if creation.sent or creation.rc:
                    log(f"{type(exc).__name__}: deleting RayJob {spec.name} (and its cluster) so it holds no quota")
                    try:
                        _delete_when_over(spec, creation)
                    except Exception as again:  # noqa: BLE001 - teardown and the sweeper try again
                        log(f"could not delete RayJob {spec.name} ({type(again).__name__}: {first_line(again)}); "
                            "teardown will retry")
                raise
        except Cancelled as exc:
            if creation.sent or creation.rc:
                _cancel(spec, creation, follower, cleanup_deadline(exc))
            raise
        finally:
            if shipper:
                shipper.ship(whole=True)  # the whole log beside its parts


def _delete_after_success(spec: cluster.ClusterSpec, creation: cluster.Creation, shipper=None) -> float:
    """The job succeeded: its result stands whatever the deletion meets (KubeRay deletes the
    cluster anyway; the exit handler's teardown and the sweeper delete the RayJob)."""
    started = time.monotonic()
    try:
        return _delete_when_over(spec, creation, shipper)
    except Exception as exc:  # noqa: BLE001 - reported; the job's result stands
        log(f"could not delete RayJob {spec.name} ({type(exc).__name__}: {first_line(exc, 400)}); teardown will retry")
        return round(time.monotonic() - started, 2)


def _delete_when_over(spec: cluster.ClusterSpec, creation: cluster.Creation, shipper=None) -> float:
    """Delete the RayJob (its cluster and submitter go with it, by owner reference) and wait
    until the RayJob and the cluster are gone; a `shipper` copies the whole log in between.
    Returns the seconds it took."""
    started = time.monotonic()
    rj = get(spec.name, spec.namespace, kind=RAYJOB)
    if rj is None or not cluster._ours(rj, spec, creation):
        return 0.0
    name = status(rj).get("rayClusterName") or ""
    rc = get(name, spec.namespace) if name else None
    if not being_deleted(rj):
        request_delete(spec.name, spec.namespace, rj["metadata"]["uid"], kind=RAYJOB)
    if shipper:
        shipper.ship(whole=True)
    wait_gone(rj)
    if rc is not None:
        wait_gone(rc)
    log(f"deleted RayJob {spec.name}" +
        (f" and RayCluster {name} (lived {age_seconds(rc):.0f}s)" if rc is not None else ""))
    return round(time.monotonic() - started, 2)


def _cancel(spec: cluster.ClusterSpec, creation: cluster.Creation, follower: RayJobFollower | None,
            deadline: float) -> None:
    """SIGTERM: stop the Ray job (a thread) and delete the RayJob at once; wait until the
    RayJob and its cluster are gone, never past `deadline`."""
    if follower is not None:
        threading.Thread(target=follower.request_stop, args=(deadline,), name="stop-ray-job", daemon=True).start()
    latest = (follower.last if follower is not None else None) or creation.rc
    cluster_name = status(latest).get("rayClusterName") if latest else ""
    cluster.cleanup_cancelled(spec, creation, deadline)
    if not cluster_name:
        return
    backoff = Backoff(0.2, 1.5, 1.0)
    while time.monotonic() < deadline:
        try:
            if get(cluster_name, spec.namespace, deadline=deadline) is None:
                log(f"RayCluster {cluster_name} is gone")
                return
        except Exception:  # noqa: BLE001 - keep looking until the deadline
            pass
        time.sleep(min(backoff.next(), max(0.0, deadline - time.monotonic())))
    log(f"RayCluster {cluster_name} is still being deleted as the grace period ends; it goes with its RayJob")

