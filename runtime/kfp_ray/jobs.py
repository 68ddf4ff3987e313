"""Ray jobs through the Ray Job Submission REST API of the cluster's dashboard.

Plain HTTP (requests), so the submit/follow tasks need no Ray installation; the same API
`ray.job_submission.JobSubmissionClient` wraps."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import AccessDenied, InputError, JobFailed, JobLost, JobTimeout, KfpRayError
from .validate import Checker, label_value
from .wait import Backoff, Outage, beat, echo, first_line, is_transient, log, retry

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
SUBMIT_WINDOW = 120.0  # seconds a fresh head may answer 5xx to a submission
METRICS_PREFIX = "KFP_RAY_METRICS"
CHECKPOINTS_ENV = "KFP_RAY_CHECKPOINTS"  # where a job keeps its checkpoints (docs/usage.md, "When Kueue preempts")
_METRICS_LINE = re.compile(rf"^{METRICS_PREFIX}\s+(\{{.*\}})\s*$")
EXCLUDE = {"__pycache__", ".git", ".ipynb_checkpoints"}


# (connect, read) seconds for every dashboard request: a hung connection is given up.
TIMEOUTS = (5.0, 30.0)
# How long follow rides out an unreachable dashboard (or Kubernetes API) before failing.
OUTAGE_TOLERANCE = 600.0
# The job's status is checked every MAX_POLL seconds at most, so that its cluster is deleted
# (its quota released) within a second of its end: a status read is a small JSON answer from
# the dashboard, not a Kubernetes request. The log is streamed (logtail.py): each poll reads
# only what arrived since the last one.
MAX_POLL = 0.5
# What follow keeps of the log in memory when it writes the log to a file (the rest is in the
# file): enough for the "last log lines" of an error message.
TAIL_CHARS = 64 << 10
LONG_LINE = 1 << 20  # a line without its newline yet is passed on once this long
# A job that is over: the rest of its log is read for at most this long.
FINAL_LOG_S = 900.0
WHOLE_LOG = 8 << 20  # up to this many bytes streamed, its end is read with one request for the whole log
FIX_URL = "wire provision_ray_cluster's dashboard_url output (http://<cluster>-head-svc.<namespace>.svc:8265)"


class RayJobsClient:
    """The Ray Job REST API. Every request has (connect, read) timeouts; transient failures
    are retried up to `attempts` times (1: the caller deals with them, as follow does)."""

    def __init__(self, dashboard_url: str, timeout: float | tuple[float, float] = TIMEOUTS, attempts: int = 6):
        self.url = dashboard_url.rstrip("/")
        self.timeout = timeout
        self.attempts = attempts
        import requests

        self.http = requests.Session()

    def _call(self, method: str, path: str, what: str, ok=(200,), timeout=None, **kwargs):
        def once():
            r = self.http.request(method, self.url + path, timeout=timeout or self.timeout, **kwargs)
            if r.status_code in ok:
                return r
            if r.status_code >= 500:
                err = KfpRayError(f"Ray dashboard answered {r.status_code} to {what}: {r.text[:300]}")
                err.status = 503
                raise err
            return r
        r = retry(once, what, attempts=self.attempts)
        if r.status_code in (401, 403):
            raise AccessDenied(f"the Ray dashboard {self.url} answered {r.status_code} to {what}: something in front "
                               f"of it (a proxy, an OAuth route) asks for credentials. Fix: {FIX_URL}", r.status_code)
        if r.status_code not in ok:
            err = KfpRayError(f"Ray dashboard answered {r.status_code} to {what}: {r.text[:500]}")
            err.status = r.status_code
            raise err
        return r

    def _json(self, r, what: str, key: str | None = None):
        """The answer's JSON (with `key` if given); a clear error when it is something else
        (an HTML login page, another service): never read as the job's end."""
        try:
            body = r.json()
        except ValueError:
            body = None
        if body is None or (key and not (isinstance(body, dict) and key in body)):
            raise KfpRayError(f"the Ray dashboard {self.url} answered {what} with something that is not the Ray Job "
                              f"API's (HTTP {r.status_code}, {r.headers.get('Content-Type') or 'no Content-Type'}: "
                              f"{r.text[:120]!r}): dashboard_url may point at a proxy, a login page or another "
                              f"service. Fix: {FIX_URL}")
        return body

    def version(self) -> dict:
        return self._json(self._call("GET", "/api/version", "the version check"), "the version check")

    def upload_package(self, uri: str, data: bytes, what: str) -> str:
        """Upload a zipped working_dir to the cluster's GCS under `uri` unless present."""
        name = uri.split("://", 1)[1]
        if self._call("GET", f"/api/packages/gcs/{name}", "the package check", ok=(200, 404)).status_code == 404:
            self._call("PUT", f"/api/packages/gcs/{name}", "the working_dir upload", data=data)
            log(f"uploaded working_dir {what} ({len(data) / 1024:.0f} KiB) as {uri}")
        return uri

    def submit(self, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict) -> tuple[str, bool]:
        """Submit; a job already submitted under this id (a retried task) is adopted."""
        body = {"entrypoint": entrypoint, "submission_id": submission_id, "runtime_env": runtime_env, "metadata": metadata}
        # Ray answers a duplicate submission id with an error (500 through its job agent).
        # A head that has just become ready may still answer 500 ("cannot connect to the job
        # agent") for a while, longer on a busy node: ride that out for SUBMIT_WINDOW, re-sending
        # the same submission id (an earlier try that did get through is then "already exists").
        deadline = time.monotonic() + SUBMIT_WINDOW
        backoff = Backoff(1.0, 1.5, 10.0)
        while True:
            r = self._call("POST", "/api/jobs/", "the job submission", ok=(200, 400, 500, 502, 503, 504), json=body)
            if r.status_code == 200:
                return self._json(r, "the job submission", "submission_id")["submission_id"], False
            if "already exists" in r.text:
                self.info(submission_id)
                return submission_id, True
            last = r.text.strip().splitlines()[-1][:300] if r.text.strip() else str(r.status_code)
            if r.status_code < 500:
                raise KfpRayError(f"Ray rejected the job: {last}")
            if time.monotonic() >= deadline:
                raise KfpRayError(f"the Ray dashboard answered {r.status_code} to the job submission for "
                                  f"{SUBMIT_WINDOW:.0f}s: {last}. Fix: check the head pod's logs (its job agent)")
            delay = backoff.next()
            log(f"the job submission got {r.status_code} (the head's job agent may still be starting): {last}; "
                f"trying again in {delay:.1f}s, until {SUBMIT_WINDOW:.0f}s have passed")
            time.sleep(delay)

    def info(self, job_id: str, timeout=None) -> dict:
        what = f"the status of job {job_id}"
        return self._json(self._call("GET", f"/api/jobs/{job_id}", what, timeout=timeout), what, "status")

    def logs(self, job_id: str) -> str:
        """The whole log at once (follow streams it instead: logtail.py)."""
        what = f"the logs of job {job_id}"
        return self._json(self._call("GET", f"/api/jobs/{job_id}/logs", what), what, "logs")["logs"] or ""

    def stop(self, job_id: str, timeout=None) -> bool:
        r = self._call("POST", f"/api/jobs/{job_id}/stop", f"stopping job {job_id}", ok=(200, 404), timeout=timeout)
        return r.status_code == 200 and self._json(r, f"stopping job {job_id}").get("stopped", False)


