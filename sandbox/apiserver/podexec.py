"""pods/exec: the command runs in the container's environment, its streams over WebSocket
channels (v5.channel.k8s.io for kubectl 1.37, v4 for the python client) or SPDY streams
(remotecommand v4, kubectl's fallback), its exit status as the kubelet's error-channel Status
(cri/streaming/remotecommand, v1.31; CRI-O's exec error text)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading

from ..raynode import kill_group
from . import errors, spdy
from .connections import RawConnection, Upgraded
from .websocket import WebSocket

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
NON_ZERO_EXIT_CODE = "NonZeroExitCode"  # remotecommand.NonZeroExitCodeReason
EXIT_CODE_CAUSE = "ExitCode"  # remotecommand.ExitCodeCauseType
PUMP_JOIN_S = 5.0  # how long the output pumps may drain once the command ended
STREAMS_TIMEOUT_S = 30.0  # the kubelet's streamCreationTimeout: all streams asked for must be open by then
STREAM_TYPES = {0: "stdin", 1: "stdout", 2: "stderr", 3: "error", 4: "resize"}  # SPDY streamType per channel
CONTAINER_CHECK_S = 1.0  # how often a running exec checks that its container still runs


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
    are WebSocket channels (Channels) or SPDY streams (SpdyStreams)."""

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
        if self.proc is not None:
            kill_group(self.proc, 10)


class Channels:
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


class SpdyStreams:
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
