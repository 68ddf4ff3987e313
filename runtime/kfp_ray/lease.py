"""Cluster leases: the backstop for when no task is left to clean up.

Every RayCluster (and RayJob) kfp-ray creates carries the annotation `kfp-ray.io/lease-expires`, an
RFC 3339 UTC time. It is stamped at creation long enough for admission and startup, renewed
by every task that holds the cluster (provision while it waits, submit, follow while the job
runs, run_ray_driver while its driver runs), handed off between them (below), and set to "now"
by every deletion kfp-ray makes. A cluster whose lease has passed has no
task left that cares for it: its KFP run was deleted (no exit handler runs), or its task
was SIGKILLed (no cleanup code runs). `sweep` finds those clusters and deletes them.

A RayJob's lease is the RayJob's: KubeRay copies its annotations onto the RayCluster it
creates, but that copy is never renewed, so the sweeper judges such a cluster through its
RayJob (deleting the RayJob deletes the cluster) and leaves it alone otherwise. A RayJob whose
job may still run (admitted, not Complete or Failed) is KubeRay's to end, whatever its lease
says: KubeRay deletes its cluster when the job ends or its activeDeadlineSeconds passes, even
with no pipeline pod left, which is the point of lifecycle "rayjob" (a deleted run's job runs
on to its end). The sweeper deletes an expired RayJob only once it holds no quota: its job
over, or still queued (suspended: no job runs, nobody is left to wait for it).

Choices:
- Renewal is a JSON merge patch of metadata.annotations: the pipeline-runner Role allows
  patch on rayclusters, not update; a merge patch on a deleted object is a 404, so a
  renewal never brings a cluster back.
- A cluster without the annotation, or with one that does not parse, is never deleted:
  the sweeper acts only on positive evidence that nobody is using the cluster. Clusters made
  before leases existed keep running jobs, and removing the annotation is how a user keeps
  a cluster beyond its run on purpose (`oc annotate raycluster NAME kfp-ray.io/lease-expires-`).
- Teardown "clears" the lease by setting it to now before it deletes: if the delete then
  fails (or the task is killed in between), the next sweep collects the cluster instead of
  waiting for the lease to run out. Removing it would make the cluster unsweepable.
- A renewal sets the lease to now + lease_seconds, also when that is sooner than what
  creation stamped: a live task promises to renew, and a SIGKILLed one should free its
  quota within one lease, not within admission + startup.
- The hand-off: a task that hands the cluster on to the next one (provision and submit at
  their end, follow when it leaves a job it can no longer reach to a retry) sets the lease to
  HANDOFF_S (1 h, never less than the lease) rather than one lease. Between two tasks no
  process runs that could renew: the next task's pod may wait for namespace quota or node
  capacity, pull the task image, pip-install, or wait for stage_dataset (which runs beside
  provision) to finish. One lease (10 min) is too short for that on a busy cluster; an hour
  covers any healthy hand-off, and a deleted run whose cluster sat between two tasks still
  gets its quota back within the hour. The next task renews to one lease as soon as it starts.
  (Not chosen: the sweeper asking whether the run's Argo Workflow still exists. pipeline-runner
  may list Workflows, but a compiled kfp-ray Workflow is a megabyte or more, the cluster-wide
  sweeper's RBAC would need Argo too, and the sandbox serves no Workflows to test it against.)
- The sweeper deletes with preconditions (uid and resourceVersion of the object it judged
  expired): a renewal that lands in between changes the resourceVersion, the delete is
  refused (409), the sweeper reads the cluster again and keeps it if it is live now.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from . import kube
from .errors import KfpRayError
from .rayclusters import (
    GONE_TIMEOUT,
    GROUP,
    RAYCLUSTER,
    RAYJOB,
    RUN_LABEL,
    VERSION,
    Kind,
    being_deleted,
    get,
    kind_of,
    owning_rayjob,
    suspended,
    wait_gone,
)
from .validate import Checker, quantity
from .wait import log

ANNOTATION = "kfp-ray.io/lease-expires"
RUN_ID_ANNOTATION = "kfp-ray.io/run-id"
MANAGED_BY = ("app.kubernetes.io/managed-by", "kfp-ray")
SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
DEFAULT_LEASE_S = 600.0  # 10 min: ten renewal periods, so a few failed renewals do not let it lapse
DEFAULT_RENEW_S = 60.0
HANDOFF_S = 3600.0  # the lease between two tasks that hold the cluster (above: the hand-off)
RETRY_S = 5.0  # after a failed renewal, try again this soon (at most one renewal period)
REQUEST_TIMEOUT = (5.0, 10.0)  # connect, read: a renewal must never hold up the loop that calls it
LOG_FAILURES_EVERY = 60.0
DELETE_ATTEMPTS = 5  # KubeRay and Kueue update the object too: a 409 is re-judged, boundedly


# --- time -------------------------------------------------------------------------------------
def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC, whole seconds: 2026-11-23T05:00:00Z."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expires_in(seconds: float, now: datetime | None = None) -> str:
    """The annotation value for a lease of `seconds` from now (rounded up, never shorter)."""
    t = (now or utcnow()) + timedelta(seconds=seconds)
    if t.microsecond:
        t = t.replace(microsecond=0) + timedelta(seconds=1)
    return format_time(t)


def parse(value: str) -> datetime:
    """An RFC 3339 date-time with a time zone; ValueError otherwise."""
    if not isinstance(value, str) or "T" not in value.upper():
        raise ValueError(f"{value!r} is not an RFC 3339 date-time")
    t = datetime.fromisoformat(value.strip().replace("z", "Z"))
    if t.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return t.astimezone(UTC)


# --- the lease on one cluster -------------------------------------------------------------------
@dataclass
class Lease:
    state: str  # "live", "expired", "no lease", "bad lease"
    value: str | None  # the annotation as found
    seconds_left: float | None  # negative: how long ago it expired

    @property
    def expired(self) -> bool:
        return self.state == "expired"


def lease_of(rc: dict, now: datetime | None = None) -> Lease:
    value = (rc["metadata"].get("annotations") or {}).get(ANNOTATION)
    if value is None:
        return Lease("no lease", None, None)
    try:
        t = parse(value)
    except ValueError:
        return Lease("bad lease", value, None)
    left = (t - (now or utcnow())).total_seconds()
    return Lease("live" if left > 0 else "expired", value, left)


def stamp(body: dict, seconds: float, now: datetime | None = None) -> dict:
    """Put a lease of `seconds` on a manifest about to be created."""
    body["metadata"].setdefault("annotations", {})[ANNOTATION] = expires_in(seconds, now)
    return body


def check(c: Checker, lease_seconds, renew_every_seconds) -> None:
    """The lease parameters: positive, and the lease at least two renewal periods long, so
    one failed renewal does not let it lapse."""
    c.positive_seconds("renew_every_seconds", renew_every_seconds)
    c.positive_seconds("lease_seconds", lease_seconds)
    if (isinstance(lease_seconds, (int, float)) and isinstance(renew_every_seconds, (int, float))
            and 0 < renew_every_seconds and 0 < lease_seconds < 2 * renew_every_seconds):
        c.fail("lease_seconds", f"{lease_seconds!r} is shorter than two renewal periods (renew_every_seconds="
                                f"{renew_every_seconds!r}): one late renewal would let the sweeper delete a cluster in use",
               f"give lease_seconds of at least {2 * renew_every_seconds:g} (e.g. ten renewal periods), or renew more often")


def _patch(name: str, namespace: str, value: str, deadline: float | None = None, kind: Kind = RAYCLUSTER) -> None:
    """One merge patch of the annotation, one attempt, bounded in time."""
    kube.call(kube.custom().patch_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural, name,
              {"metadata": {"annotations": {ANNOTATION: value}}}, what=f"patch the lease of {kind.name} {name}",
              attempts=1, deadline=deadline, _request_timeout=REQUEST_TIMEOUT)


def expire(name: str, namespace: str, deadline: float | None = None, kind: Kind = RAYCLUSTER) -> bool:
    """Set the lease to now (around a deletion): whatever happens next, the next sweep may
    collect the cluster. Best effort, one attempt (never past `deadline`); never raises
    (a cancellation, a BaseException, still passes)."""
    try:
        _patch(name, namespace, format_time(utcnow()), deadline, kind)
        return True
    except Exception as exc:  # noqa: BLE001 - the lease still runs out by itself
        if not kube.not_found(exc):
            log(f"could not expire the lease of {kind.name} {name} ({one_line(exc)}); it runs out by itself")
        return False


class Renewer:
    """Renews a cluster's lease when due; call it from a wait loop (a heartbeat).

    Never raises (a cancellation, a BaseException, passes): a failed renewal is logged and tried again soon. No
    thread: it renews only while the task's own loop runs, so it cannot outlive the task."""

    def __init__(self, name: str, namespace: str, lease_seconds: float = DEFAULT_LEASE_S,
                 every: float = DEFAULT_RENEW_S, first_in: float = 0.0, clock=time.monotonic, now=None,
                 kind: Kind = RAYCLUSTER, handoff: float = HANDOFF_S):
        """first_in: seconds until the first renewal (0: the first call renews; a lease
        stamped a moment ago at creation can wait one period). now: the wall clock (utcnow)."""
        self.name, self.namespace, self.kind = name, namespace, kind
        self.lease_seconds, self.every = float(lease_seconds), float(every)
        self.handoff = max(float(handoff), self.lease_seconds)
        self.clock, self.now = clock, now
        self.due = clock() + first_in
        self.renewals = 0
        self.failures = 0  # since the last success
        self.last_failure_log = -math.inf
        self.until: datetime | None = None  # the expiry last written
        self.gone = False

    def __call__(self) -> None:
        if not self.gone and self.clock() >= self.due:
            self.renew()

    def hand_off(self) -> bool:
        """Renew now for the hand-off to the next task (HANDOFF_S, never less than the lease):
        no process renews until it starts. True when the lease was written."""
        for pause in (1.0, 2.0, None):  # no loop calls again: a few tries, a few seconds
            if self.renew(self.handoff):
                log(f"lease of {self.kind.name} {self.name} handed on: until {format_time(self.until)} "
                    f"({self.handoff:g}s), for the next task to take over")
                return True
            if self.gone or pause is None:
                return False
            time.sleep(pause)
        return False

    def renew(self, seconds: float | None = None) -> bool:
        """Renew now, for `seconds` (default: one lease). True when the lease was written."""
        if self.gone:
            return False
        now = self.now() if self.now is not None else utcnow()
        value = expires_in(self.lease_seconds if seconds is None else seconds, now)
        try:
            _patch(self.name, self.namespace, value, kind=self.kind)
        except Exception as exc:  # noqa: BLE001 - logged, tried again soon (Cancelled, a BaseException, passes)
            if kube.not_found(exc):
                self.gone = True
                log(f"{self.kind.name} {self.name} is gone: its lease is no longer renewed")
                return False
            self.failures += 1
            self.due = self.clock() + min(self.every, RETRY_S)
            if self.clock() - self.last_failure_log >= LOG_FAILURES_EVERY:
                self.last_failure_log = self.clock()
                left = f"; it runs out at {format_time(self.until)}" if self.until else ""
                log(f"could not renew the lease of {self.kind.name} {self.name} ({one_line(exc)}); trying again{left}")
            return False
        if self.until is not None and now > self.until:
            log(f"the lease of {self.kind.name} {self.name} had run out {(now - self.until).total_seconds():.0f}s before this "
                "renewal: a sweep in that time may have deleted it")
        if (self.renewals == 0 or self.failures) and seconds is None:
            again = f" after {self.failures} failed attempts" if self.failures else ""
            log(f"lease of {self.kind.name} {self.name} renewed{again}: until {value} (every {self.every:g}s, "
                f"{self.lease_seconds:g}s long)")
        self.renewals += 1
        self.failures = 0
        self.until = parse(value)
        self.due = self.clock() + self.every
        return True


def one_line(exc: BaseException) -> str:
    """One line about an error: the API's own message where it gave one."""
    import json

    status = getattr(exc, "status", None)
    try:
        text = json.loads(getattr(exc, "body", None) or "")["message"]
    except Exception:  # noqa: BLE001 - not an API answer
        text = str(getattr(exc, "reason", None) or exc)
    text = (text.splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {text}"


# --- what a cluster holds ---------------------------------------------------------------------
RESOURCES = (("cpu", "cpu"), ("memory", "memory"), ("nvidia.com/gpu", "gpu"))


def pod_requests(template: dict) -> dict[str, Fraction]:
    """A pod's effective requests, as the scheduler and Kueue count them: the sum over its
    containers, or the largest init container's, whichever is more."""
    spec = (template or {}).get("spec") or {}

    def requests(c: dict) -> dict[str, Fraction]:
        res = c.get("resources") or {}
        got = {}
        for key, _ in RESOURCES:
            value = (res.get("requests") or {}).get(key, (res.get("limits") or {}).get(key))
            if value is not None:
                try:
                    got[key] = quantity(value)
                except ValueError:
                    continue
        return got

    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        for k, v in requests(c).items():
            total[k] = total.get(k, Fraction(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in requests(c).items():
            total[k] = max(total.get(k, Fraction(0)), v)
    return total


@dataclass
class Held:
    pods: int = 0
    amounts: dict = field(default_factory=dict)  # resource -> Fraction

    def describe(self) -> str:
        parts = []
        for key, short in RESOURCES:
            v = self.amounts.get(key)
            if v:
                parts.append(f"{short} {_memory(v) if key == 'memory' else _number(v)}")
        return ", ".join(parts + [f"{self.pods} pod{'s' if self.pods != 1 else ''}"])

    def add(self, other: Held) -> None:
        self.pods += other.pods
        for k, v in other.amounts.items():
            self.amounts[k] = self.amounts.get(k, Fraction(0)) + v


def held(rc: dict) -> Held:
    """What the cluster's pods request: the head, and each worker group's replicas (a
    RayJob's: those of its rayClusterSpec)."""
    spec = rc.get("spec") or {}
    if kind_of(rc) is RAYJOB:
        spec = spec.get("rayClusterSpec") or {}
    out = Held()
    groups = [(spec.get("headGroupSpec") or {}, 1)]
    for g in spec.get("workerGroupSpecs") or []:
        replicas = g.get("replicas", g.get("minReplicas", 0)) or 0
        groups.append((g, int(replicas) * int(g.get("numOfHosts") or 1)))
    for group, count in groups:
        if count <= 0:
            continue
        req = pod_requests(group.get("template") or {})
        out.add(Held(count, {k: v * count for k, v in req.items()}))
    return out


def _number(v: Fraction) -> str:
    return f"{float(v):g}"


def _memory(v: Fraction) -> str:
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if v >= size:
            return f"{float(v / size):.3g}{unit}"
    return f"{int(v)}"


# --- the sweep --------------------------------------------------------------------------------
@dataclass
class Swept:
    name: str  # a RayJob's is shown as rayjob/<name>
    namespace: str
    run_id: str
    lease: Lease
    held: Held
    admitted: bool  # not suspended: Kueue admitted it, its quota is in use
    action: str = "kept"  # kept, would delete, deleted, being deleted, renewed meanwhile, left to KubeRay, failed
    error: str = ""
    uid: str = ""

    def resources(self) -> str:
        return self.held.describe() + ("" if self.admitted else " (queued: no quota held)")


def managed(rc: dict) -> bool:
    """kfp-ray's labels: managed-by kfp-ray and a run id. Anything else is never touched."""
    labels = rc["metadata"].get("labels") or {}
    return labels.get(MANAGED_BY[0]) == MANAGED_BY[1] and bool(labels.get(RUN_LABEL))


def list_clusters(namespace: str | None, kind: Kind = RAYCLUSTER) -> list[dict]:
    """kfp-ray's RayClusters (or RayJobs) in a namespace, or in all namespaces (namespace None).
    RayClusters that belong to a RayJob are left out: they are judged through it."""
    try:
        if namespace is None:
            items = kube.call(kube.custom().list_cluster_custom_object, GROUP, VERSION, kind.plural,
                              label_selector=SELECTOR, what=f"list {kind.name}s in all namespaces")["items"]
        else:
            items = kube.call(kube.custom().list_namespaced_custom_object, GROUP, VERSION, namespace, kind.plural,
                              label_selector=SELECTOR, what=f"list {kind.name}s in {namespace}")["items"]
    except Exception as exc:  # noqa: BLE001
        if kind is RAYJOB and kube.not_found(exc):
            return []  # a KubeRay without the RayJob CRD: there are none
        if kube.forbidden(exc):
            where = "in all namespaces" if namespace is None else f"in namespace {namespace!r}"
            raise KfpRayError(f"this identity may not list {kind.name}s (ray.io) {where}. Fix: "
                              + (f"sweep one namespace at a time (--namespace), or grant list on {kind.plural} cluster-wide"
                                 if namespace is None else f"run as a user or service account with list on {kind.plural} "
                                                           "there (the pipeline-runner service account has it in its own "
                                                           "namespace)")) from None
        raise
    for item in items:  # a list's items carry no kind
        item.setdefault("kind", kind.name)
    # The label selector is the server's promise; this is ours.
    return sorted((rc for rc in items if managed(rc) and not owning_rayjob(rc)),
                  key=lambda r: (r["metadata"]["namespace"], r["metadata"]["name"]))


def judge(rc: dict, now: datetime | None = None) -> Swept:
    meta = rc["metadata"]
    run = (meta.get("annotations") or {}).get(RUN_ID_ANNOTATION) or (meta.get("labels") or {}).get(RUN_LABEL, "")
    entry = Swept(meta["name"] if kind_of(rc) is RAYCLUSTER else f"rayjob/{meta['name']}", meta["namespace"], run,
                  lease_of(rc, now), held(rc), holds_quota(rc), uid=meta.get("uid", ""))
    if being_deleted(rc):
        entry.action = "being deleted"
    elif entry.lease.expired and kuberays(rc):
        entry.action = KUBERAY
    return entry


KUBERAY = "left to KubeRay"


def kuberays(obj: dict) -> bool:
    """A RayJob whose job may still run (admitted, not over): KubeRay ends it and frees its
    quota (the job's end, or activeDeadlineSeconds), so the sweeper never deletes it."""
    return kind_of(obj) is RAYJOB and holds_quota(obj)


def holds_quota(obj: dict) -> bool:
    """Admitted by Kueue (not suspended); a RayJob also only until its job is over (Kueue
    then finishes its Workload)."""
    if kind_of(obj) is RAYJOB:
        return not suspended(obj) and (obj.get("status") or {}).get("jobDeploymentStatus") not in ("Complete", "Failed")
    return not suspended(obj)


def _delete_expired(rc: dict, entry: Swept) -> dict | None:
    """Delete the cluster if its lease is still expired, with preconditions so that a
    renewal in between wins. Returns the object whose deletion was requested, or None."""
    name, ns = rc["metadata"]["name"], rc["metadata"]["namespace"]
    kind = kind_of(rc)
    from kubernetes.client import V1DeleteOptions, V1Preconditions

    for _ in range(DELETE_ATTEMPTS):
        opts = V1DeleteOptions(preconditions=V1Preconditions(uid=rc["metadata"]["uid"],
                                                             resource_version=rc["metadata"]["resourceVersion"]))
        try:
            kube.call(kube.custom().delete_namespaced_custom_object, GROUP, VERSION, ns, kind.plural, name, body=opts,
                      what=f"delete {kind.name} {name}")
            return rc
        except Exception as exc:  # noqa: BLE001
            if kube.not_found(exc):
                entry.action = "deleted"  # gone already: by its own teardown, or another sweep
                return None
            if getattr(exc, "status", None) != 409:
                raise
        now_rc = get(name, ns, kind=kind)  # changed since we looked: judge it again
        if now_rc is None or now_rc["metadata"]["uid"] != rc["metadata"]["uid"]:
            entry.action = "deleted"
            return None
        rc = now_rc
        again = judge(rc)
        entry.lease, entry.admitted = again.lease, again.admitted
        if being_deleted(rc):  # our own request whose answer was lost (retried), or another sweep's
            return rc
        if not again.lease.expired:
            entry.action = "renewed meanwhile"
            return None
        if again.action == KUBERAY:  # admitted meanwhile: its job runs
            entry.action = KUBERAY
            return None
    raise KfpRayError(f"{kind.name} {name!r} kept changing while the sweeper tried to delete it; the next sweep tries again")


def sweep(namespace: str | None, delete: bool = False, timeout: float = GONE_TIMEOUT,
          now: datetime | None = None) -> list[Swept]:
    """Judge every kfp-ray RayCluster and RayJob in `namespace` (None: all namespaces) by its
    lease. Dry run by default; with delete, delete those whose lease has expired and wait
    until they are gone (finalizers done). Returns one entry per object, with what was done."""
    clusters = list_clusters(namespace) + list_clusters(namespace, RAYJOB)
    entries = []
    requested: list[tuple[dict, Swept]] = []
    for rc in clusters:
        entry = judge(rc, now)
        entries.append(entry)
        if entry.action in ("being deleted", KUBERAY) or not entry.lease.expired:
            continue
        if not delete:
            entry.action = "would delete"
            continue
        try:
            gone = _delete_expired(rc, entry)
        except Exception as exc:  # noqa: BLE001 - one cluster's failure does not stop the sweep
            entry.action, entry.error = "failed", one_line(exc)
            continue
        if gone is not None:
            log(f"lease of {kind_of(rc).name} {entry.namespace}/{entry.name} (run {entry.run_id}) "
                f"{describe_lease(entry.lease)}: deleting it ({entry.resources()})")
            requested.append((gone, entry))
    for rc, entry in requested:  # deletions run in parallel; wait for each
        try:
            wait_gone(rc, timeout)
            entry.action = "deleted"
        except Exception as exc:  # noqa: BLE001
            entry.action, entry.error = "failed", one_line(exc)
    return entries


# --- the report -------------------------------------------------------------------------------
def duration(seconds: float) -> str:
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def describe_lease(lease: Lease) -> str:
    if lease.state == "expired":
        return f"expired {duration(lease.seconds_left or 0)} ago"
    if lease.state == "live":
        return f"live, {duration(lease.seconds_left or 0)} left"
    if lease.state == "bad lease":
        return f"unreadable ({lease.value!r})"
    return "none"


def rows(entries: list[Swept]) -> list[list[str]]:
    out = [["NAMESPACE", "NAME", "RUN", "LEASE", "RESOURCES", "ACTION"]]
    for e in entries:
        action = e.action + (f": {e.error}" if e.error else "")
        out.append([e.namespace, e.name, e.run_id or "-", describe_lease(e.lease), e.resources(), action])
    return out


def align(table: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column padded to its widest cell."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]


def render(entries: list[Swept], delete: bool, where: str) -> str:
    """A readable table and a summary line."""
    if not entries:
        return f"no kfp-ray RayClusters {where}"
    lines = align(rows(entries))
    lines.append("")
    lines.append(summary(entries, delete, where))
    return "\n".join(lines)


def expired(entries: list[Swept]) -> list[Swept]:
    """The clusters this sweep found expired (to delete, deleted, or failed to delete);
    not those already being deleted, nor those renewed while it looked."""
    return [e for e in entries if e.action in ("would delete", "deleted", "failed")]


def summary(entries: list[Swept], delete: bool, where: str) -> str:
    found = expired(entries)
    freed = [e for e in entries if e.action == "deleted"]
    failed = [e for e in entries if e.action == "failed"]
    total = Held()
    for e in (freed if delete else found):
        if e.admitted:
            total.add(e.held)
    kinds = "RayClusters and RayJobs" if any(e.name.startswith("rayjob/") for e in entries) else \
        f"RayCluster{'s' if len(entries) != 1 else ''}"
    text = f"{len(entries)} kfp-ray {kinds} {where}, {len(found)} with an expired lease"
    if not delete:
        quota = f"; they hold {total.describe()} of quota" if total.pods else ""
        return text + quota + kuberay_note(entries) + (". Dry run: nothing deleted" if found else ". Nothing to do")
    text += f"; deleted {len(freed)}"
    if total.pods:
        text += f", freeing {total.describe()} of quota"
    if failed:
        text += f"; {len(failed)} could not be deleted: " + ", ".join(f"{e.namespace}/{e.name}" for e in failed)
    return text + kuberay_note(entries)


def kuberay_note(entries: list[Swept]) -> str:
    left = [e for e in entries if e.action == KUBERAY]
    if not left:
        return ""
    return (f"; {len(left)} RayJob{'s' if len(left) != 1 else ''} with an expired lease whose job runs, left to KubeRay "
            "(it deletes the cluster when the job ends or its activeDeadlineSeconds passes)")


def markdown(entries: list[Swept], delete: bool, where: str) -> str:
    """The same report as a Markdown table (the task's report artifact in the RHOAI UI)."""
    title = f"# kfp-ray lease sweep {'(deleting)' if delete else '(dry run)'}\n\n"
    if not entries:
        return title + f"No kfp-ray RayClusters {where}.\n"
    table = rows(entries)

    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    body = [line(table[0]), "|" + " --- |" * len(table[0])] + [line(r) for r in table[1:]]
    return title + "\n".join(body) + "\n\n" + summary(entries, delete, where) + ".\n"