def check_dashboard_url(c: Checker, url: str, field: str = "dashboard_url") -> None:
    """An http(s) URL of a Ray dashboard, checked before anything happens. No credentials in
    it: the URL is logged."""
    from urllib.parse import urlsplit

    if not isinstance(url, str) or not url.strip():
        c.fail(field, "is empty", FIX_URL)
        return
    shown = repr(url) if "@" not in url else "the URL (not shown: it may hold credentials)"
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number in 0-65535
    except ValueError as exc:
        c.fail(field, f"{shown} is not a valid URL ({exc})", FIX_URL)
        return
    if parts.scheme not in ("http", "https") or not parts.hostname:
        c.fail(field, f"{shown} is not an http(s) URL with a host", FIX_URL)
    elif parts.username or parts.password:
        c.fail(field, "has credentials in it (user:password@), which would be logged", "give the URL without them: "
               + FIX_URL)
    elif parts.query or parts.fragment or any(ch.isspace() for ch in url) or port == 0:
        c.fail(field, f"{url!r} has a query, a fragment, a blank or port 0: it is not a dashboard's address", FIX_URL)


def zip_dir(path: Path) -> bytes:
    """A reproducible zip of a directory (sorted, fixed timestamps, no caches)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
            rel = file.relative_to(path)
            if EXCLUDE & set(rel.parts) or file.suffix == ".pyc":
                continue
            info = zipfile.ZipInfo(rel.as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if os.access(file, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, file.read_bytes())
    return buf.getvalue()


def package_uri(data: bytes) -> str:
    """Ray's name for a zipped working_dir in the cluster's GCS (content-addressed)."""
    return f"gcs://_ray_pkg_{hashlib.sha256(data).hexdigest()[:32]}.zip"


def submission_id(run_id: str, task: str) -> str:
    """One id per run and task: a retried task finds the job it already submitted."""
    return f"kfp-ray-{label_value(run_id)}-{label_value(task)}"[:120]


def parse_metrics(logs: str) -> dict[str, float]:
    """The metrics contract: a job prints lines `KFP_RAY_METRICS {"name": number, ...}`;
    the last value of each name wins."""
    out: dict[str, float] = {}
    for line in logs.splitlines():
        m = _METRICS_LINE.match(line.strip())
        if not m:
            continue
        try:
            values = json.loads(m.group(1))
        except ValueError:
            continue
        for k, v in values.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[str(k)] = float(v)
    return out


def resolve_working_dir(working_dir: str, embedded_root: str | None, jobs: RayJobsClient) -> str | None:
    """working_dir as Ray takes it: '' none; https://... archive as is; s3://... fetched with
    the data connection and uploaded; otherwise a directory inside the component's
    embedded code (or a local path), uploaded."""
    uri, data = package_working_dir(working_dir, embedded_root)
    if data is not None:
        jobs.upload_package(uri, data, working_dir)
    return uri


def package_working_dir(working_dir: str, embedded_root: str | None) -> tuple[str | None, bytes | None]:
    """(the URI a runtime_env gives as working_dir, the zip to upload there first or None):
    '' none; https://... as is; s3://... fetched with the data connection and zipped;
    otherwise a directory inside the component's embedded code (or a local path), zipped."""
    if not working_dir:
        return None, None
    if working_dir.startswith(("https://", "http://")):
        return working_dir, None
    import tempfile

    if working_dir.startswith("s3://"):
        from . import s3

        with tempfile.TemporaryDirectory() as tmp:
            got = s3.download(working_dir, Path(tmp) / "code")
            if got.is_file() and got.suffix == ".zip":
                with zipfile.ZipFile(got) as zf:
                    zf.extractall(Path(tmp) / "unzipped")
                root = Path(tmp) / "unzipped"
                entries = list(root.iterdir())
                got = entries[0] if len(entries) == 1 and entries[0].is_dir() else root
            elif got.is_file():
                raise InputError("working_dir", f"{working_dir} is a single file, not a directory or .zip",
                                 "give an s3:// prefix or a .zip archive")
            data = zip_dir(got)
            return package_uri(data), data
    base = Path(embedded_root) if embedded_root else Path.cwd()
    path = Path(working_dir) if Path(working_dir).is_absolute() else base / working_dir
    if not path.is_dir():
        raise InputError("working_dir", f"{working_dir!r} is not a directory of this component's code",
                         "give a directory embedded in the component, an s3:// URI or an https:// zip URL")
    data = zip_dir(path)
    return package_uri(data), data


