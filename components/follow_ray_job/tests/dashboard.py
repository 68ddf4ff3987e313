"""A Ray dashboard on loopback that a test controls: it serves the Ray Job REST API's
follow endpoints (status, logs, stop) for jobs the test sets, and can refuse connections
(nothing listens: connect gets ECONNREFUSED, as when a Service has no endpoints) or hang them
(accepts, never answers: a half-open connection). It records each request with its time.

It stands in for the dashboard only; the follow code under test talks to it over real HTTP."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

_JOB = re.compile(r"^/api/jobs/([^/]+)(/logs|/stop)?/?$")


class Dashboard:
    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.requests: list[tuple[float, str, str]] = []  # (time.time(), method, path)
        self.mode = "serve"
        self.port = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._closed = False
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

    def submitted_again(self, job_id: str, logs: str = "") -> None:
        """The job under the same id, started anew (a restarted head, KubeRay's submitter retrying)."""
        with self._lock:
            job = self.jobs[job_id]
            job.update(status="RUNNING", logs=logs, end_time=None, start_time=job["start_time"] + 60_000)

    def refuse(self) -> None:
        """Stop listening: connects are refused."""
        with self._lock:
            self.mode = "refuse"
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

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
            m = _JOB.match(path)
            job = self.jobs.get(m.group(1)) if m else None
            if job is None:
                return 404, f"Job {m.group(1) if m else path} does not exist"
            if m.group(2) == "/logs":
                return 200, {"logs": job["logs"]}
            if m.group(2) == "/stop" and method == "POST":
                stopped = job["status"] not in ("SUCCEEDED", "FAILED", "STOPPED")
                if stopped:
                    job.update(status="STOPPED", end_time=int(time.time() * 1000))
                return 200, {"stopped": stopped}
            return 200, {"submission_id": m.group(1), "status": job["status"], "message": job["message"],
                         "start_time": job["start_time"], "end_time": job["end_time"]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def _reply(self):
        code, body = self.server._answer(self.command, self.path)
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _reply

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass
