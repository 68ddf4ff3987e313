"""HTTP(S) for the sandbox's API server, served by werkzeug (a real WSGI server).

The transport is werkzeug's: request parsing, chunked request bodies, chunked response
streams (watches), `Connection: close` after every answer, and the drain of any request
body the application did not read. What is ours is small and said here:
- TLS: the handshake runs in the connection's own thread (werkzeug would do it in the
  accept loop, where one silent client stalls every other), bounded by a timeout;
- an injected connection reset (fault `api.resets`) ends the connection with a TCP RST
  and no answer, as a dropped load balancer does;
- quiet logs: clients that hang up are not server errors.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0  # a connection that sends nothing for this long is closed

log = logging.getLogger("sandbox.apiserver")


class ConnectionReset(ConnectionResetError):
    """Raised by the application to end the request with a TCP RST and no answer."""


def reset_connection(environ: dict) -> None:
    """Arrange an RST: linger 0, then close once werkzeug lets go of the socket."""
    sock = environ["werkzeug.socket"]
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # marks it closed; the real close (the RST) comes when its streams close
    raise ConnectionReset("connection reset by fault injection")


class _Handler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT

    def connection_dropped(self, error, environ=None):
        # A reset we injected, or a client gone mid-answer: nothing more on this connection.
        self.close_connection = True

    def log_request(self, code="-", size="-"):
        pass

    def log_error(self, format, *args):  # noqa: A002
        log.debug("http: " + format, *args)

    def log_message(self, format, *args):  # noqa: A002
        pass


class _Server(ThreadedWSGIServer):
    daemon_threads = True

    def __init__(self, host, port, app, tls):
        super().__init__(host, port, app, handler=_Handler)
        self.tls = tls
        # Set after init: werkzeug would wrap the listening socket and handshake in accept().
        self.ssl_context = tls

    def finish_request(self, request, client_address):
        conn = request
        try:
            if self.tls is not None:
                request.settimeout(HANDSHAKE_TIMEOUT)
                conn = self.tls.wrap_socket(request, server_side=True)
                conn.settimeout(None)
            self.RequestHandlerClass(conn, client_address, self)
        finally:
            if conn is not request:
                conn.close()

    def handle_error(self, request, client_address):
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def log(self, type, message, *args):  # noqa: A002
        log.debug("werkzeug %s: " + message, type, *args)


class HttpServer:
    """Serves a WSGI app on host:port (0: a free port) in a background thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, tls=None):
        self._server = _Server(host, port, app, tls)
        self.scheme = "https" if tls is not None else "http"
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return host, port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"{self.scheme}://{host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="apiserver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()  # long answers (watches) end their streams
        self._server.shutdown()
        self._server.server_close()