def read_requirements(requirements_file: str, working_dir: str, embedded_root: str | None) -> list[str]:
    """The requirement lines of a pip requirements file in the component's embedded code
    (working_dir), comments and blank lines left out."""
    base = Path(embedded_root or ".") / (working_dir or "")
    path = base / requirements_file
    if not working_dir or "://" in working_dir or Path(requirements_file).is_absolute() or not path.is_file():
        raise InputError("requirements_file", f"{requirements_file!r} is not a file of the job's embedded code "
                         f"(working_dir {working_dir!r})",
                         "give a path inside the embedded working_dir (e.g. requirements/train.txt), or pass the "
                         "requirements as a list instead")
    lines = (line.split(" #")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def check_job(c: Checker, entrypoint: str, run_id: str, env_vars: dict | None, pip: list | None) -> None:
    """The inputs every job takes, whichever way it is submitted."""
    c.not_empty("entrypoint", entrypoint, "give the command the job runs, e.g. 'python train.py'")
    c.not_empty("run_id", run_id, "pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id")
    c.env("env_vars", env_vars or {})
    if pip is not None and (not isinstance(pip, list) or not all(isinstance(p, str) and p.strip() for p in pip)):
        c.fail("pip", f"{pip!r} is not a list of requirement strings", 'give e.g. ["xgboost==2.1.4"]')


def submit(dashboard_url: str, entrypoint: str, run_id: str, task: str, working_dir: str = "",
           embedded_root: str | None = None, pip: list | None = None, env_vars: dict | None = None,
           metadata: dict | None = None, requirements_file: str = "") -> str:
    """Submit the job. Its runtime_env pip is requirements_file's lines (if given) then pip."""
    c = Checker()
    check_job(c, entrypoint, run_id, env_vars, pip)
    check_dashboard_url(c, dashboard_url)
    c.done()
    if requirements_file:
        pip = read_requirements(requirements_file, working_dir, embedded_root) + list(pip or [])
    jobs = RayJobsClient(dashboard_url)
    runtime_env = build_runtime_env(resolve_working_dir(working_dir, embedded_root, jobs), pip, env_vars)
    meta = {"kfp_run_id": run_id, "kfp_task": task, **{k: str(v) for k, v in (metadata or {}).items()}}
    job_id, adopted = jobs.submit(entrypoint, submission_id(run_id, task), runtime_env, meta)
    log(f"{'found already submitted' if adopted else 'submitted'} Ray job {job_id}: {entrypoint}")
    return job_id


def build_runtime_env(working_dir: str | None, pip: list | None, env_vars: dict | None) -> dict:
    """The job's runtime_env: its code, its pip requirements, and where its data is."""
    runtime_env: dict = {}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    if pip:
        # Ray installs these into a virtualenv cloned from the node's, on every node that runs
        # the job's code (the RHOAI Ray image ships ray and numpy, no training libraries).
        runtime_env["pip"] = list(pip)
        log(f"the job's runtime_env installs {len(pip)} requirement(s) on each Ray node: {', '.join(pip)}")
    from .s3 import PUBLIC_KEYS

    # Where the data is (not the keys: those reach Ray's pods from the data connection secret).
    env = {k: os.environ[k] for k in PUBLIC_KEYS if os.environ.get(k)}
    env.update({k: str(v) for k, v in (env_vars or {}).items()})
    if env.get("KFP_RAY_OUTPUT") and not env.get(CHECKPOINTS_ENV):
        # one place per run that outlives a preempted cluster: the job resumes from it
        env[CHECKPOINTS_ENV] = env["KFP_RAY_OUTPUT"].rstrip("/") + "/checkpoints/"
    if env:
        runtime_env["env_vars"] = env
    return runtime_env


@dataclass
class JobResult:
    job_id: str
    status: str
    message: str
    duration_seconds: float
    logs: str
    metrics: dict = field(default_factory=dict)
    teardown_seconds: float = 0.0  # deleting the cluster once the job was over, until it was gone
    released_at: str = ""  # then (UTC): its quota was free (the usage ledger's end)
    preemptions: int = 0  # Kueue preemptions ridden out (preemption.py)
    preempted_seconds: float = 0.0  # what they cost: work lost and the wait for the cluster to come back
    preempted_times: list = field(default_factory=list)  # preemption.Preemptions.times


# The job log is copied to S3 this often while the job runs (and at the end), in parts of at most
# PART_BYTES: a cluster or task that dies loses at most the last interval's lines there.
SHIP_EVERY = 30.0
PART_BYTES = 8 << 20


def log_uri(env_vars: dict | None) -> str:
    """Where a run's job log is kept in S3: $KFP_RAY_OUTPUT/logs/job.log ("" without an output)."""
    out = (env_vars or {}).get("KFP_RAY_OUTPUT") or ""
    return out.rstrip("/") + "/logs/job.log" if out.startswith("s3://") else ""


class LogShipper:
    """Copies the job log (log_path: redacted, as Follower writes it) to S3 as it grows: at each
    ship() (Follower's, every `every` seconds; its owner's once the job is over), what it gained since the last
    copy goes up as the next part, <uri>.d/<this task's start>-<n> (a retried task's parts
    sort after its first attempt's); ship(whole=True) also writes the whole log as <uri>
    (again only if it grew). With
    `events` (namespace, the run's RayCluster or RayJob names), each ship() also writes their
    events as events.jsonl beside it (run_events.py). A failed copy is logged and tried again
    at the next ship(); S3 never fails the job, nor holds the follow loop (which renews the
    lease) for more than two tries of 10 s."""

    def __init__(self, log_path: str, uri: str, every: float = SHIP_EVERY, clock=time.monotonic, events=None):
        self.path, self.uri, self.every, self.clock, self.events = log_path, uri, every, clock, events
        self.sent = self.parts = 0
        self.whole = -1  # `sent` when the whole log was last written
        self.due = clock() + every
        self.stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())

    def ship(self, whole: bool = False) -> None:
        self.due = self.clock() + self.every
        if not self.uri:
            return
        from . import s3

        try:
            bucket, key = s3.split(self.uri)
            put = s3.client(timeout=10, attempts=2).put_object  # bounded: the follow loop waits on it
            # no log yet (the cluster never became ready): its events are all the more wanted
            logged = os.path.exists(self.path)
            with open(self.path, "rb") if logged else io.BytesIO() as fh:
                fh.seek(self.sent)
                while data := fh.read(PART_BYTES):  # a part that failed is sent again under its own name
                    put(Bucket=bucket, Key=f"{key}.d/{self.stamp}-{self.parts + 1:05d}", Body=data)
                    self.parts, self.sent = self.parts + 1, self.sent + len(data)
                if whole and logged and self.whole != self.sent:
                    fh.seek(0)
                    put(Bucket=bucket, Key=key, Body=fh)
                    self.whole = self.sent
            if self.events:
                from .run_events import collect, jsonl

                picked = collect(*self.events)
                if picked is None:
                    self.events = None
                    log("this service account may not list events: the run's events are not copied to S3 (part 4 "
                        "of deploy/rbac-kfp-ray.yaml allows it)")
                else:
                    put(Bucket=bucket, Key=key.rsplit("/", 1)[0] + "/events.jsonl", Body=jsonl(picked))
        except Exception as exc:  # noqa: BLE001 - the log stays in the task; the job goes on
            log(f"could not copy the job log or its events to {self.uri} ({first_line(exc)}); trying again later")


