"""The sandbox's kube-proxy: ClusterIP Services on loopback, forwarded over TCP.

A ClusterIP Service gets its own loopback address (sandbox/network.py); for each of its
ports the proxy listens on <clusterIP>:<port> while the Service has endpoints, and pipes
each connection to an endpoint: a Ready pod the selector matches (any pod with an address
when publishNotReadyAddresses), at the targetPort, which the kubelet maps to the port the
pod's process really listens on (pods share the host's ports here, so Ray binds free ones).
Without endpoints nothing listens, so a client's connect is refused, as kube-proxy's REJECT
rule makes it. The kubelet uses the same Forwarder to give a pod its container ports on its
own address (what a pod's network namespace gives it).

`KubeProxy.set_unreachable(namespace, name, "refuse" | "hang" | None)` can later carry a
fault: "refuse" closes the Service's listeners (connection refused), "hang" accepts
connections and never answers, None restores forwarding.

Connections are threads (two pumps each); listeners share one selector thread. stop(),
and a Service's removal, close every socket they own and wait for their threads.
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import threading
from collections.abc import Callable

from .controllers.base import Controller

log = logging.getLogger("sandbox")

Backend = Callable[[], "tuple[str, int] | None"]
CONNECT_TIMEOUT = 2.0


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (no backend to hand the connection to)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Conn:
    """One proxied connection: client <-> backend, a pump thread per direction."""

    def __init__(self, client: socket.socket, backend: socket.socket, on_done):
        self.client, self.backend, self._on_done = client, backend, on_done
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._open = 2

    def start(self, name: str) -> None:
        for src, dst in ((self.client, self.backend), (self.backend, self.client)):
            t = threading.Thread(target=self._pump, args=(src, dst), daemon=True, name=name)
            self.threads.append(t)
            t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)  # pass the half-close on
                    except OSError:
                        pass
                    break
                dst.sendall(data)
        except OSError:
            _shut(src)
            _shut(dst)
        with self._lock:
            self._open -= 1
            last = self._open == 0
        if last:
            self.client.close()
            self.backend.close()
            self._on_done(self)

    def close(self) -> None:
        _shut(self.client)
        _shut(self.backend)


class Forwarder:
    """TCP listeners grouped by owner; each accepted connection goes to owner's backend()."""

    def __init__(self, name: str = "forwarder"):
        self.name = name
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._listeners: dict[object, dict[tuple[str, int], socket.socket]] = {}
        self._backends: dict[tuple[object, tuple[str, int]], Backend] = {}
        self._conns: dict[object, set[_Conn]] = {}
        self._held: dict[object, list[socket.socket]] = {}  # "hang": accepted, never answered
        self._modes: dict[object, str] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name=name)
        self._thread.start()

    # --- listeners -----------------------------------------------------------------
    def listen(self, owner, ip: str, port: int, backend: Backend) -> bool:
        """Listen on ip:port for owner (idempotent). False if the address is taken."""
        with self._lock:
            if self._stopped:
                return False
            self._backends[(owner, (ip, port))] = backend
            if (ip, port) in self._listeners.get(owner, {}) or self._modes.get(owner) == "refuse":
                return True
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((ip, port))
                sock.listen(128)
            except OSError as exc:
                sock.close()
                log.warning("%s: cannot listen on %s:%s: %s", self.name, ip, port, exc)
                return False
            sock.setblocking(False)
            self._listeners.setdefault(owner, {})[(ip, port)] = sock
            self._sel.register(sock, selectors.EVENT_READ, (owner, (ip, port)))
        self._wake()
        return True

    def unlisten(self, owner, ip: str, port: int) -> None:
        """Stop accepting on ip:port (open connections stay)."""
        with self._lock:
            self._backends.pop((owner, (ip, port)), None)
            sock = self._listeners.get(owner, {}).pop((ip, port), None)
            if sock is not None:
                self._sel.unregister(sock)
                sock.close()
        self._wake()

    def addresses(self, owner) -> set[tuple[str, int]]:
        with self._lock:
            return {addr for (o, addr) in self._backends if o == owner}

    def close(self, owner) -> None:
        """Close owner's listeners and every connection it has open."""
        with self._lock:
            for addr in [a for (o, a) in self._backends if o == owner]:
                self._backends.pop((owner, addr), None)
            for sock in self._listeners.pop(owner, {}).values():
                self._sel.unregister(sock)
                sock.close()
            conns = self._conns.pop(owner, set())
            held = self._held.pop(owner, [])
            self._modes.pop(owner, None)
        for s in held:
            _reset(s)
        for c in conns:
            c.close()
        for c in conns:
            for t in c.threads:
                t.join(timeout=5)
        self._wake()

    def set_mode(self, owner, mode: str | None) -> None:
        """None: forward; "refuse": listeners closed (connection refused); "hang": accept and never answer."""
        if mode not in (None, "refuse", "hang"):
            raise ValueError(f"unknown mode {mode!r}: None, 'refuse' or 'hang'")
        with self._lock:
            previous = self._modes.get(owner)
            if mode is None:
                self._modes.pop(owner, None)
            else:
                self._modes[owner] = mode
            closing = []
            if mode == "refuse":
                closing = list(self._listeners.pop(owner, {}).values())
                for sock in closing:
                    self._sel.unregister(sock)
            held = self._held.pop(owner, []) if mode != "hang" else []
            reopen = [addr for (o, addr) in self._backends if o == owner] if previous == "refuse" and mode != "refuse" else []
        for sock in closing:
            sock.close()
        for s in held:
            _reset(s)
        for ip, port in reopen:
            self.listen(owner, ip, port, self._backends[(owner, (ip, port))])
        self._wake()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            owners = set(self._listeners) | set(self._conns) | set(self._held)
        for owner in owners:
            self.close(owner)
        self._wake()
        self._thread.join(timeout=5)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def listening(self, ip: str, port: int) -> bool:
        """Whether some owner accepts connections on ip:port now."""
        with self._lock:
            return any((ip, port) in addrs for addrs in self._listeners.values())

    def owners(self) -> set:
        with self._lock:
            return ({o for (o, _) in self._backends} | set(self._listeners) | set(self._conns)
                    | set(self._held) | set(self._modes))

    def connections(self, owner) -> int:
        with self._lock:
            return len(self._conns.get(owner, ())) + len(self._held.get(owner, ()))

    # --- the accept loop -----------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
            try:
                events = self._sel.select()
            except (OSError, ValueError):
                return
            for key, _ in events:
                if key.data is None:
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    continue
                owner, addr = key.data
                try:
                    client, _peer = key.fileobj.accept()
                except OSError:
                    continue  # closed meanwhile, or the client gave up
                self._accepted(owner, addr, client)

    def _accepted(self, owner, addr, client: socket.socket) -> None:
        client.setblocking(True)
        with self._lock:
            mode = self._modes.get(owner)
            backend = self._backends.get((owner, addr))
            if mode == "hang":
                self._held.setdefault(owner, []).append(client)
                return
        target = backend() if backend is not None else None
        if target is None:
            _reset(client)
            return
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT)
            upstream.settimeout(None)
        except OSError:
            _reset(client)
            return

        def done(conn):
            with self._lock:
                self._conns.get(owner, set()).discard(conn)

        conn = _Conn(client, upstream, done)
        with self._lock:
            if self._stopped or (owner, addr) not in self._backends:
                conn.close()
                upstream.close()
                client.close()
                return
            self._conns.setdefault(owner, set()).add(conn)
        conn.start(f"{self.name}-{addr[0]}:{addr[1]}")


