"""KubeRay's RayJob controller, as ray-project/kuberay v1.4.2 runs it
(ray-operator/controllers/ray/rayjob_controller.go, common/job.go, common/association.go,
utils/util.go, utils/validation.go, utils/dashboard_httpclient.go, utils/constant.go;
feature gate RayJobDeletionPolicy off, its default; DELETE_RAYJOB_CR_AFTER_JOB_FINISHES and
RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS unset, as RHOAI leaves them).

Each RayJob takes one step of the Reconcile state machine per pass, and the status is written
only when jobStatus or jobDeploymentStatus changes (updateRayJobStatus; endTime then, when it
becomes Complete or Failed):
- being deleted: stop the Ray job through the dashboard unless its jobStatus is terminal,
  then drop finalizer `ray.io/rayjob-finalizer` (the RayCluster and the submitter go by their
  ownerReferences);
- ValidateRayJobMetadata / ValidateRayJobSpec / ValidateRayJobStatus failures: a Warning event
  (InvalidRayJobMetadata, InvalidRayJobSpec, InvalidRayJobStatus), no status change, retried;
- New (""): finalizer, jobId `<name>-<5>` (spec.jobId if set), rayClusterName `<name>-<5>`
  (utils.GenerateRayClusterName, k8s.io/apimachinery rand.String), jobStatus "" ,
  Initializing, startTime;
- Initializing: Suspending if spec.suspend; Failed/DeadlineExceeded past activeDeadlineSeconds;
  else create the RayCluster (constructRayClusterForRayJob: the RayJob's labels plus
  ray.io/originated-from-cr-name and ray.io/originated-from-crd=RayJob, its annotations,
  spec.rayClusterSpec, controller ownerReference; through the API server's admission, so
  CodeFlare's and Kueue's webhooks see it), wait for state `ready`, dashboardURL
  `<head-svc>.<ns>.svc.cluster.local:<dashboard port>` (FetchHeadServiceURL), the submitter
  in K8sJobMode, then Running (InteractiveMode: Waiting);
- Running: Suspending, DeadlineExceeded, the 300 s transition grace period; in K8sJobMode the
  submitter failing (Failed, AppFailed if jobStatus FAILED else SubmissionFailed with
  "Job submission has failed. Reason: ..."); then GetJobInfo from the dashboard (HTTPMode:
  submit when the job is not found), jobStatus / message / rayJobInfo / rayClusterStatus, and
  Complete or Failed (AppFailed) once the Ray job is terminal (and, in K8sJobMode, the
  submitter finished);
- Suspending / Retrying: delete the RayCluster and the submitter, wait until both are gone,
  reset the status, then Suspended / New; Suspended: New again once spec.suspend is false;
- Complete / Failed: with shutdownAfterJobFinishes (and no clusterSelector), delete the
  RayCluster ttlSecondsAfterFinished after endTime (the submitter stays, for its logs);
- checkBackoffLimitAndUpdateStatusIfNeeded: status.failed / succeeded, and Retrying while
  failed < backoffLimit + 1 unless the reason is DeadlineExceeded.
Requeue: 3 s (RayJobDefaultRequeueDuration), at once when the RayJob, its RayCluster or its
submitter pods change, and at the TTL's and activeDeadlineSeconds' due times.

The submitter (K8sJobMode): KubeRay creates a batch/v1 Job named as the RayJob (backoffLimit
submitterConfig.backoffLimit, default 2) whose pod runs common.GetK8sJobCommand with
`/bin/bash -ce --`. The sandbox serves no batch/v1 Jobs: this controller plays the Job
controller (kubernetes v1.31 pkg/controller/job) for that one Job, from its pods: pods
`<name>-<5>` labelled as the Job controller labels them (batch.kubernetes.io/job-name,
job-name, controller-uid, batch.kubernetes.io/controller-uid), one at a time, a new one after a
failure once its back-off passed (10 s doubling, at most 10 min), Complete once one succeeded,
Failed (BackoffLimitExceeded, "Job has reached the specified backoff limit") after
backoffLimit + 1 failures. The pods' controller ownerReference is the RayJob itself (there is
no Job object); README "Where the sandbox differs".

The dashboard: the operator reaches `http://<dashboardURL>` (utils.RayDashboardClient, 2 s
timeout) as cluster DNS resolves it, here through the Service's clusterIP (the kube-proxy), or
the head pod's address for a headless Service.
"""

from __future__ import annotations

import copy
import json
import random
import re
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import yaml

from ..apiserver.errors import ApiError
from .base import Controller, log, owner_ref, record_event
from .kueue_jobs import default_submitter_template, submission_mode

