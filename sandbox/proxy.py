"""The sandbox's kube-proxy: ClusterIP Services on loopback, forwarded over TCP.

A ClusterIP Service gets its own loopback address (sandbox/network.py); for each of its
ports the proxy listens on <clusterIP>:<port> while the Service has endpoints, and pipes
each connection to an endpoint: a Ready pod the selector matches (any pod with an address
when publishNotReadyAddresses), at the targetPort, which the kubelet maps to the port the
pod's process really listens on (pods share the host's ports here, so Ray binds free ones).
Without endpoints nothing listens, so a client's connect is refused, as kube-proxy's REJECT
rule makes it. The kubelet uses the same Forwarder to give a pod its container ports on its
own address (what a pod's network namespace gives it).

Faults (the Forwarder's modes): "refuse" closes a listener and resets its open connections
(connection refused), "hang" accepts connections and never answers them and stalls the open
ones, None forwards again. The `dashboard_outage` cluster fault (sandbox/faults.py) puts the
head Service's dashboard port (8265) in one of them for a while, where a real outage of the
Service's path would be, while the Ray processes behind it keep running;
`KubeProxy.set_unreachable(namespace, name, mode)` does it by hand for all of a Service's ports.

Connections are threads (two pumps each); listeners share one selector thread. stop(),
and a Service's removal, close every socket they own and wait for their threads.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable

from . import netpol
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
    """One proxied connection: client <-> backend, a pump thread per direction.

    pause() holds what either side sends (a black hole: nothing is lost, nothing arrives, TCP
    backpressure builds) until resume(); reset() ends it with a TCP RST to the client."""

    def __init__(self, client: socket.socket, backend: socket.socket, addr, on_done):
        self.client, self.backend, self.addr, self._on_done = client, backend, addr, on_done
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._open = 2
        self._flowing = threading.Event()
        self._flowing.set()
        self._resetting = False

    def start(self, name: str) -> None:
        for src, dst in ((self.client, self.backend), (self.backend, self.client)):
            t = threading.Thread(target=self._pump, args=(src, dst), daemon=True, name=name)
            self.threads.append(t)
            t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                self._flowing.wait()
                if self._resetting:
                    break
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
            if self._resetting:
                _reset(self.client)
            else:
                self.client.close()
            self.backend.close()
            self._on_done(self)

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def reset(self) -> None:
        """End the connection with an RST to the client: both pumps wake (SHUT_RD sends nothing)
        and drop what they hold; the last one closes the client with SO_LINGER 0."""
        self._resetting = True
        for sock in (self.client, self.backend):
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        self._flowing.set()

    def close(self) -> None:
        _shut(self.client)
        _shut(self.backend)
        self._flowing.set()


MODES = (None, "refuse", "hang")


class Forwarder:
    """TCP listeners grouped by owner; each accepted connection goes to owner's backend().

    A fault mode applies to one of an owner's addresses, or to all of them (addr None):
    "refuse" closes the listener and resets the open connections (connection refused, as
    with no endpoint); "hang" accepts new connections and never answers them, and holds the
    traffic of the open ones; None forwards again (held new connections are reset, open ones
    resume)."""

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
        self._held: dict[object, list[tuple[tuple[str, int], socket.socket]]] = {}  # "hang": accepted, never answered
        self._modes: dict[tuple[object, tuple[str, int] | None], str] = {}
        self._stopped = False
        # admits(owner, addr, peer) -> False: a NetworkPolicy drops this connection (held unanswered)
        self.admits: Callable[[object, tuple[str, int], tuple[str, int]], bool] | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name=name)
        self._thread.start()

    def _mode(self, owner, addr) -> str | None:
        return self._modes.get((owner, addr)) or self._modes.get((owner, None))

    # --- listeners -----------------------------------------------------------------
    def listen(self, owner, ip: str, port: int, backend: Backend) -> bool:
        """Listen on ip:port for owner (idempotent). False if the address is taken."""
        with self._lock:
            if self._stopped:
                return False
            self._backends[(owner, (ip, port))] = backend
            if (ip, port) in self._listeners.get(owner, {}) or self._mode(owner, (ip, port)) == "refuse":
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
        """Close owner's listeners and every connection it has open; forget its modes."""
        with self._lock:
            for addr in [a for (o, a) in self._backends if o == owner]:
                self._backends.pop((owner, addr), None)
            for sock in self._listeners.pop(owner, {}).values():
                self._sel.unregister(sock)
                sock.close()
            conns = self._conns.pop(owner, set())
            held = self._held.pop(owner, [])
            for key in [k for k in self._modes if k[0] == owner]:
                del self._modes[key]
        for _, s in held:
            _reset(s)
        for c in conns:
            c.close()
        for c in conns:
            for t in c.threads:
                t.join(timeout=5)
        self._wake()

    def mode(self, owner, addr: tuple[str, int] | None = None) -> str | None:
        """The fault mode in force for owner's address (or set for all its addresses)."""
        with self._lock:
            return self._mode(owner, addr) if addr is not None else self._modes.get((owner, None))

    def set_mode(self, owner, mode: str | None, addr: tuple[str, int] | None = None) -> None:
        """Fault mode for one of owner's addresses, or all of them (addr None): None forwards,
        "refuse": connection refused (open connections reset), "hang": accept and never answer
        (open connections hold their traffic)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: None, 'refuse' or 'hang'")
        with self._lock:
            addrs = [addr] if addr is not None else sorted({a for (o, a) in self._backends if o == owner})
            before = {a: self._mode(owner, a) for a in addrs}
            if mode is None:
                self._modes.pop((owner, addr), None)
            else:
                self._modes[(owner, addr)] = mode
            after = {a: self._mode(owner, a) for a in addrs}
            changed = {a for a in addrs if before[a] != after[a]}
            closing = []
            for a in changed:
                if after[a] == "refuse":
                    sock = self._listeners.get(owner, {}).pop(a, None)
                    if sock is not None:
                        self._sel.unregister(sock)
                        closing.append(sock)
            held = self._held.get(owner, [])
            release = [s for a, s in held if a in changed and after[a] != "hang"]
            self._held[owner] = [(a, s) for a, s in held if not (a in changed and after[a] != "hang")]
            conns = [c for c in self._conns.get(owner, ()) if c.addr in changed]
            reopen = [a for a in changed if before[a] == "refuse" and after[a] != "refuse"]
        for sock in closing:
            sock.close()
        for s in release:
            _reset(s)
        for c in conns:
            {"refuse": c.reset, "hang": c.pause, None: c.resume}[after[c.addr]]()
        for ip, port in reopen:
            backend = self._backends.get((owner, (ip, port)))
            if backend is not None:
                self.listen(owner, ip, port, backend)
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
                    | set(self._held) | {o for (o, _) in self._modes})

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
        try:
            denied = self.admits is not None and not self.admits(owner, addr, client.getpeername())
        except OSError:  # the client is gone already
            denied = False
        with self._lock:
            mode = self._mode(owner, addr)
            backend = self._backends.get((owner, addr))
            if mode == "hang" or denied:  # a dropped SYN: the client waits for its own timeout
                self._held.setdefault(owner, []).append((addr, client))
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

        conn = _Conn(client, upstream, addr, done)
        with self._lock:
            if self._stopped or (owner, addr) not in self._backends:
                conn.close()
                upstream.close()
                client.close()
                return
            self._conns.setdefault(owner, set()).add(conn)
            mode = self._mode(owner, addr)  # a fault that began while we connected upstream
        if mode == "hang":
            conn.pause()
        conn.start(f"{self.name}-{addr[0]}:{addr[1]}")
        if mode == "refuse":
            conn.reset()


def _ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class KubeProxy(Controller):
    """Programs the Forwarder from Services and their endpoints, as kube-proxy does iptables."""

    name = "kube-proxy"

    def __init__(self, store, registry, network, pod_port: Callable[[dict, int], tuple[str, int] | None],
                 faults=None, clock=time.monotonic):
        super().__init__(store, registry)
        self.network, self.pod_port, self.faults, self.clock = network, pod_port, faults, clock
        self.forwarder = Forwarder("kube-proxy")
        self.forwarder.admits = self.admits
        self.netpol_t = self._maybe_rt("networking.k8s.io", "networkpolicies")
        self.ns_t = self.rt("", "namespaces")
        self.svc_t = self.rt("", "services")
        self.pod_t = self.rt("", "pods")
        self._anchors: dict[tuple, float] = {}  # (Service uid, fault) -> when its clock started
        self._applied: dict[tuple, str] = {}  # (owner, addr) -> outage mode this proxy set
        self._outages: list[dict] = []  # every outage window, for tests to read
        self._outage_lock = threading.Lock()

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

    def _maybe_rt(self, group: str, plural: str):
        try:
            return self.rt(group, plural)
        except KeyError:
            return None

    # --- NetworkPolicies (sandbox/netpol.py) ------------------------------------------
    def admits(self, owner, addr: tuple[str, int], peer: tuple[str, int]) -> bool:
        """Whether the NetworkPolicies let the connection from `peer` in: judged only when the
        peer's address is a pod's (a client that bound its pod's address); anything else passes."""
        if self.netpol_t is None or not self.network.owns(peer[0]):
            return True
        sources, _ = self.store.list(self.pod_t, None, lambda p: (p.get("status") or {}).get("podIP") == peer[0]
                                     and not p["metadata"].get("deletionTimestamp"))
        if not sources:
            return True
        target, port = None, addr[1]
        if owner[0] == "svc":
            svc = self.store.find(self.svc_t, owner[1], owner[2])
            pods = self.endpoints(svc) if svc else []
            svc_port = next((p for p in (svc or {}).get("spec", {}).get("ports") or [] if p["port"] == addr[1]), None)
            if pods and svc_port:
                target, port = pods[0], self._target(pods[0], svc_port) or addr[1]
        elif owner[0] == "pod":
            found, _ = self.store.list(self.pod_t, None, lambda p: p["metadata"]["uid"] == owner[1])
            target = found[0] if found else None
        if target is None:
            return True
        policies, _ = self.store.list(self.netpol_t, target["metadata"]["namespace"])
        source = sources[0]
        ns = self.store.find(self.ns_t, None, source["metadata"]["namespace"]) or {}
        return netpol.allowed(policies, target, port, source, ns.get("metadata", {}).get("labels") or {})

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
        if self.faults is not None:
            self._dashboard_outages(services)

    # --- the dashboard_outage fault ------------------------------------------------
    def _dashboard_targets(self, svc: dict, port: dict) -> list[tuple]:
        """Where clients reach the dashboard: the Service's own address (ClusterIP), or for a
        headless Service each head pod's address (the kubelet's forwarded container port)."""
        ns, name, uid = svc["metadata"]["namespace"], svc["metadata"]["name"], svc["metadata"]["uid"]
        ip = (svc.get("spec") or {}).get("clusterIP")
        if ip and ip != "None":
            return [(("svc", ns, name, uid), (ip, port["port"]))]
        out = []
        for pod in self.endpoints(svc):
            target = self._target(pod, port)
            if target is not None:
                out.append((("pod", pod["metadata"]["uid"]), (pod["status"]["podIP"], target)))
        return out

    def _dashboard_outages(self, services: list[dict]) -> None:
        now, wall = self.clock(), time.time()
        want: dict[tuple, str | None] = {}
        live, wake = set(), None
        for svc in services:
            labels = svc["metadata"].get("labels") or {}
            cluster = labels.get("ray.io/cluster")
            if not cluster or labels.get("ray.io/node-type") != "head":
                continue
            fault = self.faults.for_cluster(cluster).get("dashboard_outage")
            port = next((p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("name") == "dashboard"), None)
            if not fault or port is None:
                continue
            key = (svc["metadata"]["uid"], json.dumps(fault, sort_keys=True))
            live.add(key)
            if key not in self._anchors:
                if not self.endpoints(svc):
                    continue  # its clock starts once the head is ready
                self._anchors[key] = now
            start = self._anchors[key] + float(fault.get("after_s", 0))
            end = start + float(fault["for_s"]) if fault.get("for_s") is not None else float("inf")
            active = start <= now < end
            for nxt in (start, end):
                if nxt > now:
                    wake = min(wake or nxt, nxt)
            for target in self._dashboard_targets(svc, port):
                want[target] = fault["mode"] if active else None
                if active:
                    self._outage_started(cluster, fault["mode"], target, wall)
        for key in [k for k in self._anchors if k not in live]:
            del self._anchors[key]
        for target in set(self._applied) | set(want):
            mode = want.get(target)
            if self._applied.get(target) != mode or self.forwarder.mode(*target) != mode:
                self.forwarder.set_mode(target[0], mode, target[1])
                if mode is None:
                    self._applied.pop(target, None)
                    self._outage_ended(target, wall)
                else:
                    self._applied[target] = mode
                log.info("kube-proxy: dashboard %s:%s %s", target[1][0], target[1][1], mode or "reachable again")
        # wake for the next start or end of an outage rather than at the next resync
        self.resync = 0.5 if wake is None else max(0.02, min(0.5, wake - now))

    def _outage_started(self, cluster: str, mode: str, target: tuple, wall: float) -> None:
        with self._outage_lock:
            if not any(o["target"] == target and o["ended"] is None for o in self._outages):
                self._outages.append({"cluster": cluster, "mode": mode, "target": target,
                                      "address": f"{target[1][0]}:{target[1][1]}", "started": wall, "ended": None})

    def _outage_ended(self, target: tuple, wall: float) -> None:
        with self._outage_lock:
            for o in self._outages:
                if o["target"] == target and o["ended"] is None:
                    o["ended"] = wall

    def outages(self) -> list[dict]:
        """Every dashboard outage so far: cluster, mode, address, started/ended (epoch s; ended
        None while it lasts)."""
        with self._outage_lock:
            return [{k: v for k, v in o.items() if k != "target"} for o in self._outages]

    def set_unreachable(self, namespace: str, name: str, mode: str | None) -> None:
        """Fault hook: make a Service refuse ("refuse") or hang ("hang") connections; None restores it."""
        svc = self.store.find(self.svc_t, namespace, name)
        if svc is None:
            raise KeyError(f"service {namespace}/{name} not found")
        self.forwarder.set_mode(("svc", namespace, name, svc["metadata"]["uid"]), mode)

    def stop(self) -> None:
        super().stop()
        self.forwarder.stop()
