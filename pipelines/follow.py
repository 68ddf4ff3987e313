"""Following a run on a Data Science Pipelines server as it goes: each task's state when it
changes, and its pod's log as it is written (through pods/log, as `kubectl logs` reads it),
until the run ends. Used by `run --local`; the server's own states decide when it is over.

kfp.Client.wait_for_run_completion does not stop on CANCELED (kfp 2.17 waits for SUCCEEDED,
FAILED, SKIPPED or ERROR): this loop treats every terminal state as the end."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# v2beta1 RuntimeState: the run (and a task) is over in these
TERMINAL = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")
POLL_S = (0.5, 2.0)  # between reads of the run: from, backing off to while nothing changes
MAX_FAILED_READS = 8  # consecutive failed reads of the run before following gives up


@dataclass
class _Task:
    name: str
    state: str = ""
    pod: str = ""
    said: int = 0  # how much of its pod's log was printed
    log_done: bool = False


@dataclass
class Follower:
    """`get_run(run_id)` is kfp.Client.get_run; `read_log(pod)` answers the pod's log so far
    (None when it cannot be read); `out` gets whole lines."""

    get_run: Callable
    out: object
    read_log: Callable[[str], str | None] | None = None
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
        for d in (run.run_details.task_details if run.run_details else None) or []:
            task = self.tasks.setdefault(d.task_id, _Task(d.display_name))
            task.pod = d.pod_name or task.pod
            ended = final or d.state in TERMINAL
            if ended:  # its log's end before the line that says how it ended
                changed |= self._log(task, ended)
            if d.state != task.state and (task.pod or d.state == "SKIPPED"):  # a pod's task, or a cache hit
                task.state = d.state
                self._say(f"==> {task.name}: {d.state}" + (f": {d.error.message}" if d.error and d.error.message else ""))
                changed = True
            if not ended:
                changed |= self._log(task, ended)
        return changed

    def _log(self, task: _Task, ended: bool) -> bool:
        if not task.pod or task.log_done or self.read_log is None:
            return False
        text = self.read_log(task.pod)
        if text is None:
            task.log_done = ended  # gone (a terminated run's pod) or not readable yet
            return False
        new = text[task.said:]
        if not ended:  # a line still being written waits for its end
            new = new[: new.rfind("\n") + 1]
        task.said += len(new)
        for line in new.splitlines():
            self._say(f"{task.name} | {line}")
        task.log_done = ended
        return bool(new)

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