class Follower:
    """Follows one job to a terminal state, streaming its log (logtail.py: each poll reads only
    what is new), and rides out an unreachable dashboard: a failed status poll (refused, timed
    out, reset, 5xx) starts an outage, logged once a minute, tolerated for `outage_tolerance`
    seconds before Unreachable is raised. Any other failure to read (401/403, an answer that is
    not the Job API's) raises at once with its cause: it never reads as the job's end.
    `heartbeat` is called once per poll, also during an outage.

    The log: each new line is echoed (redacted) and, with `log_path`, appended to that file
    (redacted; with a `heading`, that line first, after what the file already has: a
    preempted run's log); `logs`
    then keeps only the last TAIL_CHARS of it, so memory does not grow with the log. Without
    `log_path`, `logs` is the whole log. With a `shipper` (LogShipper), the file is copied to
    S3 as it grows (its owner copies the rest once the job is over)."""

    def __init__(self, dashboard_url: str, job_id: str, timeout: float, max_poll: float = MAX_POLL, echo=echo,
                 stop_grace: float = 60.0, outage_tolerance: float = OUTAGE_TOLERANCE,
                 heartbeat: Callable[[], None] | None = None, request_timeout=TIMEOUTS,
                 clock=time.monotonic, sleep=time.sleep, log_path: str | None = None, heading: str = "",
                 shipper=None):  # a LogShipper (unannotated: run_ray_job carries none, components/_slim.py)
        import codecs

        from .logtail import LogTail

        c = Checker()
        check_dashboard_url(c, dashboard_url)
        c.not_empty("job_id", job_id, "wire submit_ray_job's output")
        c.positive_seconds("timeout", timeout)
        c.positive_seconds("outage_tolerance_seconds", outage_tolerance)
        c.positive_seconds("max_poll_seconds", max_poll, example=5)
        c.done()
        self.url, self.job_id, self.timeout, self.max_poll, self.echo = dashboard_url, job_id, timeout, max_poll, echo
        self.stop_grace, self.heartbeat, self.clock, self.sleep = stop_grace, heartbeat, clock, sleep
        self.request_timeout = request_timeout
        self.polls = RayJobsClient(dashboard_url, timeout=request_timeout, attempts=1)  # outages handled here
        self.outage = Outage(f"the Ray dashboard {self.url}", outage_tolerance, clock=clock,
                             consequence=f"Ray job {job_id} may still be running, so its RayCluster is left as it is: a "
                             "retry of this task follows the job again; otherwise the pipeline's exit handler (teardown) "
                             "deletes the cluster. Fix: check the head pod and its Service, and raise "
                             "outage_tolerance_seconds if such outages are expected")
        self.tail = LogTail(self.url, job_id, timeout=tuple(request_timeout) if isinstance(request_timeout, tuple)
                            else (request_timeout, request_timeout), clock=clock)
        self.log_path, self.shipper = log_path, shipper
        self._log_file = None
        if log_path:
            try:
                self._log_file = open(log_path, "a" if heading else "w")  # noqa: SIM115 - closed by close()
                self._log_file.write(heading)
            except OSError as exc:
                log(f"could not write the job log to {log_path}: {exc}")
        self.logs = ""  # the whole log (redacted), or its last TAIL_CHARS with log_path
        self.log_chars = 0  # characters of the log passed on so far
        self.metrics: dict[str, float] = {}
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""  # the last line, until its newline comes
        self._said_dropped: str | None = None
        self.more = False  # the last read left more log waiting: poll again at once
        self.info: dict | None = None
        self.started_at = None  # the job's start_time as first seen: another one is another run of it

    # --- the log -------------------------------------------------------------------
    def _read_log(self) -> None:
        """Pass on what the log stream has brought since the last read (see logtail.py)."""
        chunks, self.more = self.tail.read()
        self._feed(chunks)
        if self.tail.dropped and self.tail.dropped != self._said_dropped:
            self._said_dropped = self.tail.dropped
            log(f"the log stream of job {self.job_id} dropped ({self.tail.dropped}); reconnecting (Ray resends the log "
                f"from its start: the {self.tail.received} bytes already read are skipped)")
        elif not self.tail.dropped and self._said_dropped:
            self._said_dropped = None

    def _final_log(self) -> None:
        """The rest of the log of a job that is over. Up to WHOLE_LOG bytes streamed, the Job
        API's whole log at once: Ray closes the stream only about 4 s after the job's end (its
        tail sleeps 1 s between looks), and the cluster, its quota held, waits on this. Past
        that, or if that read fails, the stream to its end. Bounded: FINAL_LOG_S in all, a read
        timeout per message, and a few reconnects; what was read is kept whatever happens."""
        deadline = self.clock() + FINAL_LOG_S
        reconnects = 0
        try:
            if self.tail.received <= WHOLE_LOG:
                try:
                    self._take(self.polls.logs(self.job_id))
                    self._decoder.reset()  # the stream's part of a character is in what was taken
                    return
                except Exception:  # noqa: BLE001, S110 - the stream, then
                    pass
            while not self.tail.ended and self.clock() < deadline:
                beat(self.heartbeat)  # a long backlog: the lease is still renewed
                was = self.tail.received
                chunks, _ = self.tail.read(wait=True, budget_s=max(0.0, deadline - self.clock()))
                self._feed(chunks)
                if self.tail.dropped:
                    reconnects = 0 if self.tail.received > was else reconnects + 1
                    if reconnects > 3:
                        break
                    self.sleep(min(1.0 * reconnects, max(0.0, deadline - self.clock())))
                    self.tail._retry_at = 0.0
            if not self.tail.ended:
                why = self.tail.dropped or f"no end within {FINAL_LOG_S:.0f}s"
                log(f"could not read the end of job {self.job_id}'s log ({why}); the log kept is what was read")
        except Exception as exc:  # noqa: BLE001 - what was streamed is kept
            log(f"could not read the final log of job {self.job_id} ({type(exc).__name__}: {first_line(exc)})")
        finally:
            self.tail.close()
            self._flush_partial()

    def _feed(self, chunks: list[bytes]) -> None:
        if not chunks:
            return
        text = self._partial + "".join(self._decoder.decode(c) for c in chunks)
        cut = text.rfind("\n") + 1
        if cut == 0 and len(text) < LONG_LINE:
            self._partial = text
            return
        if cut == 0:
            cut = len(text)
        self._partial = text[cut:]
        self._emit(text[:cut])

    def _flush_partial(self) -> None:
        rest = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        if rest:
            self._emit(rest)

    def _emit(self, text: str) -> None:
        """Echo, keep and write complete lines (redacted once, as a block: a log of millions of
        lines is not handled line by line)."""
        from .redact import redact

        self.log_chars += len(text)
        if METRICS_PREFIX in text:
            self.metrics.update(parse_metrics(text))
        shown = redact(text)
        self.echo(shown[:-1] if shown.endswith("\n") else shown)
        if self._log_file is not None:
            try:
                self._log_file.write(shown)
                self._log_file.flush()  # the file is the log so far, whatever ends this task
            except OSError as exc:
                log(f"could not write the job log to {self.log_path}: {exc}")
                self._log_file.close()
                self._log_file = None
        self.logs = (self.logs + shown)[-TAIL_CHARS:] if self.log_path else self.logs + shown

    def _take(self, text: str) -> None:
        """Pass on what a whole log read at once (the Job API's /logs) has beyond what was
        passed on already."""
        if len(text) > self.log_chars + len(self._partial):
            self._partial = ""
            self._emit(text[self.log_chars:])

    def close(self) -> None:
        """Close the log stream and the log file (flushed). What is new is copied to S3 by the
        owner of the shipper, after it has asked for the cluster's deletion: the quota is not
        held while S3 is written (two tries of 10 s when it is down)."""
        self.tail.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    # --- reading -------------------------------------------------------------------
    def _poll(self) -> dict | None:
        """The job's info (and new log lines), or None while the dashboard is unreachable.
        Raises JobLost (404), Unreachable (the outage outlasted its window), or the cause of
        any other failure to read."""
        try:
            info = self.polls.info(self.job_id)
            self._same_run(info)
            if info["status"] in TERMINAL:
                self._final_log()
            else:
                self._read_log()
        except JobFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - classified: transient, lost, or a real failure
            if getattr(exc, "status", None) == 404:
                raise self._lost() from None
            if not is_transient(exc):
                raise
            self.outage.failed(exc)  # Unreachable once the window is spent
            return None
        self.outage.ok()
        return info

    def _same_run(self, info: dict) -> None:
        """A job whose start_time changed was submitted again under its id on a restarted head
        (KubeRay's submitter retries after a head crash): the run being followed is lost, even
        though the dashboard answered through the restart and never said 404."""
        start = info.get("start_time")
        if not start:
            return
        if self.started_at is None:
            self.started_at = start
        elif start != self.started_at:
            raise JobLost(f"Ray job {self.job_id} was started again (start_time {self.started_at} → {start}): the head "
                          "restarted, lost the job, and it was submitted anew, so the run being followed is lost. Fix: "
                          "see the head pod's last state; a retry of this task runs the job again"
                          + (f". Last log lines:\n{_tail(self.logs)}" if self.logs else ""))

    def _lost(self) -> JobLost:
        return JobLost(f"Ray job {self.job_id} is not known to the Ray dashboard {self.url} (404): the head restarted and "
                       "lost it (Ray keeps no job history across a head restart without GCS fault tolerance), or job_id "
                       "is not a job of this cluster. Fix: wire submit_ray_job's output and provision_ray_cluster's "
                       "dashboard_url of the same run; if the head crashed, see its pod's last state"
                       + (f". Last log lines:\n{_tail(self.logs)}" if self.logs else ""))

    # --- following -----------------------------------------------------------------
    def run(self):
        """Follow to the end. Returns JobResult (SUCCEEDED); raises JobFailed (FAILED, STOPPED,
        lost), JobTimeout (stopped at the timeout), Unreachable (outage longer than tolerated)."""
        try:
            return self._run()
        finally:
            self.close()

    def _run(self):
        started = self.clock()
        backoff = Backoff(0.2, 1.5, self.max_poll)
        last_status = None
        while True:
            beat(self.heartbeat)
            if self.shipper and self.clock() >= self.shipper.due:
                self.shipper.ship()
            info = self._poll()
            if info is not None:
                self.info = info
                if info["status"] != last_status:
                    log(f"job {self.job_id}: {info['status']}")
                    last_status = info["status"]
                if info["status"] in TERMINAL:
                    break
            if self.clock() - started > self.timeout:
                raise self._timed_out()
            if info is None:
                self.sleep(self.outage.pause())
            elif not self.more:  # more log waiting: read on at once (the status is checked first)
                self.sleep(backoff.next())
        return self._result(started)

    def _timed_out(self) -> JobTimeout:
        log(f"timed out after {self.timeout:.0f}s: stopping Ray job {self.job_id}")
        status = "unknown"
        try:
            RayJobsClient(self.url, timeout=self.request_timeout).stop(self.job_id)
            deadline = self.clock() + self.stop_grace
            while True:
                status = self.polls.info(self.job_id)["status"]
                if status in TERMINAL or self.clock() >= deadline:
                    break
                self.sleep(0.5)
            if status in TERMINAL:
                self._final_log()
        except Exception as exc:  # noqa: BLE001 - the cluster's deletion stops it anyway
            log(f"stopping Ray job {self.job_id} failed ({type(exc).__name__}: {first_line(exc)}); deleting its "
                "cluster stops it")
        return JobTimeout(f"Ray job {self.job_id} did not finish within {self.timeout:.0f}s and was stopped "
                          f"(now {status}). Fix: raise the follow task's timeout. Last log lines:\n{_tail(self.logs)}")

    def _result(self, started: float) -> JobResult:
        from .redact import redact

        info = self.info
        start, end = info.get("start_time"), info.get("end_time")
        duration = (end - start) / 1000.0 if start and end else self.clock() - started
        result = JobResult(self.job_id, info["status"], info.get("message") or "", round(duration, 3),
                           self.logs, dict(self.metrics))  # redacted as it was read (_emit)
        if result.status != "SUCCEEDED":
            raise JobFailed(f"Ray job {self.job_id} {result.status}: {redact(result.message)}\n"
                            f"--- last log lines ---\n{_tail(result.logs)}")
        return result

    # --- cancellation --------------------------------------------------------------
    def request_stop(self, deadline: float) -> bool | None:
        """One stop request, given up at `deadline` (time.monotonic()). True: Ray stopped
        it; False: nothing to stop; None: the request failed."""
        left = max(0.2, deadline - time.monotonic())
        try:
            return RayJobsClient(self.url, attempts=1).stop(
                self.job_id, timeout=(min(TIMEOUTS[0], left), min(TIMEOUTS[1], left)))
        except Exception as exc:  # noqa: BLE001 - reported; the cluster's deletion stops it too
            log(f"stopping Ray job {self.job_id} failed ({type(exc).__name__}: {first_line(exc)})")
            return None

    def wait_stopped(self, deadline: float) -> str | None:
        """The job's terminal status once reached, or None at `deadline`."""
        backoff = Backoff(0.2, 1.5, 1.0)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                status = RayJobsClient(self.url, attempts=1).info(
                    self.job_id, timeout=(min(TIMEOUTS[0], left), min(TIMEOUTS[1], left)))["status"]
                if status in TERMINAL:
                    return status
            except Exception:  # noqa: BLE001 - keep asking until the deadline
                pass
            time.sleep(min(backoff.next(), max(0.0, deadline - time.monotonic())))


