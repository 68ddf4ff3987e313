"""pods/exec, pods/attach and pods/portforward: the kubelet's streaming sessions, over WebSocket and SPDY.

What kube-apiserver v1.31 and the kubelet serve, as far as kubectl 1.37 and the kubernetes
python client use it:
- exec over WebSocket, subprotocol v5.channel.k8s.io (kubectl; the apiserver's stream
  translator, feature TranslateStreamCloseWebsocketRequests, on by default since v1.30) or
  v4.channel.k8s.io (the python client): each binary message is one channel byte then data:
  0 stdin, 1 stdout, 2 stderr, 3 error (one metav1.Status when the command ends: Success, or
  Failure/NonZeroExitCode with an ExitCode cause, as kubelet's cri/streaming/remotecommand
  writes it), 4 resize; v5 adds channel 255, where [255, c] closes stream c (stdin's EOF).
- port-forward over WebSocket, the kubelet's channel protocol (cri/streaming/portforward/
  websocket.go, the python client's `portforward`): ports=P1,P2 in the query; channels 2i
  (data) and 2i+1 (error) for the i-th port, each opened by a message of its port number
  (2 bytes, little endian); one connection per WebSocket.
- port-forward as kubectl 1.37 does it: SPDY/3.1 tunneled through a WebSocket (spdy.py):
  per connection, an error stream and a data stream with headers streamType, port and
  requestID (the kubelet's cri/streaming/portforward/httpstream.go pairs them); the data
  stream carries the bytes, the error stream the kubelet's error text, then both end (FIN).
- Authorization (v1.31, before the AuthorizePodWebsocketUpgradeCreatePermission gate of
  v1.35): a WebSocket GET needs `get` on the subresource, a POST (SPDY) `create`.
- SPDY/3.1 upgrades (kubectl's fallback when a WebSocket is refused, or with
  KUBECTL_REMOTE_COMMAND_WEBSOCKETS / KUBECTL_PORT_FORWARD_WEBSOCKETS=false): exec over
  remotecommand v4 (a stream per streamType), port-forward over portforward.k8s.io.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import socket
import subprocess
import threading

from . import errors, spdy
from .errors import ApiError
from .websocket import SESSIONS, WebSocket, offered_protocols, requested

SUBRESOURCES = ("exec", "attach", "portforward")
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
PORTFORWARD_PROTOCOLS = ("v4.channel.k8s.io", "channel.k8s.io", "")
PORTFORWARD_SPDY = "portforward.k8s.io"
EXEC_SPDY = "v4.channel.k8s.io"  # of the kubelet's SPDY protocols, the one the sandbox speaks (v4)
TUNNELED_SPDY = "SPDY/3.1+portforward.k8s.io"  # client-go tools/portforward, tunneling dialer
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
NON_ZERO_EXIT_CODE = "NonZeroExitCode"  # remotecommand.NonZeroExitCodeReason
EXIT_CODE_CAUSE = "ExitCode"  # remotecommand.ExitCodeCauseType
PUMP_JOIN_S = 5.0  # how long the output pumps may drain once the command ended
STREAMS_TIMEOUT_S = 30.0  # the kubelet's streamCreationTimeout: all streams asked for must be open by then
STREAM_TYPES = {0: "stdin", 1: "stdout", 2: "stderr", 3: "error", 4: "resize"}  # SPDY streamType per channel
CONTAINER_CHECK_S = 1.0  # how often a running exec checks that its container still runs


class Upgraded(ConnectionError):
    """Raised once a session ended on an upgraded connection: werkzeug must write nothing more
    on it (it treats a ConnectionError as a dropped connection)."""


def verb(method: str) -> str:
    """The RBAC verb a connect request is authorized as (apiserver v1.31)."""
    return "get" if method == "GET" else "create"


def client_left(sock) -> bool:
    """Whether the client of a streamed answer hung up: it sends nothing after its request,
    so a readable connection is one that ended."""
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _flag(query: dict, key: str, default: bool = False) -> bool:
    values = query.get(key)
    if not values:
        return default
    return values[0].lower() in ("1", "true", "t", "y", "yes")


def container_of(pod: dict, query: dict) -> str:
    """The container a request names, checked as the pod registry's streamLocation (v1.31)."""
    name = pod["metadata"]["name"]
    containers = pod["spec"].get("containers") or []
    inits = pod["spec"].get("initContainers") or []
    container = (query.get("container") or [""])[0]
    if not container:
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        if len(containers) > 1:
            msg = (f"a container name must be specified for pod {name}, choose one of: "
                   f"[{' '.join(c['name'] for c in containers)}]")
            if inits:
                msg += f" or one of the init containers: [{' '.join(c['name'] for c in inits)}]"
            raise errors.bad_request(msg)
        container = containers[0]["name"]
    elif not any(c.get("name") == container for c in [*containers, *inits]):
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    if not pod["spec"].get("nodeName"):
        raise errors.bad_request(f"pod {name} does not have a host assigned")
    return container


def prepare(kubelet, sub: str, pod: dict, query: dict, headers):
    """Check the request and return the session to run once upgraded (environ -> None).
    Raises ApiError for what the apiserver answers before any upgrade."""
    if sub == "attach":
        # The container's main process is Ray's, started with no stdin: what attach shows is
        # what it writes, as `kubectl logs -f` does; the sandbox offers no attach.
        raise errors.bad_request("the sandbox does not attach to a container's main process: use "
                                 "`kubectl logs -f` for its output")
    websocket = requested(headers)
    spdy_upgrade = (headers.get("Upgrade") or "").lower().startswith("spdy/3.1")
    if not (websocket or spdy_upgrade):
        raise errors.bad_request("Upgrade request required")
    offered = offered_protocols(headers) if websocket else [
        p.strip() for p in (headers.get("X-Stream-Protocol-Version") or "").split(",") if p.strip()]
    if sub == "portforward":
        if not websocket or TUNNELED_SPDY in offered:  # kubectl port-forward: SPDY, tunneled or not
            protocol = TUNNELED_SPDY if websocket else _negotiate(offered, [PORTFORWARD_SPDY])
            connect = WebSocket if websocket else RawConnection
            return lambda environ: SpdyPortForward(connect(environ, protocol), kubelet, pod).run()
        ports = _ports(query)
        protocol = next((p for p in PORTFORWARD_PROTOCOLS if p in offered or (p == "" and not offered)), None)
        if protocol is None:
            raise errors.bad_request(f"websocket protocol not supported: {', '.join(offered)}")
        return lambda environ: PortForward(WebSocket(environ, protocol), kubelet, pod, ports).run()
    container = container_of(pod, query)
    if websocket:
        protocol = next((p for p in EXEC_PROTOCOLS if p in offered), None)
        if protocol is None:
            raise errors.bad_request(f"websocket protocol not supported: {', '.join(offered) or 'none'}; "
                                     f"the sandbox serves {', '.join(EXEC_PROTOCOLS)}")
    else:
        protocol = _negotiate(offered, [EXEC_SPDY])
    stdin, stdout, stderr, tty = (_flag(query, "stdin"), _flag(query, "stdout", True), _flag(query, "stderr", True),
                                  _flag(query, "tty"))
    if not (stdin or stdout or stderr):
        raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
    command = query.get("command") or []
    if not command:
        raise errors.bad_request("you must specify at least one command for the container")
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    # the streams the kubelet waits for before it runs the command (remotecommand v4)
    expected = {"error", *(["stdin"] if stdin else []), *(["stdout"] if stdout else []),
                *(["stderr"] if stderr and not tty else []), *(["resize"] if tty else [])}

    def session(environ):
        transport = (_Channels(WebSocket(environ, protocol)) if websocket
                     else _SpdyStreams(RawConnection(environ, protocol), expected))
        Exec(transport, kubelet, ns, name, container, command, stdin, stdout, stderr, tty).run()
    return session


def _negotiate(offered: list[str], served: list[str]) -> str:
    """httpstream.Handshake: the first protocol of the client's the server accepts."""
    chosen = next((p for p in offered if p in served), None)
    if chosen is None:
        raise ApiError(403, "Forbidden", f"unable to upgrade: unable to negotiate protocol: client supports "
                                         f"{offered}, server accepts {served}")
    return chosen


