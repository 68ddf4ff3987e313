"""A Ray dashboard on loopback that a test controls: it serves the Ray Job REST API's
follow endpoints (status, logs, the log tail websocket, stop) for jobs the test sets, and can
refuse connections (nothing listens: connect gets ECONNREFUSED, as when a Service has no
endpoints; open log streams are cut) or hang them (accepts, never answers: a half-open
connection; open log streams stall). It records each request with its time.

The log tail behaves as Ray 2.52.1's (see runtime/kfp_ray/logtail.py): each connection sends the
log from its first byte, at most 10 lines a message, and closes once the job is over and its
log sent. A job set with `job_stream` has a log made on the fly as the stream is read (a job
printing hundreds of MB, none of it held), and ends once all of it was sent.

It stands in for the dashboard only; the follow code under test talks to it over real HTTP."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler

_JOB = re.compile(r"^/api/jobs/([^/]+)(/logs/tail|/logs|/stop)?/?$")
_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Dashboard:
    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.requests: list[tuple[float, str, str]] = []  # (time.time(), method, path)
        self.mode = "serve"
        self.port = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._streams: list[socket.socket] = []
        self._closed = False
        self.answer: tuple[int, str, str] | None = None  # (status, content type, body) for every request
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- the test's controls ----------------------------------------------------
    def job(self, job_id: str, status: str = "RUNNING", logs: str = "", message: str = "") -> None:
        """Set a job's state; a job already set keeps its start_time (the same run of it)."""
        with self._lock:
            start = (self.jobs.get(job_id) or {}).get("start_time") or int(time.time() * 1000) - 1000
            self.jobs[job_id] = {"status": status, "logs": logs, "message": message, "start_time": start,
                                 "end_time": None}
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                self.jobs[job_id]["end_time"] = int(time.time() * 1000)

    def job_stream(self, job_id: str, block: bytes, repeat: int) -> None:
        """A running job whose log is `block` `repeat` times, made as the log stream is read;
        the job SUCCEEDS once all of it was sent."""
        with self._lock:
            self.jobs[job_id] = {"status": "RUNNING", "logs": "", "message": "", "start_time": int(time.time() * 1000),
                                 "end_time": None, "block": block, "repeat": repeat, "sent": 0}

    def submitted_again(self, job_id: str, logs: str = "") -> None:
        """The job under the same id, started anew (a restarted head, KubeRay's submitter retrying):
        its open log streams are cut, as a restarted head's would be."""
        with self._lock:
            job = self.jobs[job_id]
            job.update(status="RUNNING", logs=logs, end_time=None, start_time=job["start_time"] + 60_000)
        self.cut_streams()

    def cut_streams(self) -> None:
        """Cut every open log stream (no close frame: a dropped connection)."""
        with self._lock:
            streams, self._streams = self._streams, []
        for conn in streams:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def refuse(self) -> None:
        """Stop listening: connects are refused."""
        with self._lock:
            self.mode = "refuse"
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self.cut_streams()

    def hang(self) -> None:
        """Accept connections and never answer."""
        with self._lock:
            self.mode = "hang"
        if self._listener is None:
            self._listen()

    def serve(self) -> None:
        with self._lock:
            self.mode = "serve"
            held, self._held = self._held, []
        for conn in held:
            conn.close()
        if self._listener is None:
            self._listen()

    def seen(self, method: str, suffix: str = "") -> list[float]:
        """Times (time.time()) of the requests seen with this method and path suffix."""
        with self._lock:
            return [t for t, m, p in self.requests if m == method and p.endswith(suffix)]

    def close(self) -> None:
        self._closed = True
        self.refuse()
        with self._lock:
            held, self._held = self._held, []
        for conn in held:
            conn.close()

    # --- plumbing -----------------------------------------------------------------
    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        sock.settimeout(0.05)  # so that the accept loop notices a refuse() promptly
        self.port = sock.getsockname()[1]
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, sock: socket.socket) -> None:
        while not self._closed and self._listener is sock:
            try:
                conn, addr = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if self.mode == "hang":
                    self._held.append(conn)
                    continue
            conn.settimeout(None)
            threading.Thread(target=_Handler, args=(conn, addr, self), daemon=True).start()

    def _answer(self, method: str, path: str) -> tuple[int, dict | str]:
        with self._lock:
            self.requests.append((time.time(), method, path))
            if self.answer is not None:
                return self.answer[0], (self.answer[1], self.answer[2])
            m = _JOB.match(path)
            job = self.jobs.get(m.group(1)) if m else None
            if job is None:
                return 404, f"Job {m.group(1) if m else path} does not exist"
            if m.group(2) == "/logs/tail":
                return 101, m.group(1)
            if m.group(2) == "/logs":
                return 200, {"logs": job["logs"] + (job["block"] * job["sent"]).decode() if "block" in job
                             else job["logs"]}
            if m.group(2) == "/stop" and method == "POST":
                stopped = job["status"] not in ("SUCCEEDED", "FAILED", "STOPPED")
                if stopped:
                    job.update(status="STOPPED", end_time=int(time.time() * 1000))
                return 200, {"stopped": stopped}
            return 200, {"submission_id": m.group(1), "status": job["status"], "message": job["message"],
                         "start_time": job["start_time"], "end_time": job["end_time"]}


    def _stream(self, conn: socket.socket, job_id: str) -> None:
        """The log tail: from the first byte, at most 10 lines a message, closed once the job is
        over and its log sent (Ray: job_manager.tail_job_logs, utils.file_tail_iterator)."""
        with self._lock:
            self._streams.append(conn)
        sent = 0  # bytes of the job's `logs` sent, or blocks of a job_stream
        try:
            while not self._closed:
                with self._lock:
                    job, mode = self.jobs.get(job_id), self.mode
                    if job is None:
                        return
                    if mode == "hang":  # a stalled connection delays bytes, never loses them
                        more = None
                    elif "block" in job:
                        more = job["block"] if sent < job["repeat"] else b""
                        if more:
                            sent += 1
                            job["sent"] = max(job["sent"], sent)
                        elif job["status"] == "RUNNING":
                            job.update(status="SUCCEEDED", end_time=int(time.time() * 1000))
                    else:
                        data = job["logs"].encode()
                        more, sent = data[sent:], len(data)
                    over = job["status"] in _TERMINAL
                if mode == "hang":
                    time.sleep(0.02)
                    continue
                if more:
                    lines = more.splitlines(keepends=True)
                    for i in range(0, len(lines), 10):
                        conn.sendall(_frame(0x1, b"".join(lines[i:i + 10])))
                elif over:
                    conn.sendall(_frame(0x8, struct.pack("!H", 1000)))
                    return
                else:
                    time.sleep(0.02)  # the stand-in's file_tail_iterator sleep (Ray's: 1 s)
        except OSError:
            return
        finally:
            with self._lock:
                if conn in self._streams:
                    self._streams.remove(conn)


def _frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked (server to client) websocket frame."""
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else b"\x7e" + struct.pack("!H", n) if n < 65536
                                     else b"\x7f" + struct.pack("!Q", n))
    return head + payload


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def _reply(self):
        code, body = self.server._answer(self.command, self.path)
        if code == 101 and self.headers.get("Upgrade", "").lower() == "websocket":
            accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + _WS_GUID).encode()).digest())
            self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
            self.wfile.flush()
            self.server._stream(self.connection, body)
            return
        if code == 101:
            code, body = 400, "not a websocket request"
        if isinstance(body, tuple):  # Dashboard.answer: (content type, body)
            ctype, body = body
        else:
            ctype = "application/json" if isinstance(body, dict) else "text/plain"
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _reply

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass
