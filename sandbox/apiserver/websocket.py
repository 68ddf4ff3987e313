"""The server side of a WebSocket (RFC 6455) on a connection werkzeug has parsed the request of.

The framing is wsproto's (its sans-IO FrameProtocol); what is ours is the handshake answer on
the raw socket (werkzeug would add `Connection: close` to a 101 it sends itself), one reader
(`receive`) and any number of writers (`send`, serialised by a lock).
"""

from __future__ import annotations

import socket
import threading

from wsproto.frame_protocol import CloseReason, FrameProtocol, Opcode, ParseFailed
from wsproto.utilities import generate_accept_token

_CLOSED = object()
SESSIONS = "sandbox.websockets"  # environ key: the set of the server's open WebSockets


def requested(headers) -> bool:
    """Whether the request asks to upgrade to a WebSocket (client-go, websocket-client)."""
    connection = [t.strip().lower() for t in (headers.get("Connection") or "").split(",")]
    return "upgrade" in connection and (headers.get("Upgrade") or "").lower() == "websocket"


def offered_protocols(headers) -> list[str]:
    return [p.strip() for p in (headers.get("Sec-WebSocket-Protocol") or "").split(",") if p.strip()]


class SocketWriter:
    """Writes to an upgraded connection's socket, one writer at a time; after a failed write
    the connection counts as closed (`sock`, `_lock` and `closed` are the subclass's)."""

    def _write(self, raw: bytes) -> bool:
        with self._lock:
            if self.closed.is_set():
                return False
            try:
                self.sock.sendall(raw)
                return True
            except OSError:
                self.closed.set()
                return False

    def _read_chunk(self) -> bytes:
        """What the client sent next (werkzeug's buffered reader first); b"" once it is gone."""
        try:
            return self.rfile.read1(65536)
        except (OSError, ValueError):
            return b""

    def _hang_up(self) -> None:
        """End the connection both ways and leave the server's live sessions."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._sessions is not None:
            self._sessions.discard(self)


class WebSocket(SocketWriter):
    """One accepted WebSocket: whole messages in, binary messages out."""

    def __init__(self, environ: dict, protocol: str):
        self.sock = environ["werkzeug.socket"]
        self.rfile = environ["wsgi.input"]  # werkzeug's buffered reader: bytes already read stay there
        self.protocol = protocol
        self._frames = FrameProtocol(client=False, extensions=[])
        self._lock = threading.Lock()
        self.closed = threading.Event()
        key = environ.get("HTTP_SEC_WEBSOCKET_KEY", "")
        answer = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {generate_accept_token(key.encode()).decode()}\r\n"
                  + (f"Sec-WebSocket-Protocol: {protocol}\r\n" if protocol else "") + "\r\n")
        self.sock.settimeout(None)  # a session lasts as long as its command or its client
        self.sock.sendall(answer.encode())
        self._message: list = []
        # the server's live sessions (ApiServer.stop closes them: nothing outlives the server)
        self._sessions = environ.get(SESSIONS)
        if self._sessions is not None:
            self._sessions.add(self)

    def send(self, data: bytes) -> bool:
        """One binary message; False once the connection is gone."""
        return self._write(self._frames.send_data(bytes(data), fin=True))

    def receive(self) -> bytes | None:
        """The next whole data message (text as UTF-8 bytes), answering pings; None once the
        client closed, or the connection ended."""
        while True:
            try:
                message = self._next_message()
            except ParseFailed:
                self.close(CloseReason.PROTOCOL_ERROR)
                return None
            if message is not None:
                return message if message is not _CLOSED else None
            if self.closed.is_set():
                return None
            chunk = self._read_chunk()
            if not chunk:
                self.closed.set()
                return None
            try:
                self._frames.receive_bytes(chunk)
            except ParseFailed:
                self.close(CloseReason.PROTOCOL_ERROR)
                return None

    def _next_message(self):
        """A whole message from the frames received so far, _CLOSED, or None: more bytes needed."""
        for frame in self._frames.received_frames():
            if frame.opcode is Opcode.PING:
                self._write(self._frames.pong(frame.payload))
            elif frame.opcode is Opcode.CLOSE:
                self.close()
                return _CLOSED
            elif frame.opcode is not Opcode.PONG:
                part = frame.payload
                self._message.append(part.encode() if isinstance(part, str) else bytes(part))
                if frame.message_finished:
                    data, self._message = b"".join(self._message), []
                    return data
        return None

    def close(self, code: int = CloseReason.NORMAL_CLOSURE) -> None:
        """Send a close frame (once) and end the connection both ways."""
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
            try:
                self.sock.sendall(self._frames.close(code))
            except (OSError, ParseFailed):
                pass
        self._hang_up()