def _ports(query: dict) -> list[int]:
    """ports=P (repeated or comma separated), as the kubelet's portforward.NewV4Options reads them."""
    out = []
    for value in query.get("ports") or []:
        for part in value.split(","):
            try:
                port = int(part)
            except ValueError:
                raise errors.bad_request(f'unable to parse "{part}" as a port: invalid syntax') from None
            if not 0 < port < 65536:
                raise errors.bad_request(f"port {port} must be > 0")
            out.append(port)
    if not out:
        raise errors.bad_request("query parameter \"port\" is required")
    return out


def status_json(code: int | None, command: list[str], error: str | None = None) -> bytes:
    """The error channel's metav1.Status, as kubelet's ServeExec writes it."""
    if error is not None:
        return json.dumps(errors.internal(error).status()).encode()
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    return json.dumps({"metadata": {}, "status": "Failure",
                       # CRI-O's ExecContainer answers an ExitErrorWrapper of Go's exec.ExitError
                       "message": f"command terminated with non-zero exit code: exit status {code}",
                       "reason": NON_ZERO_EXIT_CODE,
                       "details": {"causes": [{"reason": EXIT_CODE_CAUSE, "message": str(code)}]}}).encode()


class Exec:
    """One exec: the command runs in the container's environment (the kubelet's exec_target),
    its output goes out on its streams while it runs, its exit status on the error stream.
    A client that goes away kills it; nothing it started outlives the session. The streams
    are WebSocket channels (_Channels) or SPDY streams (_SpdyStreams)."""

    def __init__(self, transport, kubelet, namespace, name, container, command, stdin, stdout, stderr, tty):
        self.transport, self.kubelet = transport, kubelet
        self.namespace, self.name, self.container, self.command = namespace, name, container, list(command)
        self.stdin, self.stdout, self.stderr, self.tty = stdin, stdout, stderr, tty
        self.proc: subprocess.Popen | None = None
        self.input: queue.Queue = queue.Queue()  # stdin from the client; None: its end
        self.gone = threading.Event()  # the client left

    def run(self) -> None:
        threading.Thread(target=self._read_client, daemon=True, name=f"exec-in-{self.name}").start()
        try:
            if self.transport.ready.wait(STREAMS_TIMEOUT_S) and not self.gone.is_set():
                self._run()
        finally:
            self._kill()
            self.input.put(None)
            self.transport.close()
        raise Upgraded("exec session ended")

    def _run(self) -> None:
        try:
            env, cwd, enter = self.kubelet.exec_target(self.namespace, self.name, self.container)
        except LookupError:
            self._status(None, f'unable to upgrade connection: container not found ("{self.container}")')
            return
        try:
            self.proc = subprocess.Popen(
                enter + self.command, env=env, cwd=cwd, start_new_session=True,
                stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.stdout else subprocess.DEVNULL,
                # a TTY has one output stream: stderr goes to stdout's
                stderr=(subprocess.STDOUT if self.tty else subprocess.PIPE) if self.stderr else subprocess.DEVNULL)
        except OSError as exc:
            # what the runtime answers for a command it cannot start (runc's exec error)
            self._status(None, "error executing command in container: failed to exec in container: "
                               f"exec: \"{self.command[0]}\": {exc.strerror or exc}")
            return
        if self.gone.is_set():
            return
        threads = [threading.Thread(target=self._pump, args=(stream, channel), daemon=True)
                   for stream, channel in ((self.proc.stdout, STDOUT), (self.proc.stderr, STDERR)) if stream is not None]
        if self.proc.stdin is not None:
            threading.Thread(target=self._feed, daemon=True).start()
        for t in threads:
            t.start()
        while True:  # the command ends, or its container does (the kubelet stops what runs in it)
            try:
                code = self.proc.wait(timeout=CONTAINER_CHECK_S)
                break
            except subprocess.TimeoutExpired:
                if self.kubelet.pod_pids(self.namespace, self.name) is None:
                    self._kill()
        self._kill()  # what it left behind holds no pipe open
        for t in threads:
            t.join(PUMP_JOIN_S)
        self._status(128 - code if code < 0 else code, None)

    def _status(self, code, error) -> None:
        self.transport.send(ERROR, status_json(code, self.command, error))
        self.transport.end(ERROR)

    def _pump(self, stream, channel: int) -> None:
        fd = stream.fileno()
        try:
            while True:
                data = os.read(fd, 65536)
                if not data or not self.transport.send(channel, data):
                    break
        except OSError:
            pass
        finally:
            stream.close()
        self.transport.end(channel)

    def _feed(self) -> None:
        stdin = self.proc.stdin
        while True:
            data = self.input.get()
            if data is None:
                break
            try:
                stdin.write(data)
                stdin.flush()
            except (OSError, ValueError):
                break
        try:
            stdin.close()
        except OSError:
            pass

    def _read_client(self) -> None:
        """stdin and its end from the client; its leaving kills the command."""
        self.transport.read(self.input)
        self.gone.set()
        self.transport.ready.set()
        self._kill()

    def _kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class _Channels:
    """exec's streams over a WebSocket: each message is a channel byte, then data (v4, v5)."""

    def __init__(self, ws: WebSocket):
        self.ws = ws
        self.ready = threading.Event()
        self.ready.set()

    def send(self, channel: int, data: bytes) -> bool:
        return self.ws.send(bytes([channel]) + data)

    def end(self, channel: int) -> None:
        """A channel ends with the connection (v5's close signal goes client to server only)."""

    def read(self, stdin: queue.Queue) -> None:
        while True:
            message = self.ws.receive()
            if message is None:
                return
            if not message:
                continue
            channel, data = message[0], message[1:]
            if channel == STDIN:
                stdin.put(data)
            elif channel == CLOSE and self.ws.protocol.startswith("v5.") and data[:1] == bytes([STDIN]):
                stdin.put(None)

    def close(self) -> None:
        self.ws.close()


