"""What a run's exit handler can still tell about the run: which task failed and why, and when
each task ran, read from the run's own task pods (label `pipeline/runid`, which KFP puts on
every pod of a run) while the run's workflow still holds them.

A failed task's outputs never reach the exit handler (the launcher uploads them only on
success), but its pod and its log stay until the workflow is gone. So the report reads:
- the failed pods (phase Failed): their task name (KFP's `pipelines.kubeflow.org/task_name`,
  else the task in Argo's `workflows.argoproj.io/node-name`), and the end of the `main`
  container's log, redacted; the last error line in it is "why";
- every task pod's start and end, for the run's timeline.
Uses what DSPO's pipeline-runner Role allows: pods list, pods/log get.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from . import kube
from .redact import redact

TAIL_LINES = 40
NAME_KEY = "pipelines.kubeflow.org/task_name"
NODE_KEY = "workflows.argoproj.io/node-name"  # <workflow>.root.exit-handler-1.<task>[.executor|(0)]
# A Python exception's last line ("kfp_ray.errors.AdmissionTimeout: ..."), or a kfp-ray line
# that says what to change.
_ERROR = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Timeout|Failed|Evicted|Cancelled|Interrupt|Exit)\b.*"
                    r"|\[kfp-ray\] .*\bFix: .*)$")
_CANCELLED = re.compile(r"\bCancelled\b|\(SIGTERM\)")


@dataclass
class TaskPod:
    task: str
    phase: str
    started: datetime | None
    finished: datetime | None
    exit_code: int | None = None
    log_tail: str = ""
    why: str = ""

    @property
    def failed(self) -> bool:
        return self.phase == "Failed" or self.exit_code not in (None, 0)

    @property
    def cancelled(self) -> bool:
        """Stopped by a terminated run, not failed by itself: SIGTERM's exit code (143) or the
        Cancelled our tasks raise on SIGTERM (signals.py) as the reason."""
        return self.failed and (self.exit_code == 143 or bool(_CANCELLED.search(self.why)))


def task_of(pod) -> str:
    meta = pod.metadata
    for source in (meta.annotations or {}, meta.labels or {}):
        if source.get(NAME_KEY):
            return source[NAME_KEY]
    node = (meta.annotations or {}).get(NODE_KEY, "")
    return task_of_node(node) if node else meta.name


def task_of_node(node_name: str) -> str:
    """The pipeline task an Argo node name is for: `<workflow>.root.<task>.executor`, a retry's
    `...<task>.executor(1)`, an exit task's `...<guarded>.onExit.<task>.executor`."""
    parts = [p for p in re.sub(r"\(\d+\)", "", node_name).split(".") if p not in ("executor", "driver")]
    return parts[-1]


def why(tail: str) -> str:
    """The last line of a log's end that names an error, else its last line."""
    lines = [li.rstrip() for li in tail.splitlines() if li.strip()]
    for line in reversed(lines):
        text = re.sub(r"^\S+ \| ", "", line)
        if _ERROR.match(text.strip()):
            return text.strip()
    return lines[-1].strip() if lines else ""


def _main_state(pod):
    statuses = pod.status.container_statuses or []
    main = next((c for c in statuses if c.name == "main"), statuses[0] if statuses else None)
    return main.state if main is not None else None


def task_pods(run_id: str, namespace: str) -> list[TaskPod]:
    """The run's task pods, oldest first; failed ones with the end of their log."""
    # single tries: an exit task must not wait out an unreachable API for a report
    pods = kube.call(kube.core().list_namespaced_pod, namespace, label_selector=f"pipeline/runid={run_id}",
                     what="list the run's task pods", attempts=1).items
    out = []
    for pod in sorted(pods, key=lambda p: p.status.start_time or p.metadata.creation_timestamp):
        if (pod.metadata.annotations or {}).get(NODE_KEY, "").endswith("-driver"):
            continue  # KFP's driver pods (`<task>-driver`, `root-driver`): the tasks are their executors
        state = _main_state(pod)
        term = state.terminated if state is not None else None
        tp = TaskPod(task=task_of(pod), phase=pod.status.phase or "", started=pod.status.start_time,
                     finished=term.finished_at if term is not None else None,
                     exit_code=term.exit_code if term is not None else None)
        if tp.failed:
            try:
                log = kube.call(kube.core().read_namespaced_pod_log, pod.metadata.name, namespace, container="main",
                                tail_lines=TAIL_LINES, what=f"read the log of task {tp.task}", attempts=1)
            except Exception as exc:  # noqa: BLE001 - the report says what it could not read
                log = f"(its log could not be read: {type(exc).__name__})"
            tp.log_tail = redact(log if isinstance(log, str) else str(log))
            tp.why = why(tp.log_tail)
        out.append(tp)
    return out


def started(pods: list[TaskPod]) -> datetime | None:
    """The first task pod's start: the timeline's zero."""
    return min((p.started for p in pods if p.started is not None), default=None)


def timeline(pods: list[TaskPod], now: datetime | None = None):
    """report.Phase per task, at its real start and end from the first pod's start (a task
    with several pods, retries, gets one bar from its first start to its last end; one still
    running ends at `now`, else at the latest end seen)."""
    from .report import Phase

    runs = [p for p in pods if p.started is not None]
    if not runs:
        return []
    t0 = started(runs)
    now = now or max([p.finished for p in runs if p.finished] + [p.started for p in runs])
    spans: dict[str, list] = {}
    for p in runs:
        start, end = (p.started - t0).total_seconds(), ((p.finished or now) - t0).total_seconds()
        state = ("terminated" if p.cancelled else "failed") if p.failed else \
            "succeeded" if p.phase == "Succeeded" else "running"
        span = spans.setdefault(p.task, [start, end, state])
        span[0], span[1] = min(span[0], start), max(span[1], end)
        span[2] = state if state in ("failed", "terminated") else span[2]
    return [Phase(task, start, max(end, start + 0.1), note="" if state == "succeeded" else state, state=state)
            for task, (start, end, state) in sorted(spans.items(), key=lambda kv: kv[1][0])]
