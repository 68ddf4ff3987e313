"""Polling with backoff, bounded retries of transient failures, and progress lines."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from .redact import redact

T = TypeVar("T")


def log(msg: str) -> None:
    """A progress line in the task log (stdout, flushed, secrets redacted)."""
    print(f"[kfp-ray] {redact(msg)}", file=sys.stdout, flush=True)


class Backoff:
    """Delays that start small and grow to a cap (jittered so tasks do not march in step)."""

    def __init__(self, initial: float = 0.2, factor: float = 1.6, cap: float = 5.0):
        self.delay, self.factor, self.cap = initial, factor, cap

    def next(self) -> float:
        d = self.delay
        self.delay = min(self.cap, self.delay * self.factor)
        return d * random.uniform(0.9, 1.1)


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
                "RemoteDisconnected", "ReadTimeoutError", "Timeout", "ConnectTimeout", "ReadTimeout", "ChunkedEncodingError"):
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
          sleep: Callable[[float], None] = time.sleep) -> T:
    """Call fn, retrying transient failures up to `attempts` times with backoff."""
    backoff = backoff or Backoff(0.3, 2.0, 5.0)
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            if attempt == attempts or not is_transient(exc):
                raise
            delay = backoff.next()
            log(f"{what}: transient error ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); "
                f"retry {attempt}/{attempts - 1} in {delay:.1f}s")
            sleep(delay)
    raise AssertionError("unreachable")


def beat(heartbeat: Callable[[], None] | None) -> None:
    """Call a wait loop's heartbeat (e.g. a lease renewal) once. Its failures are logged
    and never end the wait; a cancellation (SIGTERM) still does."""
    if heartbeat is None:
        return
    from .errors import Cancelled

    try:
        heartbeat()
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - a heartbeat must not kill the task it serves
        log(f"heartbeat failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}); going on")


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