class _SpdyStreams:
    """exec's streams over SPDY (kubectl's fallback; the kubelet's remotecommand v4): the client
    opens one stream per type (header streamType), each answered with a SYN_REPLY; the command
    starts once all it asked for are open; each stream ends with a FIN."""

    def __init__(self, conn: RawConnection, expected: set[str]):
        self.conn, self.expected = conn, expected
        self.reader, self.writer = spdy.Reader(), spdy.Writer()
        self.ids: dict[str, int] = {}
        self.ready = threading.Event()

    def send(self, channel: int, data: bytes) -> bool:
        stream_id = self.ids.get(STREAM_TYPES[channel])
        return stream_id is not None and self.conn.send(self.writer.data(stream_id, data))

    def end(self, channel: int) -> None:
        stream_id = self.ids.get(STREAM_TYPES[channel])
        if stream_id is not None:
            self.conn.send(self.writer.data(stream_id, b"", fin=True))

    def read(self, stdin: queue.Queue) -> None:
        while True:
            message = self.conn.receive()
            if message is None:
                return
            try:
                frames = self.reader.feed(message)
            except spdy.ProtocolError:
                return
            for frame in frames:
                if frame.type == spdy.SYN_STREAM:
                    self.conn.send(self.writer.syn_reply(frame.stream_id))
                    self.ids[(frame.headers.get("streamtype") or [""])[0]] = frame.stream_id
                    if self.expected <= set(self.ids):
                        self.ready.set()
                elif frame.type == 0 and frame.stream_id == self.ids.get("stdin"):
                    if frame.data:
                        stdin.put(frame.data)
                    if frame.fin:
                        stdin.put(None)
                elif frame.type == spdy.PING:
                    self.conn.send(self.writer.ping(frame.value))
                elif frame.type == spdy.GOAWAY:
                    return

    def close(self) -> None:
        self.conn.close()


class RawConnection:
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
        with self._lock:
            if self.closed.is_set():
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                self.closed.set()
                return False

    def receive(self) -> bytes | None:
        if self.closed.is_set():
            return None
        try:
            data = self.rfile.read1(65536)
        except (OSError, ValueError):
            data = b""
        return data or None

    def close(self) -> None:
        with self._lock:
            self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._sessions is not None:
            self._sessions.discard(self)


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
