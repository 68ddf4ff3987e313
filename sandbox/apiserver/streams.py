"""pods/exec, pods/attach and pods/portforward: which session a connect request gets, and what
is refused before any upgrade. The sessions: podexec.py, portforward.py; their connections:
websocket.py, connections.py (SPDY upgrades), spdy.py (framing).

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

import select

from . import errors
from .connections import RawConnection
from .errors import ApiError
from .podexec import Channels, Exec, SpdyStreams
from .portforward import PortForward, SpdyPortForward
from .websocket import WebSocket, offered_protocols, requested

SUBRESOURCES = ("exec", "attach", "portforward")
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
PORTFORWARD_PROTOCOLS = ("v4.channel.k8s.io", "channel.k8s.io", "")
PORTFORWARD_SPDY = "portforward.k8s.io"
EXEC_SPDY = "v4.channel.k8s.io"  # of the kubelet's SPDY protocols, the one the sandbox speaks (v4)
TUNNELED_SPDY = "SPDY/3.1+portforward.k8s.io"  # client-go tools/portforward, tunneling dialer


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
        transport = (Channels(WebSocket(environ, protocol)) if websocket
                     else SpdyStreams(RawConnection(environ, protocol), expected))
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
