"""Turn SIGTERM (a cancelled pipeline run) into an exception, so cleanup code runs."""

from __future__ import annotations

import contextlib
import signal
import threading

from .errors import Cancelled


@contextlib.contextmanager
def sigterm_raises():
    """Inside this block SIGTERM raises Cancelled in the main thread (no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Cancelled("the task was cancelled (SIGTERM)")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
