"""Polling with backoff, bounded retries of transient failures, and progress lines."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from .errors import Unreachable
from .redact import redact

T = TypeVar("T")


_LOG_LOCK = threading.Lock()


def echo(text: str) -> None:
    """A job's log text (already redacted) in the task log, flushed at once: a task's stdout is
    a pipe, whose buffer would hold a job's lines until kilobytes more came or the task ended."""
    with _LOG_LOCK:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def log(msg: str) -> None:
    """A progress line in the task log (stdout, flushed, secrets redacted); one write per
    line, so that lines from two threads (a cancel's stop and delete) never interleave."""
    line = f"[kfp-ray] {redact(msg)}\n"
    with _LOG_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


class Backoff:
    """Delays that start small and grow to a cap (jittered so tasks do not march in step)."""

    def __init__(self, initial: float = 0.2, factor: float = 1.6, cap: float = 5.0,
                 later: tuple[float, float] | None = None):
        """later=(seconds, pause): once the pauses given add up to `seconds`, every pause is
        `pause` (a wait that should be quick at first, and light if it lasts)."""
        self.delay, self.factor, self.cap, self.later = initial, factor, cap, later
        self.given = 0.0

    def next(self) -> float:
        if self.later and self.given >= self.later[0] and self.cap != self.later[1]:
            self.delay = self.cap = self.later[1]
        d = self.delay
        self.delay = min(self.cap, self.delay * self.factor)
        d *= random.uniform(0.9, 1.1)
        self.given += d
        return d


def is_transient(exc: BaseException) -> bool:
    """API throttling, server errors and dropped connections: worth another try. A TLS
    failure (an untrusted or wrong certificate) is not: it fails at once, saying so."""
    if _tls_failure(exc):
        return False
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status in (429, 500, 502, 503, 504):
        return True
    name = type(exc).__name__
    if name in ("MaxRetryError", "ProtocolError", "NewConnectionError", "ConnectionError", "ConnectionResetError",
                "RemoteDisconnected", "ReadTimeoutError", "ConnectTimeoutError", "Timeout", "ConnectTimeout",
                "ReadTimeout", "ChunkedEncodingError"):
        return True
    return isinstance(exc, (ConnectionError, TimeoutError)) and not isinstance(exc, KeyboardInterrupt)


def _tls_failure(exc: BaseException) -> bool:
    import ssl

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ssl.SSLCertVerificationError) or type(exc).__name__ == "SSLError":
            return True
        reason = getattr(exc, "reason", None)  # urllib3 keeps the cause there (ApiException: a str)
        exc = reason if isinstance(reason, BaseException) else (exc.__cause__ or exc.__context__)
    return False


def retry(fn: Callable[[], T], what: str, attempts: int = 6, backoff: Backoff | None = None,
          sleep: Callable[[float], None] = time.sleep, deadline: float | None = None,
          clock: Callable[[], float] = time.monotonic,
          transient: Callable[[BaseException], bool] = is_transient) -> T:
    """Call fn, retrying transient failures (is_transient, or the `transient` given) up to
    `attempts` times with backoff, and never sleeping past `deadline` (a clock() time), if
    given. Cancelled (a BaseException) is never caught."""
    backoff = backoff or Backoff(0.3, 2.0, 5.0)
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            if attempt == attempts or not transient(exc):
                raise
            delay = backoff.next()
            if deadline is not None and clock() + delay >= deadline:
                raise
            log(f"{what}: transient error ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); "
                f"retry {attempt}/{attempts - 1} in {delay:.1f}s")
            sleep(delay)
    raise AssertionError("unreachable")


def poll(check: Callable[[], T | None], timeout: float, what: str, backoff: Backoff | None = None,
         on_timeout: Callable[[], Exception] | None = None, clock=time.monotonic, sleep=time.sleep) -> T:
    """Call check() with backoff until it returns a value that is not None, or time out.

    The TimeoutError (or on_timeout()'s exception) names what was awaited."""
    backoff = backoff or Backoff()
    deadline = clock() + timeout
    while True:
        value = check()
        if value is not None:
            return value
        left = deadline - clock()
        if left <= 0:
            if on_timeout is not None:
                raise on_timeout()
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        sleep(min(backoff.next(), left))


def beat(heartbeat: Callable[[], None] | None) -> None:
    """Call a waiting loop's heartbeat (e.g. a lease renewal). Its failures are logged and
    swallowed: a heartbeat must never end the wait. Cancelled passes (a BaseException)."""
    if heartbeat is None:
        return
    try:
        heartbeat()
    except Exception as exc:  # noqa: BLE001 - logged; the wait goes on
        log(f"heartbeat failed ({type(exc).__name__}: {first_line(exc)}); carrying on")


def combine(*heartbeats: Callable[[], None] | None) -> Callable[[], None] | None:
    """One heartbeat that calls each given one (None: none given); each one's failure is
    logged on its own and does not keep the others from running."""
    given = [h for h in heartbeats if h is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def each() -> None:
        for h in given:
            beat(h)

    return each


def first_line(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


def _utc(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%H:%M:%S UTC")


class Outage:
    """One stretch of failed tries to reach something (the Ray dashboard, the Kubernetes
    API), tolerated for `window` seconds. A line when it starts and then once a minute says
    what is unreachable, since when, and until when it keeps trying; once the window is
    spent, failed() raises Unreachable. ok() ends the stretch (saying so).

    Between tries, pause(): backoff from 1 s up to 10 s, never past the window's end."""

    def __init__(self, what: str, window: float, consequence: str = "", log_every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.what, self.window, self.consequence, self.log_every = what, float(window), consequence, log_every
        self.clock, self.wall = clock, wall
        self.since: float | None = None
        self.since_wall = 0.0
        self.next_log = 0.0
        self.error = ""
        self.tries = 0
        self.backoff = Backoff(1.0, 1.5, 10.0)

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def left(self) -> float:
        return self.window if self.since is None else max(0.0, self.window - (self.clock() - self.since))

    def failed(self, exc: BaseException) -> None:
        now = self.clock()
        if self.since is None:
            self.since, self.since_wall, self.next_log, self.tries = now, self.wall(), now, 0
            self.backoff = Backoff(1.0, 1.5, 10.0)
        self.tries += 1
        self.error = f"{type(exc).__name__}: {first_line(exc)}"
        down = now - self.since
        if down >= self.window:
            raise Unreachable(
                f"{self.what} has been unreachable for {down:.0f}s (since {_utc(self.since_wall)}, {self.tries} tries), "
                f"longer than the {self.window:.0f}s tolerated (outage_tolerance_seconds); last error: {self.error}."
                + (f" {self.consequence}" if self.consequence else ""))
        if now >= self.next_log:
            self.next_log = now + self.log_every
            until = self.since_wall + self.window
            log(f"{self.what} unreachable since {_utc(self.since_wall)} ({down:.0f}s): {self.error}; "
                f"will keep trying until {_utc(until)} ({self.window - down:.0f}s more, outage_tolerance_seconds="
                f"{self.window:.0f}), then fail")

    def ok(self) -> None:
        if self.since is not None:
            log(f"{self.what} reachable again after {self.clock() - self.since:.0f}s ({self.tries} failed tries)")
            self.since = None

    def pause(self) -> float:
        """Seconds to wait before the next try."""
        return max(0.05, min(self.backoff.next(), self.left()))