def follow(dashboard_url: str, job_id: str, timeout: float, max_poll: float = MAX_POLL, echo=echo,
           stop_grace: float = 60.0, outage_tolerance: float = OUTAGE_TOLERANCE,
           heartbeat: Callable[[], None] | None = None, request_timeout=TIMEOUTS,
           log_path: str | None = None) -> JobResult:
    """Follow a job to a terminal state, streaming its new log lines (see Follower); stop it
    on timeout, and on SIGTERM (a cancelled run: the stop is sent at once, and the job
    awaited only for what is left of the grace period). Raises JobFailed, JobTimeout,
    Unreachable, Cancelled. heartbeat is called once per poll."""
    from .errors import Cancelled
    from .signals import cleanup_deadline, sigterm_raises

    follower = Follower(dashboard_url, job_id, timeout, max_poll, echo, stop_grace, outage_tolerance, heartbeat,
                        request_timeout, log_path=log_path)
    with sigterm_raises():
        try:
            return follower.run()
        except Cancelled as exc:
            deadline = cleanup_deadline(exc)
            log(f"the task was cancelled: stopping Ray job {job_id}")
            follower.request_stop(deadline)
            status = follower.wait_stopped(deadline)
            log(f"Ray job {job_id} {status}" if status else f"Ray job {job_id} not stopped yet as the grace period ends")
            raise


def _tail(text: str, lines: int = 30) -> str:
    from .redact import redact

    return redact("\n".join(text.splitlines()[-lines:]))
