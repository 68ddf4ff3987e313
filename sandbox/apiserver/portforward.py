"""pods/portforward: each forwarded connection reaches the pod's port (the kubelet's pod_port),
over the kubelet's WebSocket channel protocol (the python client) or SPDY/3.1 streams, tunneled
through a WebSocket (kubectl 1.37) or on a plain SPDY upgrade (cri/streaming/portforward, v1.31)."""

from __future__ import annotations

import socket
import threading

from . import spdy
from .connections import Upgraded
from .websocket import WebSocket


class PortForward:
    """One port-forward WebSocket: for each port asked, one connection to the pod's port
    (the kubelet's pod_port), bytes both ways until either side closes it."""

    def __init__(self, ws: WebSocket, kubelet, pod: dict, ports: list[int]):
        self.ws, self.kubelet, self.pod, self.ports = ws, kubelet, pod, ports
        self.conns: dict[int, socket.socket] = {}

    def run(self) -> None:
        try:
            self._run()
        finally:
            for conn in self.conns.values():
                conn.close()
            self.ws.close()
        raise Upgraded("port-forward session ended")

    def _run(self) -> None:
        for i, port in enumerate(self.ports):
            prefix = port.to_bytes(2, "little")
            self.ws.send(bytes([2 * i]) + prefix)
            self.ws.send(bytes([2 * i + 1]) + prefix)
        pumps = []
        for i, port in enumerate(self.ports):
            where = self.kubelet.pod_port(self.pod, port)
            error = None
            if where is None:
                error = _refused(self.pod, port)
            else:
                try:
                    self.conns[i] = socket.create_connection(where, timeout=10)
                    self.conns[i].settimeout(None)
                except OSError:
                    error = _refused(self.pod, port)
            if error is not None:
                self.ws.send(bytes([2 * i + 1]) + error.encode())
                continue
            t = threading.Thread(target=self._pump, args=(i,), daemon=True)
            t.start()
            pumps.append(t)
        if not pumps:
            return
        while True:
            message = self.ws.receive()
            if message is None:
                return
            if len(message) < 2:
                continue
            channel, data = message[0], message[1:]
            conn = self.conns.get(channel // 2)
            if channel % 2 == 0 and conn is not None:
                try:
                    conn.sendall(data)
                except OSError:
                    return

    def _pump(self, i: int) -> None:
        conn = self.conns[i]
        try:
            while True:
                data = conn.recv(65536)
                if not data or not self.ws.send(bytes([2 * i]) + data):
                    break
        except OSError:
            pass
        self.ws.close()  # the pod's side ended: as the kubelet, end the stream


def _refused(pod: dict, port: int) -> str:
    """The text the kubelet (CRI-O's PortForward) writes on the error channel for a port that
    does not listen in the pod."""
    uid = pod["metadata"]["uid"]
    return (f"error forwarding port {port} to pod {uid}, uid : failed to execute portforward in network namespace "
            f'"/var/run/netns/{uid}": failed to connect to localhost:{port} inside namespace "{uid}", IPv4: dial tcp4 '
            f"127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6: address localhost: no suitable address ")


class _Pair:
    """One forwarded connection: its error and data streams and the pod-side socket."""

    def __init__(self, port: int):
        self.port = port
        self.error_id = self.data_id = 0
        self.conn: socket.socket | None = None
        self.ended = False


class SpdyPortForward:
    """kubectl port-forward's session: SPDY streams in pairs, each pair one TCP connection to
    the pod's port (the kubelet's pod_port), until either side ends it or the client leaves."""

    def __init__(self, ws: WebSocket, kubelet, pod: dict):
        self.ws, self.kubelet, self.pod = ws, kubelet, pod
        self.reader, self.writer = spdy.Reader(), spdy.Writer()
        self.lock = threading.Lock()  # the header compressor's context and the pairs
        self.pairs: dict[str, _Pair] = {}  # requestID -> pair
        self.by_stream: dict[int, _Pair] = {}

    def run(self) -> None:
        try:
            self._run()
        except spdy.ProtocolError:
            pass
        finally:
            with self.lock:
                pairs = list(self.pairs.values())
            for pair in pairs:
                if pair.conn is not None:
                    pair.conn.close()
            self.ws.close()
        raise Upgraded("port-forward session ended")

    def _run(self) -> None:
        while True:
            message = self.ws.receive()
            if message is None:
                return
            for frame in self.reader.feed(message):
                if frame.type == spdy.SYN_STREAM:
                    self._stream(frame)
                elif frame.type == 0:
                    self._data(frame)
                elif frame.type == spdy.RST_STREAM:
                    self._end(self.by_stream.get(frame.stream_id))
                elif frame.type == spdy.PING:
                    self.ws.send(self.writer.ping(frame.value))
                elif frame.type == spdy.GOAWAY:
                    return

    def _stream(self, frame) -> None:
        with self.lock:
            self.ws.send(self.writer.syn_reply(frame.stream_id))
            headers = {k: v[0] for k, v in frame.headers.items()}
            request = headers.get("requestid", str(frame.stream_id))
            try:
                port = int(headers.get("port", ""))
            except ValueError:
                port = 0
            pair = self.pairs.setdefault(request, _Pair(port))
            self.by_stream[frame.stream_id] = pair
            if headers.get("streamtype") == "error":
                pair.error_id = frame.stream_id
            else:
                pair.data_id = frame.stream_id
            ready = pair.error_id and pair.data_id
        if ready:
            self._connect(pair)

    def _connect(self, pair: _Pair) -> None:
        where = self.kubelet.pod_port(self.pod, pair.port) if 0 < pair.port < 65536 else None
        try:
            if where is None:
                raise OSError
            pair.conn = socket.create_connection(where, timeout=10)
            pair.conn.settimeout(None)
        except OSError:
            self.ws.send(self.writer.data(pair.error_id, _refused(self.pod, pair.port).encode()))
            self._end(pair)
            return
        threading.Thread(target=self._pump, args=(pair,), daemon=True, name=f"portforward-{pair.port}").start()

    def _data(self, frame) -> None:
        pair = self.by_stream.get(frame.stream_id)
        if pair is None or frame.stream_id != pair.data_id or pair.conn is None:
            return
        try:
            if frame.data:
                pair.conn.sendall(frame.data)
            if frame.fin:  # the local client closed its side
                pair.conn.shutdown(socket.SHUT_WR)
        except OSError:
            self._end(pair)

    def _pump(self, pair: _Pair) -> None:
        conn = pair.conn
        try:
            while True:
                data = conn.recv(65536)
                if not data or not self.ws.send(self.writer.data(pair.data_id, data)):
                    break
        except OSError:
            pass
        self._end(pair)

    def _end(self, pair: _Pair | None) -> None:
        """Both streams end (FIN), as the kubelet closes them once the connection is done."""
        if pair is None:
            return
        with self.lock:
            if pair.ended:
                return
            pair.ended = True
        for stream_id in (pair.data_id, pair.error_id):
            if stream_id:
                self.ws.send(self.writer.data(stream_id, b"", fin=True))
        if pair.conn is not None:
            pair.conn.close()
