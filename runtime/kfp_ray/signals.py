"""Turn SIGTERM (a cancelled pipeline run) into an exception, so cleanup code runs, and
keep that cleanup inside the grace period Kubernetes gives before SIGKILL.

A cancelled KFP run: Argo sends SIGTERM to the task's container (terminate sets the
Workflow's activeDeadlineSeconds to 0; delete garbage-collects the pods) and SIGKILL after
the pod's terminationGracePeriodSeconds, 30 s by default (KFP sets none)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

from .errors import Cancelled

# Kubernetes' default terminationGracePeriodSeconds.
GRACE_SECONDS = 30.0
# Cleanup ends this long before SIGKILL, so the last log lines and the exit get out.
EXIT_MARGIN = 3.0


@contextlib.contextmanager
def sigterm_raises():
    """Inside this block the first SIGTERM raises Cancelled in the main thread (no-op in
    other threads); later ones are ignored, so that they cannot interrupt the cleanup the
    first one started."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"cancelled": False}

    def handler(signum, frame):
        if state["cancelled"]:
            return
        state["cancelled"] = True
        raise Cancelled("the task was cancelled (SIGTERM)", at=time.monotonic())

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cleanup_deadline(cancelled: Cancelled, grace: float = GRACE_SECONDS) -> float:
    """The time.monotonic() by which cleanup after this cancellation must be done."""
    return cancelled.at + max(0.0, grace - EXIT_MARGIN)