RECORDER = "rayjob-controller"
FINALIZER = "ray.io/rayjob-finalizer"
KUBERAY_MANAGER = "ray.io/kuberay-operator"
REQUEUE_S = 3.0  # RayJobDefaultRequeueDuration
GRACE_PERIOD_S = 300  # DEFAULT_RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS
MAX_NAME = 57  # MaxRayJobNameLength = MaxRayClusterNameLength - 6
DASHBOARD_TIMEOUT = 2.0
JOB_BACKOFF_BASE, JOB_BACKOFF_MAX = 10.0, 600.0  # kube-controller-manager's job pod failure back-off
SUBMITTER_BACKOFF_LIMIT = 2
TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")  # rayv1.IsJobTerminal
ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The zero RayClusterStatus as Go marshals it (Quantities print "0", the head struct {}).
ZERO_CLUSTER_STATUS = {"desiredCPU": "0", "desiredGPU": "0", "desiredMemory": "0", "desiredTPU": "0", "head": {}}
JOB_LABELS = ("batch.kubernetes.io/job-name", "job-name")
UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")


def rand_string(n: int = 5) -> str:
    return "".join(random.choice(ALPHANUMS) for _ in range(n))


def generate_name(base: str) -> str:
    """utils.GenerateRayClusterName / GenerateRayJobId: `<base>-<5 random>`."""
    return f"{base}-{rand_string()}"


def _epoch(ts: str | None) -> float | None:
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp() if ts else None
    except ValueError:
        return None


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _go_time(ts: str | None) -> str:
    """metav1.Time as Go's %v prints it in KubeRay's DeadlineExceeded message."""
    epoch = _epoch(ts)
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC") if epoch is not None else "<nil>"


def _go_quote(s: str) -> str:
    """strconv.Quote for the runtime-env and metadata JSON (ASCII JSON quotes the same way)."""
    return json.dumps(s)


def runtime_env_json(rayjob: dict) -> str:
    """getRuntimeEnvJson: runtimeEnvYAML as compact JSON (yaml.YAMLToJSON sorts the keys)."""
    text = (rayjob.get("spec") or {}).get("runtimeEnvYAML") or ""
    if not text:
        return ""
    return json.dumps(yaml.safe_load(text), separators=(",", ":"), sort_keys=True)


def k8s_job_command(rayjob: dict) -> list[str]:
    """common.GetK8sJobCommand: `ray job status` || `ray job submit --no-wait`, then `ray job logs --follow`."""
    spec, status = rayjob.get("spec") or {}, rayjob.get("status") or {}
    address = status.get("dashboardURL", "")
    if not address.startswith("http://"):
        address = "http://" + address
    job_id = status.get("jobId", "")
    cmd = ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then",
           "ray", "job", "submit", "--address", address, "--no-wait"]
    env = runtime_env_json(rayjob)
    if env:
        cmd += ["--runtime-env-json", _go_quote(env)]
    if spec.get("metadata"):
        cmd += ["--metadata-json", _go_quote(json.dumps(spec["metadata"], separators=(",", ":"), sort_keys=True))]
    if job_id:
        cmd += ["--submission-id", job_id]
    if (spec.get("entrypointNumCpus") or 0) > 0:
        cmd += ["--entrypoint-num-cpus", f"{float(spec['entrypointNumCpus']):f}"]
    if (spec.get("entrypointNumGpus") or 0) > 0:
        cmd += ["--entrypoint-num-gpus", f"{float(spec['entrypointNumGpus']):f}"]
    if spec.get("entrypointResources"):
        cmd += ["--entrypoint-resources", _go_quote(spec["entrypointResources"])]
    cmd += ["--", (spec.get("entrypoint") or "").strip(), ";", "fi", ";",
            "ray", "job", "logs", "--address", address, "--follow", job_id]
    return cmd


def submitter_template(rayjob: dict, cluster: dict | None = None) -> dict:
    """getSubmitterTemplate: the user's template or the default, the default command when the first
    container has none, then PYTHONUNBUFFERED, RAY_DASHBOARD_ADDRESS and RAY_JOB_SUBMISSION_ID.
    The default (common.GetDefaultSubmitterTemplate) takes the image of the RayCluster the job runs
    on, the one its clusterSelector names included (it has no rayClusterSpec)."""
    spec, status = rayjob.get("spec") or {}, rayjob.get("status") or {}
    cluster_spec = (cluster or {}).get("spec") or spec.get("rayClusterSpec")
    template = copy.deepcopy(spec.get("submitterPodTemplate") or default_submitter_template(cluster_spec))
    c0 = template.setdefault("spec", {}).setdefault("containers", [{}])[0]
    if not c0.get("command"):
        c0["command"] = ["/bin/bash", "-ce", "--"]
        c0["args"] = [" ".join(k8s_job_command(rayjob))]
    c0["env"] = list(c0.get("env") or []) + [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_DASHBOARD_ADDRESS", "value": status.get("dashboardURL", "")},
        {"name": "RAY_JOB_SUBMISSION_ID", "value": status.get("jobId", "")}]
    return template


