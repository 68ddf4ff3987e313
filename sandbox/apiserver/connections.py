"""The upgraded connections exec and port-forward sessions run on, besides the WebSocket
(websocket.py): a plain SPDY/3.1 upgrade (kubectl's fallback), and how a session ends."""

from __future__ import annotations

import threading

from .websocket import SESSIONS, SocketWriter


class Upgraded(ConnectionError):
    """Raised once a session ended on an upgraded connection: werkzeug must write nothing more
    on it (it treats a ConnectionError as a dropped connection)."""


class RawConnection(SocketWriter):
    """An HTTP connection upgraded to SPDY/3.1 (httpstream's Handshake, as the kubelet answers
    it): the SPDY byte stream directly on the socket, with WebSocket's send/receive/close."""

    def __init__(self, environ: dict, protocol: str):
        self.sock, self.rfile = environ["werkzeug.socket"], environ["wsgi.input"]
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self.sock.settimeout(None)
        self.sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                           f"X-Stream-Protocol-Version: {protocol}\r\n\r\n").encode())
        self._sessions = environ.get(SESSIONS)
        if self._sessions is not None:
            self._sessions.add(self)

    def send(self, data: bytes) -> bool:
        return self._write(data)

    def receive(self) -> bytes | None:
        if self.closed.is_set():
            return None
        return self._read_chunk() or None

    def close(self) -> None:
        with self._lock:
            self.closed.set()
        self._hang_up()
