"""The kubelet's back-off, as client-go's flowcontrol.Backoff (k8s.io/client-go/util/flowcontrol
backoff.go) that kubernetes v1.31 pkg/kubelet gives container restarts (klet.backOff) and image
pulls (imageBackOff): both `NewBackOff(backOffPeriod=10s, MaxContainerBackOff=300s)`, no jitter.

- Next(id, t): no entry, or the last update is more than 2 x max before t: back-off = the
  initial period; else it doubles, capped at max. Records the update time (now).
- IsInBackOffSince(id, t): now - t < back-off (a crashed container: t is when it finished).
- IsInBackOffSinceUpdate(id, now): now - last update < back-off (an image pull).
"""

from __future__ import annotations

import threading
import time


class Backoff:
    def __init__(self, initial: float, maximum: float, clock=time.monotonic):
        self.initial, self.maximum, self.clock = initial, maximum, clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, float]] = {}  # id -> (back-off, last update)

    def _expired(self, event_time: float, last_update: float) -> bool:
        return event_time - last_update > 2 * self.maximum

    def get(self, key: str) -> float:
        with self._lock:
            return self._entries.get(key, (0.0, 0.0))[0]

    def next(self, key: str, event_time: float) -> float:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(event_time, entry[1]):
                backoff = self.initial
            else:
                backoff = min(entry[0] * 2, self.maximum)
            self._entries[key] = (backoff, self.clock())
            return backoff

    def in_backoff_since(self, key: str, event_time: float) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(event_time, entry[1]):
                return False
            return self.clock() - event_time < entry[0]

    def in_backoff_since_update(self, key: str, now: float) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(now, entry[1]):
                return False
            return now - entry[1] < entry[0]


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (10s, 1m20s, 5m0s; 500ms below a second)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    minutes, secs = divmod(seconds, 60)
    secs_text = f"{secs:g}s"
    return f"{int(minutes)}m{secs_text}" if minutes else secs_text
