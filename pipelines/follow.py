"""Following a run on a Data Science Pipelines server as it goes: each task's state when it
changes (run_tasks.states: KFP 2.14's task details), and its pods' logs as they are written
(found by the run's label and Argo's node names, read through pods/log as `kubectl logs` reads
them), until the run ends. Used by `run --local`; the server's own states decide when it is over.

kfp.Client.wait_for_run_completion does not stop on CANCELED (kfp 2.17 waits for SUCCEEDED,
FAILED, SKIPPED or ERROR): this loop treats every terminal state as the end."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .run_tasks import OMITTED, states

# v2beta1 RuntimeState: the run (and a task) is over in these
TERMINAL = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")
POLL_S = (0.5, 2.0)  # between reads of the run: from, backing off to while nothing changes
MAX_FAILED_READS = 8  # consecutive failed reads of the run before following gives up


@dataclass
class _Task:
    name: str
    state: str = ""
    pods: list[str] = field(default_factory=list)  # its executor pods, first attempt first
    said: dict[str, int] = field(default_factory=dict)  # pod -> how much of its log was printed
    done: set[str] = field(default_factory=set)  # pods whose log was printed to its end


@dataclass
class Follower:
    """`get_run(run_id)` is kfp.Client.get_run; `out` gets whole lines. With
    `find_pods(run_id)` (each task's executor pods, run_tasks.executor_pods) and `read_log(pod)`
    (the pod's log so far, None when it cannot be read), each task's log is followed too."""

    get_run: Callable
    out: object
    read_log: Callable[[str], str | None] | None = None
    find_pods: Callable[[str], dict[str, list[str]]] | None = None
    tasks: dict[str, _Task] = field(default_factory=dict)

    def follow(self, run_id: str, timeout: float):
        """The run once it has ended; TimeoutError (naming its state) after `timeout` s."""
        deadline = time.monotonic() + timeout
        wait, failures, run = POLL_S[0], 0, None
        while True:
            try:
                run = self.get_run(run_id)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a transient failure of the server must not end the follow
                failures += 1
                if failures >= MAX_FAILED_READS or getattr(exc, "status", 0) in (401, 403, 404):
                    raise
                run = None
            changed = run is not None and self._update(run)
            if run is not None and run.state in TERMINAL:
                self._update(run, final=True)
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} was still {getattr(run, 'state', 'unreadable')} after {timeout:.0f}s")
            wait = POLL_S[0] if changed else min(wait * 1.5, POLL_S[1])
            time.sleep(wait)

    def _update(self, run, final: bool = False) -> bool:
        changed = False
        pods = self._pods(run.run_id)
        for name, state in states(run).items():
            task = self.tasks.setdefault(name, _Task(name))
            task.pods = pods.get(name, task.pods)
            ended = final or state in TERMINAL or state == OMITTED
            if ended:  # its log's end before the line that says how it ended
                changed |= self._log(task, ended)
            if state != task.state:
                task.state = state
                self._say(f"==> {name}: {state}")
                changed = True
            if not ended:
                changed |= self._log(task, ended)
        return changed

    def _pods(self, run_id: str) -> dict[str, list[str]]:
        if self.find_pods is None or self.read_log is None:
            return {}
        try:
            return self.find_pods(run_id)
        except Exception:  # noqa: BLE001 - logs are best effort; the next poll asks again
            return {}

    def _log(self, task: _Task, ended: bool) -> bool:
        """Print what is new in the task's pods' logs; a pod before the last (a retried attempt)
        is over, so its log is printed to its end."""
        printed = False
        for i, pod in enumerate(task.pods):
            if pod in task.done:
                continue
            over = ended or i < len(task.pods) - 1
            text = self.read_log(pod)
            if text is None:
                if over:
                    task.done.add(pod)  # gone (a terminated run's pod) or never readable
                continue
            new = text[task.said.get(pod, 0):]
            if not over:  # a line still being written waits for its end
                new = new[: new.rfind("\n") + 1]
            task.said[pod] = task.said.get(pod, 0) + len(new)
            for line in new.splitlines():
                self._say(f"{task.name} | {line}")
            if over:
                task.done.add(pod)
            printed |= bool(new)
        return printed

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
