"""A Ray job's log, read as it is written, through the dashboard's websocket
`/api/jobs/{id}/logs/tail` (what `JobSubmissionClient.tail_job_logs` reads).

Ray 2.52.1 (dashboard/modules/job: job_head.py `tail_job_logs`, job_agent.py, job_manager.py,
utils.py `file_tail_iterator`): the head relays the driver node's job agent, which reads the job's
log file from its first byte and sends what it reads, a text message of at most 10 lines or
~20,000 characters; once the job is over and the file is read to its end it closes the stream.
A job that ended before its driver started gets a stream closed at once.

Ray's tail has no offset: every connection starts again at the first byte. So after a dropped
connection LogTail reconnects and skips the bytes it has already received: no line is
duplicated or lost (unless the head restarted, which loses the job itself), at the cost of
reading the log once more from its start, per reconnect, never per poll."""

from __future__ import annotations

import select
import time

from .errors import AccessDenied, KfpRayError
from .wait import Backoff, first_line, is_transient

PUMP_BYTES = 2 << 20  # at most this much is read per poll ...
PUMP_SECONDS = 0.5  # ... and for at most this long, so the job's status is still checked often


class LogTail:
    """One job's log stream. `read()` returns the new bytes (never more than a budget);
    `ended` once Ray closed the stream; a dropped connection is reconnected by a later
    `read()` (after a backoff), skipping what was received before."""

    def __init__(self, dashboard_url: str, job_id: str, timeout: tuple[float, float] = (5.0, 30.0),
                 clock=time.monotonic):
        base = dashboard_url.rstrip("/")
        self.ws_url = "ws" + base[len("http"):] + f"/api/jobs/{job_id}/logs/tail"
        self.job_id, self.timeout, self.clock = job_id, timeout, clock
        self.received = 0  # bytes of the log received so far, over every connection
        self.connects = 0
        self.ended = False  # Ray closed the stream: the job is over and its log was sent to the end
        self.dropped: str | None = None  # why the last connection failed (None: connected or never tried)
        self._ws = None
        self._skip = 0
        self._retry_at = 0.0
        self._backoff = Backoff(1.0, 2.0, 30.0)

    # --- the connection -----------------------------------------------------------
    def _connect(self) -> None:
        import websocket

        try:
            # utf-8 is decoded (with replacement) by the reader: the pure-Python validation would cost
            # more than the rest of the read.
            ws = websocket.create_connection(self.ws_url, timeout=self.timeout[0], skip_utf8_validation=True)
        except websocket.WebSocketBadStatusException as exc:
            from .jobs import FIX_URL

            status = exc.status_code
            if status in (401, 403):
                raise AccessDenied(f"the Ray dashboard answered {status} to the log stream of job {self.job_id} "
                                   f"({self.ws_url}): something in front of it asks for credentials. Fix: {FIX_URL}",
                                   status) from None
            if status == 404 or status >= 500:  # the status poll says whether the job is lost
                raise ConnectionError(f"the log stream answered {status}") from None
            raise KfpRayError(f"the Ray dashboard answered {status} to the log stream of job {self.job_id} "
                              f"({self.ws_url}) instead of a websocket: dashboard_url may point at a proxy or "
                              f"another service. Fix: {FIX_URL}") from None
        ws.settimeout(self.timeout[1])
        self._ws, self._skip, self.dropped = ws, self.received, None
        self.connects += 1

    def _drop(self, exc: BaseException) -> None:
        self.close()
        self.dropped = f"{type(exc).__name__}: {first_line(exc)}"
        self._retry_at = self.clock() + self._backoff.next()

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.shutdown()  # no closing handshake: a hung dashboard must not delay a cancel's stop
            except Exception:  # noqa: BLE001 - it is gone either way
                pass

    def _pending(self) -> bool:
        sock = self._ws.sock
        if sock is None:
            return True  # closed under us: recv says how
        if getattr(sock, "pending", None) and sock.pending():  # TLS bytes already decrypted
            return True
        return bool(select.select([sock], [], [], 0)[0])

    # --- reading ------------------------------------------------------------------
    def read(self, wait: bool = False, budget_bytes: int = PUMP_BYTES, budget_s: float = PUMP_SECONDS
             ) -> tuple[list[bytes], bool]:
        """(new log bytes, more waiting). Without `wait` only what has already arrived is
        read (the poll loop never blocks on a quiet log); with it, it waits up to the read
        timeout for the next message. A connection error drops the stream (reconnected by a
        later read) and returns what was read; a refusal no retry can fix (401/403, no
        websocket) raises."""
        import websocket

        chunks: list[bytes] = []
        if self.ended:
            return chunks, False
        if self._ws is None:
            if self.clock() < self._retry_at:
                return chunks, False
            try:
                self._connect()
            except Exception as exc:  # noqa: BLE001 - classified
                if not is_transient(exc) and not isinstance(exc, (websocket.WebSocketException, OSError)):
                    raise
                self._drop(exc)
                return chunks, False
        got, end = 0, self.clock() + budget_s
        try:
            while got < budget_bytes and self.clock() < end:
                if not wait and not self._pending():
                    return chunks, False
                opcode, frame = self._ws.recv_data_frame(control_frame=True)
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    self.ended = True
                    self.close()
                    return chunks, False
                if opcode not in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
                    continue
                data = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
                if self._skip:  # a reconnect: Ray starts again at the first byte
                    cut = min(self._skip, len(data))
                    data, self._skip = data[cut:], self._skip - cut
                if data:
                    chunks.append(data)
                    got += len(data)
                    self.received += len(data)
                    self._backoff = Backoff(1.0, 2.0, 30.0)
        except (websocket.WebSocketException, OSError) as exc:
            self._drop(exc)
            return chunks, False
        return chunks, True