def _ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class KubeProxy(Controller):
    """Programs the Forwarder from Services and their endpoints, as kube-proxy does iptables."""

    name = "kube-proxy"

    def __init__(self, store, registry, network, pod_port: Callable[[dict, int], tuple[str, int] | None]):
        super().__init__(store, registry)
        self.network, self.pod_port = network, pod_port
        self.forwarder = Forwarder("kube-proxy")
        self.svc_t = self.rt("", "services")
        self.pod_t = self.rt("", "pods")

    # --- endpoints -----------------------------------------------------------------
    def endpoints(self, svc: dict) -> list[dict]:
        spec = svc.get("spec") or {}
        pods, _ = self.store.list(self.pod_t, svc["metadata"]["namespace"],
                                  lambda p: _matches(spec.get("selector") or {}, p["metadata"].get("labels") or {}))
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("podIP")]
        return pods if spec.get("publishNotReadyAddresses") else [p for p in pods if _ready(p)]

    def _target(self, pod: dict, port: dict) -> int | None:
        target = port.get("targetPort", port["port"])
        if isinstance(target, int) or str(target).isdigit():
            return int(target)
        for c in (pod.get("spec") or {}).get("containers") or []:
            for cp in c.get("ports") or []:
                if cp.get("name") == target:
                    return int(cp["containerPort"])
        return None

    def _backend(self, namespace: str, name: str, port_name: str | None, port_number: int):
        def resolve():
            svc = self.store.find(self.svc_t, namespace, name)
            if svc is None:
                return None
            port = next((p for p in svc["spec"].get("ports") or []
                         if p.get("name") == port_name and p["port"] == port_number), None)
            for pod in self.endpoints(svc) if port else []:
                target = self._target(pod, port)
                found = self.pod_port(pod, target) if target is not None else None
                if found:
                    return found
            return None
        return resolve

    # --- reconcile -----------------------------------------------------------------
    def reconcile(self) -> None:
        with self.store.lock:  # atomically with creates, so a fresh Service's address is never freed
            services, _ = self.store.list(self.svc_t)
            self.network.release_services_except({(s.get("spec") or {}).get("clusterIP") for s in services})
        live = set()
        for svc in services:
            uid, spec = svc["metadata"]["uid"], svc.get("spec") or {}
            ip = spec.get("clusterIP")
            if not ip or ip == "None" or not self.network.owns(ip):
                continue
            live.add(uid)
            owner = ("svc", svc["metadata"]["namespace"], svc["metadata"]["name"], uid)
            want = {(ip, p["port"]): p for p in spec.get("ports") or [] if (p.get("protocol") or "TCP") == "TCP"}
            if not self.endpoints(svc):
                want = {}
            have = self.forwarder.addresses(owner)
            for addr in have - set(want):
                self.forwarder.unlisten(owner, *addr)
            for addr, p in want.items():
                if addr not in have:
                    self.forwarder.listen(owner, ip, p["port"], self._backend(
                        svc["metadata"]["namespace"], svc["metadata"]["name"], p.get("name"), p["port"]))
        for owner in self.forwarder.owners():
            if owner[0] == "svc" and owner[3] not in live:
                self.forwarder.close(owner)

    def set_unreachable(self, namespace: str, name: str, mode: str | None) -> None:
        """Fault hook: make a Service refuse ("refuse") or hang ("hang") connections; None restores it."""
        svc = self.store.find(self.svc_t, namespace, name)
        if svc is None:
            raise KeyError(f"service {namespace}/{name} not found")
        self.forwarder.set_mode(("svc", namespace, name, svc["metadata"]["uid"]), mode)

    def stop(self) -> None:
        super().stop()
        self.forwarder.stop()