def validate_metadata(meta: dict) -> str | None:
    """utils.ValidateRayJobMetadata."""
    name = meta.get("name", "")
    if len(name) > MAX_NAME:
        return f"RayJob name should be no more than {MAX_NAME} characters"
    if not DNS1035.match(name):
        return ("RayJob name should be a valid DNS1035 label: [a DNS-1035 label must consist of lower case "
                "alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric "
                "character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]")
    return None


def validate_spec(rayjob: dict) -> str | None:
    """utils.ValidateRayJobSpec (RayJobDeletionPolicy gate off); the RayClusterSpec checks are the
    RayCluster controller's own and are not repeated here."""
    spec = rayjob.get("spec") or {}
    shutdown, selector = bool(spec.get("shutdownAfterJobFinishes")), bool(spec.get("clusterSelector"))
    if spec.get("suspend") and not shutdown:
        return "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"
    ttl = spec.get("ttlSecondsAfterFinished") or 0
    if ttl < 0:
        return "TTLSecondsAfterFinished must be a non-negative integer"
    if not shutdown and ttl > 0:
        return "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished"
    if spec.get("suspend") and selector:
        return "the ClusterSelector mode doesn't support the suspend operation"
    if spec.get("rayClusterSpec") is None and not selector:
        return "one of RayClusterSpec or ClusterSelector must be set"
    if submission_mode(rayjob) == "InteractiveMode" and (spec.get("backoffLimit") or 0) > 0:
        return "BackoffLimit is incompatible with InteractiveMode"
    try:
        yaml.safe_load(spec.get("runtimeEnvYAML") or "")
    except yaml.YAMLError as exc:
        return f"failed to unmarshal RuntimeEnvYAML: {exc}"
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        return "activeDeadlineSeconds must be a positive integer"
    if spec.get("backoffLimit") is not None and spec["backoffLimit"] < 0:
        return "backoffLimit must be a positive integer"
    if spec.get("deletionPolicy") is not None:
        return "RayJobDeletionPolicy feature gate must be enabled to use the DeletionPolicy feature"
    return None


def check_backoff_limit(status: dict, spec: dict) -> None:
    """checkBackoffLimitAndUpdateStatusIfNeeded."""
    failed, succeeded = int(status.get("failed") or 0), int(status.get("succeeded") or 0)
    if status.get("jobDeploymentStatus") == "Failed":
        failed += 1
    if status.get("jobStatus") == "SUCCEEDED" and status.get("jobDeploymentStatus") == "Complete":
        succeeded += 1
    status["failed"], status["succeeded"] = failed, succeeded
    limit = spec.get("backoffLimit")
    if status.get("jobDeploymentStatus") == "Failed" and limit is not None and failed < limit + 1:
        if status.get("reason") == "DeadlineExceeded":
            return
        status["jobDeploymentStatus"] = "Retrying"


def deadline_at(status: dict, spec: dict) -> float | None:
    """When activeDeadlineSeconds passes (epoch), from status.startTime."""
    ads, start = spec.get("activeDeadlineSeconds"), _epoch(status.get("startTime"))
    return None if ads is None or start is None else start + ads


def check_active_deadline(status: dict, spec: dict, now: float) -> bool:
    """checkActiveDeadlineAndUpdateStatusIfNeeded."""
    due = deadline_at(status, spec)
    if due is None or now < due:
        return False
    status.update(jobDeploymentStatus="Failed", reason="DeadlineExceeded",
                  message=f"The RayJob has passed the activeDeadlineSeconds. StartTime: {_go_time(status.get('startTime'))}. "
                          f"ActiveDeadlineSeconds: {spec['activeDeadlineSeconds']}")
    return True


def check_grace_period(status: dict, now: float) -> bool:
    """checkTransitionGracePeriodAndUpdateStatusIfNeeded."""
    if status.get("jobStatus") not in TERMINAL or status.get("jobDeploymentStatus") != "Running":
        return False
    end = _epoch((status.get("rayJobInfo") or {}).get("endTime"))
    if end is None or now < end + GRACE_PERIOD_S:
        return False
    status["jobDeploymentStatus"] = "Failed" if status.get("jobStatus") == "FAILED" else "Complete"
    status["reason"] = "JobDeploymentStatusTransitionGracePeriodExceeded"
    status["message"] = ("JobDeploymentStatus does not transition to Complete or Failed within the grace period "
                         "after JobStatus reaches a terminal state.")
    return True


def suspending_if_needed(status: dict, spec: dict) -> bool:
    """updateStatusToSuspendingIfNeeded: only Running and Initializing may become Suspending."""
    if not spec.get("suspend") or status.get("jobDeploymentStatus") not in ("Running", "Initializing"):
        return False
    status["jobDeploymentStatus"] = "Suspending"
    return True


def init_status(status: dict, rayjob: dict, now: float) -> None:
    """initRayJobStatusIfNeed."""
    spec = rayjob.get("spec") or {}
    if status.get("jobId") and status.get("rayClusterName") and status.get("jobStatus"):
        return
    if submission_mode(rayjob) != "InteractiveMode" and not status.get("jobId"):
        status["jobId"] = spec.get("jobId") or generate_name(rayjob["metadata"]["name"])
    if not status.get("rayClusterName"):
        selector = spec.get("clusterSelector") or {}
        status["rayClusterName"] = selector.get("ray.io/cluster", "") if selector else \
            generate_name(rayjob["metadata"]["name"])
    status.setdefault("jobStatus", "")
    status["jobDeploymentStatus"] = "Initializing"
    status["startTime"] = _rfc3339(now)


def reset_status(status: dict) -> None:
    """The Suspending/Retrying reset."""
    status["rayClusterStatus"] = dict(ZERO_CLUSTER_STATUS)
    for key in ("rayClusterName", "dashboardURL", "jobId", "message", "reason"):
        status[key] = ""
    status["rayJobInfo"] = {}
    status["jobStatus"] = ""
    status["jobDeploymentStatus"] = {"Suspending": "Suspended", "Retrying": ""}[status["jobDeploymentStatus"]]


def wire_status(status: dict) -> dict:
    """The status as Go marshals RayJobStatus: omitempty strings and nil times left out."""
    out = {k: v for k, v in status.items() if not (v in ("", None) and k != "rayJobInfo")}
    out.setdefault("rayJobInfo", {})
    out.setdefault("rayClusterStatus", dict(ZERO_CLUSTER_STATUS))
    return out


class _Requeue(Exception):
    """Reconcile returned an error or a RequeueAfter before writing the status."""

    def __init__(self, after: float | None = REQUEUE_S):
        super().__init__(after)
        self.after = after


class DashboardError(Exception):
    def __init__(self, message: str, not_found: bool = False):
        super().__init__(message)
        self.not_found = not_found


class Dashboard:
    """utils.RayDashboardClient: the Jobs API at http://<address> (2 s timeout)."""

    def __init__(self, address: str):
        self.base = "http://" + address

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=DASHBOARD_TIMEOUT) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:
            raise DashboardError(str(exc)) from None

    def job_info(self, job_id: str) -> dict:
        code, body = self._call("GET", "/api/jobs/" + job_id)
        if code == 404:
            raise DashboardError(f"Job {job_id} does not exist on the cluster", not_found=True)
        try:
            return json.loads(body)
        except ValueError:
            raise DashboardError(f"GetJobInfo fail: {body.decode(errors='replace')}") from None

    def submit(self, rayjob: dict) -> None:
        """ConvertRayJobToReq + SubmitJobReq."""
        spec = rayjob.get("spec") or {}
        req = {"entrypoint": spec.get("entrypoint", ""), "submission_id": rayjob["status"].get("jobId", "")}
        if spec.get("metadata"):
            req["metadata"] = spec["metadata"]
        if spec.get("runtimeEnvYAML"):
            req["runtime_env"] = yaml.safe_load(spec["runtimeEnvYAML"])
        if spec.get("entrypointNumCpus"):
            req["entrypoint_num_cpus"] = spec["entrypointNumCpus"]
        if spec.get("entrypointNumGpus"):
            req["entrypoint_num_gpus"] = spec["entrypointNumGpus"]
        if spec.get("entrypointResources"):
            req["entrypoint_resources"] = json.loads(spec["entrypointResources"])
        code, body = self._call("POST", "/api/jobs/", req)
        if not 200 <= code <= 299:
            raise DashboardError(f"SubmitJob fail: {code} {body.decode(errors='replace')}")

    def stop(self, job_id: str) -> None:
        code, body = self._call("POST", f"/api/jobs/{job_id}/stop")
        try:
            stopped = json.loads(body).get("stopped")
        except (ValueError, AttributeError):
            raise DashboardError(body.decode(errors="replace")) from None
        if not stopped and self.job_info(job_id).get("status") not in TERMINAL:
            raise DashboardError("Failed to stopped job")


class RayJobController(Controller):
    name = "rayjob"

    def __init__(self, store, registry, admit=None, clock=time.time):
        """`admit(op, rt, obj, old)`: the API server's admission chain, which the objects KubeRay
        creates pass (CodeFlare's and Kueue's webhooks); None: none."""
        super().__init__(store, registry)
        self.admit = admit
        self.clock = clock
        self.rj_t = self.rt("ray.io", "rayjobs")
        self.rc_t = self.rt("ray.io", "rayclusters")
        self.pod_t = self.rt("", "pods")
        self.svc_t = self.rt("", "services")
        self._next: dict[str, tuple[float | None, tuple]] = {}  # uid -> (requeue at, fingerprint)

    def _event(self, rj: dict, type_: str, reason: str, message: str) -> None:
        try:
            record_event(self.store, self.registry, rj, type_, reason, message, RECORDER)
        except ApiError:
            pass

    def reconcile(self) -> None:
        now = self.clock()
        jobs, _ = self.store.list(self.rj_t)
        # Following Kueue (kueue.py ORDER): a RayJob Kueue has not seen yet waits for its next pass.
        horizon = getattr(self._leader, "seen_rv", None)
        wake = None
        for rj in jobs:
            uid = rj["metadata"]["uid"]
            if horizon is not None and int(rj["metadata"]["resourceVersion"]) > horizon:
                continue
            fingerprint = self._fingerprint(rj)
            due, seen = self._next.get(uid, (0.0, ()))
            if seen == fingerprint and (due is None or now < due):
                wake = due if wake is None or (due is not None and due < wake) else wake
                continue
            try:
                after = self._reconcile(rj, now)
            except _Requeue as req:
                after = req.after
            except Exception:  # one RayJob never stops the others
                log.exception("rayjob: %s/%s", rj["metadata"]["namespace"], rj["metadata"]["name"])
                after = REQUEUE_S
            at = None if after is None else now + after
            # the fingerprint from before the pass: its own writes wake it at once, as KubeRay's watches do
            self._next[uid] = (at, fingerprint)
            if at is not None and (wake is None or at < wake):
                wake = at
        live = {rj["metadata"]["uid"] for rj in jobs}
        for uid in [u for u in self._next if u not in live]:
            del self._next[uid]
        self.resync = Controller.resync if wake is None else max(0.02, min(Controller.resync, wake - self.clock()))

    def _fingerprint(self, rj: dict) -> tuple:
        """What KubeRay watches of a RayJob: itself, its RayCluster, its submitter (Owns)."""
        ns, status = rj["metadata"]["namespace"], rj.get("status") or {}
        rc = self.store.find(self.rc_t, ns, status["rayClusterName"]) if status.get("rayClusterName") else None
        return (rj["metadata"]["resourceVersion"], rc["metadata"]["resourceVersion"] if rc else None,
                tuple(sorted(p["metadata"]["resourceVersion"] for p in self._submitter_pods(rj))))

    # --- the state machine -----------------------------------------------------------
    def _reconcile(self, rj: dict, now: float) -> float | None:
        meta, spec = rj["metadata"], rj.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        if spec.get("managedBy") not in (None, KUBERAY_MANAGER):
            return None  # "Skipping RayJob managed by a custom controller"
        status = copy.deepcopy(rj.get("status") or {})
        if meta.get("deletionTimestamp"):
            if status.get("jobStatus") not in TERMINAL:
                try:
                    self._dashboard(rj).stop(status.get("jobId", ""))
                except (DashboardError, _Requeue) as exc:
                    log.info("rayjob %s/%s: failed to stop job: %s", ns, name, exc)
            self.store.mutate(self.rj_t, ns, name, lambda o: o["metadata"].update(
                finalizers=[f for f in o["metadata"].get("finalizers") or [] if f != FINALIZER]))
            return REQUEUE_S
        for check, reason, what in ((validate_metadata(meta), "InvalidRayJobMetadata", "metadata"),
                                    (validate_spec(rj), "InvalidRayJobSpec", "spec")):
            if check:
                self._event(rj, "Warning", reason, f"The RayJob {what} is invalid {ns}/{name}: {check}")
                return REQUEUE_S
        if status.get("jobDeploymentStatus") == "Waiting" and submission_mode(rj) != "InteractiveMode":
            self._event(rj, "Warning", "InvalidRayJobStatus", f"The RayJob status is invalid {ns}/{name}: invalid RayJob "
                        "State: JobDeploymentStatus cannot be `Waiting` when SubmissionMode is not InteractiveMode")
            return REQUEUE_S
        original = copy.deepcopy(status)
        jds = status.get("jobDeploymentStatus", "")
        mode = submission_mode(rj)
        after: float | None = REQUEUE_S
        if jds == "":
            if FINALIZER not in (meta.get("finalizers") or []):
                rj = self.store.mutate(self.rj_t, ns, name, lambda o: o["metadata"].setdefault("finalizers", []).append(FINALIZER))
                if rj is None:
                    return None
            init_status(status, rj, now)
        elif jds == "Initializing":
            if not (suspending_if_needed(status, spec) or check_active_deadline(status, spec, now)):
                rc = self._get_or_create_cluster(rj, status)
                if not status.get("dashboardURL"):
                    if ((rc.get("status") or {}).get("state")) != "ready":
                        raise _Requeue(self._until_deadline(status, spec, now))
                    url = self._head_service_url(rc)
                    if not url:
                        raise _Requeue()
                    status["dashboardURL"] = url
                if mode == "InteractiveMode":
                    status["jobDeploymentStatus"] = "Waiting"
                else:
                    if mode == "K8sJobMode":
                        self._create_submitter_if_needed({**rj, "status": status}, rc)
                    status["jobDeploymentStatus"] = "Running"
        elif jds == "Waiting":
            if not spec.get("jobId"):
                raise _Requeue()
            status.update(jobId=spec["jobId"], jobDeploymentStatus="Running")
        elif jds == "Running":
            if not (suspending_if_needed(status, spec) or check_active_deadline(status, spec, now)
                    or check_grace_period(status, now)):
                self._running(rj, status, mode, now)
        elif jds in ("Suspending", "Retrying"):
            cluster_gone = self._delete_cluster(rj, status)
            submitter_gone = self._delete_submitter(rj, mode)
            if not (cluster_gone and submitter_gone):
                raise _Requeue()
            reset_status(status)
        elif jds == "Suspended":
            if spec.get("suspend"):
                raise _Requeue()
            status.update(jobStatus="", jobDeploymentStatus="")
        elif jds in ("Complete", "Failed"):
            if spec.get("shutdownAfterJobFinishes") and not spec.get("clusterSelector"):
                end = _epoch(status.get("endTime")) or now
                shutdown = end + (spec.get("ttlSecondsAfterFinished") or 0)
                if shutdown > now:
                    return max(0.0, shutdown - now)  # woken at the shutdown time
                self._delete_cluster(rj, status)
            return None
        else:
            raise _Requeue()
        check_backoff_limit(status, spec)
        if (original.get("jobStatus", ""), original.get("jobDeploymentStatus", "")) != \
                (status.get("jobStatus", ""), status.get("jobDeploymentStatus", "")):
            if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
                status["endTime"] = _rfc3339(now)
            written = wire_status(status)
            self.store.mutate(self.rj_t, ns, name, lambda o: o.update(status=written), subresource="status")
        if status.get("jobDeploymentStatus") in ("Initializing", "Running"):
            after = self._until_deadline(status, spec, now)
        return after

    @staticmethod
    def _until_deadline(status: dict, spec: dict, now: float) -> float:
        """The 3 s requeue, or sooner when activeDeadlineSeconds passes first."""
        due = deadline_at(status, spec)
        return REQUEUE_S if due is None else max(0.0, min(REQUEUE_S, due - now))

    def _running(self, rj: dict, status: dict, mode: str, now: float) -> None:
        job = None
        if mode == "K8sJobMode":
            job = self._submitter_job(rj)
            if job is None:
                raise _Requeue()  # "Failed to get the submitter Kubernetes Job"
            if job["failed"]:  # checkK8sJobAndUpdateStatusIfNeeded
                status["jobDeploymentStatus"] = "Failed"
                if status.get("jobStatus") == "FAILED":
                    status["reason"] = "AppFailed"
                else:
                    status["reason"] = "SubmissionFailed"
                    status["message"] = ("Job submission has failed. Reason: BackoffLimitExceeded. "
                                         "Message: Job has reached the specified backoff limit")
                return
        rc = self._get_or_create_cluster(rj, status)
        dashboard = self._dashboard({**rj, "status": status})
        try:
            info = dashboard.job_info(status.get("jobId", ""))
        except DashboardError as exc:
            if mode == "HTTPMode" and exc.not_found:
                try:
                    dashboard.submit({**rj, "status": status})
                except DashboardError as err:
                    log.info("rayjob %s: failed to submit the Ray job: %s", rj["metadata"]["name"], err)
            raise _Requeue(self._until_deadline(status, rj.get("spec") or {}, now)) from None
        job_status = info.get("status", "")
        terminal = job_status in TERMINAL and (mode != "K8sJobMode" or job["finished"])
        jds, reason = "Running", ""
        if terminal:
            jds = "Failed" if job_status == "FAILED" else "Complete"
            reason = "AppFailed" if job_status == "FAILED" else ""
        status["rayClusterStatus"] = copy.deepcopy(rc.get("status") or ZERO_CLUSTER_STATUS)
        status.update(jobStatus=job_status, jobDeploymentStatus=jds, reason=reason, message=info.get("message") or "")
        times = dict(status.get("rayJobInfo") or {})
        if info.get("start_time"):
            times["startTime"] = _rfc3339(info["start_time"] / 1000)
        if info.get("end_time"):
            times["endTime"] = _rfc3339(info["end_time"] / 1000)
        status["rayJobInfo"] = times

    # --- the RayCluster ---------------------------------------------------------------
    def _get_or_create_cluster(self, rj: dict, status: dict) -> dict:
        ns, cluster = rj["metadata"]["namespace"], status.get("rayClusterName", "")
        rc = self.store.find(self.rc_t, ns, cluster)
        if rc is not None:
            return rc
        spec = rj.get("spec") or {}
        if spec.get("clusterSelector"):
            raise _Requeue()  # "failed to find the cluster named ..."
        labels = dict(rj["metadata"].get("labels") or {})
        labels.update({"ray.io/originated-from-cr-name": rj["metadata"]["name"], "ray.io/originated-from-crd": "RayJob"})
        body = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": cluster, "namespace": ns, "labels": labels,
                             **({"annotations": dict(rj["metadata"]["annotations"])}
                                if rj["metadata"].get("annotations") else {}),
                             "ownerReferences": [owner_ref(rj)]},
                "spec": copy.deepcopy(spec.get("rayClusterSpec") or {})}
        try:
            if self.admit is not None:
                self.admit("CREATE", self.rc_t, body, None)
            rc = self.store.create(self.rc_t, body)
        except ApiError as exc:
            self._event(rj, "Warning", "FailedToCreateRayCluster", f"Failed to create RayCluster {ns}/{cluster}: {exc.message}")
            raise _Requeue() from None
        self._event(rj, "Normal", "CreatedRayCluster", f"Created RayCluster {ns}/{cluster}")
        return rc

    def _head_service_url(self, rc: dict) -> str | None:
        """utils.FetchHeadServiceURL: `<svc>.<ns>.svc.cluster.local:<dashboard port>`."""
        from .kuberay import head_service_name

        ns = rc["metadata"]["namespace"]
        svc = self.store.find(self.svc_t, ns, head_service_name(rc))
        port = next((p["port"] for p in ((svc or {}).get("spec") or {}).get("ports") or [] if p.get("name") == "dashboard"), None)
        return None if port is None else f"{svc['metadata']['name']}.{ns}.svc.cluster.local:{port}"

    def _delete_cluster(self, rj: dict, status: dict) -> bool:
        """deleteClusterResources: True once the RayCluster is gone."""
        ns, cluster = rj["metadata"]["namespace"], status.get("rayClusterName", "")
        rc = self.store.find(self.rc_t, ns, cluster) if cluster else None
        if rc is None:
            return True
        if not rc["metadata"].get("deletionTimestamp"):
            try:
                self.store.delete(self.rc_t, ns, cluster)
            except ApiError as exc:
                if exc.code == 404:
                    return True
                self._event(rj, "Warning", "FailedToDeleteRayCluster", f"Failed to delete cluster {ns}/{cluster}: {exc.message}")
                raise _Requeue() from None
            self._event(rj, "Normal", "DeletedRayCluster", f"Deleted cluster {ns}/{cluster}")
        return False

    def _dashboard(self, rj: dict) -> Dashboard:
        """InitClient: http://<dashboardURL>, resolved as cluster DNS would (the Service's address)."""
        url = (rj.get("status") or {}).get("dashboardURL", "")
        host, _, port = url.rpartition(":")
        parts = host.split(".")
        if len(parts) < 2 or not port:
            raise _Requeue()
        svc = self.store.find(self.svc_t, parts[1], parts[0])
        if svc is None:
            raise DashboardError(f"dial tcp: lookup {host}: no such host")
        ip = svc["spec"].get("clusterIP")
        if not ip or ip == "None":  # headless: the ready head pod's address
            selector = svc["spec"].get("selector") or {}
            pods = self.store.list(self.pod_t, parts[1], lambda p: all(
                (p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()))[0]
            ip = next(((p.get("status") or {}).get("podIP") for p in pods if (p.get("status") or {}).get("podIP")), None)
            if ip is None:
                raise DashboardError(f"dial tcp: lookup {host}: no such host")
        return Dashboard(f"{ip}:{port}")

    # --- the submitter (the batch/v1 Job KubeRay creates, played here) ---------------------
    def _submitter_pods(self, rj: dict) -> list[dict]:
        uid = rj["metadata"]["uid"]
        return self.store.list(self.pod_t, rj["metadata"]["namespace"], lambda p: (p["metadata"].get("labels") or {}).get(
            "batch.kubernetes.io/controller-uid") == uid)[0]

    def _submitter_job(self, rj: dict) -> dict | None:
        """The Job as its controller would report it: None when it does not exist (no pods, or all
        of them being deleted), else failed (BackoffLimitExceeded) / finished, and a new pod
        started when the last failed and its back-off passed."""
        pods = [p for p in self._submitter_pods(rj) if not p["metadata"].get("deletionTimestamp")]
        if not pods:
            return None
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        failures = phases.count("Failed")
        limit = ((rj.get("spec") or {}).get("submitterConfig") or {}).get("backoffLimit")
        limit = SUBMITTER_BACKOFF_LIMIT if limit is None else limit
        if "Succeeded" in phases:
            return {"failed": False, "finished": True}
        if failures > limit:
            return {"failed": True, "finished": True}
        if all(ph == "Failed" for ph in phases):
            last = max(_epoch(self._finished_at(p)) or 0.0 for p in pods)
            due = last + min(JOB_BACKOFF_BASE * 2 ** (failures - 1), JOB_BACKOFF_MAX)
            if self.clock() >= due:
                self._create_submitter_pod(rj, self.store.find(self.rc_t, rj["metadata"]["namespace"],
                                                               (rj.get("status") or {}).get("rayClusterName", "")))
            else:
                raise _Requeue(min(REQUEUE_S, due - self.clock()))
        return {"failed": False, "finished": False}

    @staticmethod
    def _finished_at(pod: dict) -> str | None:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated") or {}
            if ended.get("finishedAt"):
                return ended["finishedAt"]
        return None

    def _create_submitter_if_needed(self, rj: dict, rc: dict) -> None:
        """createK8sJobIfNeed."""
        if self._submitter_pods(rj):
            return
        self._create_submitter_pod(rj, rc)
        ns, name = rj["metadata"]["namespace"], rj["metadata"]["name"]
        self._event(rj, "Normal", "CreatedRayJobSubmitter", f"Created Kubernetes Job {ns}/{name}")

    def _create_submitter_pod(self, rj: dict, rc: dict | None) -> None:
        ns, name, uid = rj["metadata"]["namespace"], rj["metadata"]["name"], rj["metadata"]["uid"]
        template = submitter_template(rj, rc)
        meta = template.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), **{k: name for k in JOB_LABELS}, **{k: uid for k in UID_LABELS}}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": f"{name}-", "namespace": ns, "labels": labels,
                            "annotations": {**(meta.get("annotations") or {}), "batch.kubernetes.io/job-tracking": ""},
                            "ownerReferences": [owner_ref(rj)]},
               "spec": copy.deepcopy(template.get("spec") or {})}
        try:
            if self.admit is not None:
                self.admit("CREATE", self.pod_t, pod, None)
            self.store.create(self.pod_t, pod)
        except ApiError as exc:
            self._event(rj, "Warning", "FailedToCreateRayJobSubmitter",
                        f"Failed to create new Kubernetes Job {ns}/{name}: {exc.message}")
            raise _Requeue() from None

    def _delete_submitter(self, rj: dict, mode: str) -> bool:
        """deleteSubmitterJob (background propagation: the pods go with the Job)."""
        if mode == "HTTPMode":
            return True
        pods = self._submitter_pods(rj)
        if not pods:
            return True
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        for pod in live:
            try:
                self.store.delete(self.pod_t, pod["metadata"]["namespace"], pod["metadata"]["name"])
            except ApiError:
                pass
        if live:
            ns, name = rj["metadata"]["namespace"], rj["metadata"]["name"]
            self._event(rj, "Normal", "DeletedRayJobSubmitter", f"Deleted submitter K8s Job {ns}/{name}")
        return False

