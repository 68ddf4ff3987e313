"""The sandbox's kube-proxy: a ClusterIP Service's address forwards to its endpoint's real
port, refuses without endpoints, closes cleanly, and can be made unreachable."""

from __future__ import annotations

import socket
import socketserver
import threading

import pytest

from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.core import wait_until
from kfp_ray_sandbox.faults import Faults
from kfp_ray_sandbox.network import Network
from kfp_ray_sandbox.proxy import Forwarder, KubeProxy
from kfp_ray_sandbox.raynode import free_port

NS = "sandbox"


class _Echo(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo():
    srv = _Echo(("127.0.0.1", 0), _EchoHandler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    yield srv.server_address
    srv.shutdown()
    srv.server_close()


def talk(addr, payload=b"ping", timeout=5.0) -> bytes:
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def refused(addr) -> bool:
    try:
        socket.create_connection(addr, timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_forwarder_pipes_both_ways_and_closes_what_it_owns(echo):
    net = Network()
    ip = net.allocate()
    fwd = Forwarder("test")
    try:
        assert fwd.listen("svc-a", ip, 8265, lambda: echo)
        big = bytes(range(256)) * 8192  # 2 MiB each way: back-pressure, half-close
        assert talk((ip, 8265), big) == big
        held = socket.create_connection((ip, 8265), timeout=5)
        held.sendall(b"x")
        assert held.recv(1) == b"x"
        wait_until(lambda: fwd.connections("svc-a") == 1, 5, "the proxied connection to be tracked")
        fwd.close("svc-a")  # the Service went: listener and open connections close
        held.settimeout(5)
        assert held.recv(1) == b""
        held.close()
        assert refused((ip, 8265))
    finally:
        fwd.stop()


def test_forwarder_fault_modes_refuse_hang_and_restore(echo):
    ip = Network().allocate()
    port, other = free_port(), free_port()  # ports no wildcard listener of another process can hold
    fwd = Forwarder("test")
    try:
        assert fwd.listen("svc", ip, port, lambda: echo)
        fwd.set_mode("svc", "refuse")
        assert refused((ip, port))
        fwd.set_mode("svc", "hang")
        with socket.create_connection((ip, port), timeout=5) as s:
            s.sendall(b"hello")
            s.settimeout(0.3)
            with pytest.raises(TimeoutError):
                s.recv(1)  # accepted, never answered
        fwd.set_mode("svc", None)
        assert talk((ip, port)) == b"ping"
        assert fwd.listen("svc", ip, other, lambda: None)  # no backend: the connection is reset
        with pytest.raises(OSError):
            talk((ip, other))
    finally:
        fwd.stop()
    assert refused((ip, port))


@pytest.fixture
def cluster():
    reg, store, net = Registry(), Store(), Network()
    store.validation.append(net.allocate_service_ip)
    backends: dict[tuple[str, int], tuple[str, int]] = {}
    proxy = KubeProxy(store, reg, net, lambda pod, port: backends.get((pod["metadata"]["name"], port)))
    yield reg, store, net, proxy, backends
    proxy.stop()


def head_pod(ready: bool) -> dict:
    return {"metadata": {"name": "head", "namespace": NS, "labels": {"ray.io/cluster": "c", "ray.io/node-type": "head"}},
            "spec": {"containers": [{"name": "ray-head", "ports": [{"name": "dashboard", "containerPort": 8265}]}]},
            "status": {"phase": "Running", "podIP": "127.0.0.9",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_kube_proxy_serves_a_service_while_it_has_endpoints(cluster, echo):
    reg, store, net, proxy, backends = cluster
    svc_t, pod_t = reg.get("", "services"), reg.get("", "pods")
    svc = store.create(svc_t, {"metadata": {"name": "c-head-svc", "namespace": NS},
                               "spec": {"selector": {"ray.io/cluster": "c", "ray.io/node-type": "head"},
                                        "ports": [{"name": "dashboard", "port": 8265, "targetPort": "dashboard"},
                                                  {"name": "client", "port": 10001}]}})
    ip = svc["spec"]["clusterIP"]
    assert net.owns(ip) and svc["spec"]["clusterIPs"] == [ip] and svc["spec"]["ports"][1]["targetPort"] == 10001
    proxy.reconcile()
    assert refused((ip, 8265))  # no endpoints yet: REJECT
    store.create(pod_t, head_pod(ready=False))
    proxy.reconcile()
    assert refused((ip, 8265))  # not ready, not published
    store.mutate(pod_t, NS, "head", lambda p: p.update(status=head_pod(ready=True)["status"]), subresource="status")
    backends[("head", 8265)] = echo  # the named targetPort resolves through the container's ports
    proxy.reconcile()
    assert talk((ip, 8265)) == b"ping"
    with pytest.raises(OSError):  # the pod has no process behind 10001
        talk((ip, 10001))
    proxy.set_unreachable(NS, "c-head-svc", "refuse")
    assert refused((ip, 8265))
    proxy.set_unreachable(NS, "c-head-svc", None)
    assert talk((ip, 8265)) == b"ping"
    store.delete(svc_t, NS, "c-head-svc")
    proxy.reconcile()
    assert refused((ip, 8265))
    assert not net.in_use(ip)  # the address is free again


def test_forwarder_modes_per_address_reset_and_stall_open_connections(echo):
    """A fault on one address leaves the owner's others alone; "refuse" resets what is open,
    "hang" stalls it (nothing lost: the held bytes arrive once it ends)."""
    ip = Network().allocate()
    dash, client = free_port(), free_port()
    fwd = Forwarder("test")
    try:
        assert fwd.listen("svc", ip, dash, lambda: echo) and fwd.listen("svc", ip, client, lambda: echo)
        open_conn = socket.create_connection((ip, dash), timeout=5)
        open_conn.sendall(b"a")
        assert open_conn.recv(1) == b"a"
        fwd.set_mode("svc", "refuse", (ip, dash))
        assert fwd.mode("svc", (ip, dash)) == "refuse" and fwd.mode("svc", (ip, client)) is None
        assert refused((ip, dash))
        assert talk((ip, client)) == b"ping"  # the other port still forwards
        with pytest.raises(ConnectionResetError):  # the open connection got an RST
            open_conn.sendall(b"b")
            open_conn.recv(1)
        open_conn.close()
        fwd.set_mode("svc", None, (ip, dash))
        assert talk((ip, dash)) == b"ping"

        stalled = socket.create_connection((ip, dash), timeout=5)
        stalled.sendall(b"c")
        assert stalled.recv(1) == b"c"
        fwd.set_mode("svc", "hang", (ip, dash))
        stalled.sendall(b"d")
        stalled.settimeout(0.5)
        with pytest.raises(TimeoutError):
            stalled.recv(1)  # held, not lost
        with socket.create_connection((ip, dash), timeout=5) as fresh:  # accepted, never answered
            fresh.sendall(b"e")
            fresh.settimeout(0.5)
            with pytest.raises(TimeoutError):
                fresh.recv(1)
            wait_until(lambda: fwd.connections("svc") == 2, 5, "the new connection to be held")
            assert talk((ip, client)) == b"ping"
            fwd.set_mode("svc", None, (ip, dash))
            fresh.settimeout(5)
            with pytest.raises(ConnectionResetError):  # a held connection is reset when it ends
                fresh.recv(1)
        stalled.settimeout(5)
        assert stalled.recv(1) == b"d"  # the held byte arrives
        stalled.sendall(b"f")
        assert stalled.recv(1) == b"f"
        stalled.close()
    finally:
        fwd.stop()


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def faulty_cluster():
    reg, store, net, faults, clock = Registry(), Store(), Network(), Faults(), _Clock()
    store.validation.append(net.allocate_service_ip)
    backends: dict[tuple[str, int], tuple[str, int]] = {}
    proxy = KubeProxy(store, reg, net, lambda pod, port: backends.get((pod["metadata"]["name"], port)),
                      faults=faults, clock=clock)
    yield reg, store, proxy, backends, faults, clock
    proxy.stop()


def head_service(headless: bool = False) -> dict:
    spec = {"selector": {"ray.io/cluster": "c", "ray.io/node-type": "head"},
            "ports": [{"name": "dashboard", "port": 8265, "targetPort": "dashboard"}, {"name": "client", "port": 10001}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"metadata": {"name": "c-head-svc", "namespace": NS, "labels": {"ray.io/cluster": "c", "ray.io/node-type": "head"}},
            "spec": spec}


@pytest.mark.parametrize("mode", ["refuse", "hang"])
def test_dashboard_outage_fault_takes_the_head_services_dashboard_port_for_a_while(faulty_cluster, echo, mode):
    """`dashboard_outage`: from after_s after the head is ready, for for_s, the Service's
    dashboard port refuses (or hangs) connections; its other ports keep forwarding."""
    reg, store, proxy, backends, faults, clock = faulty_cluster
    svc = store.create(reg.get("", "services"), head_service())
    ip = svc["spec"]["clusterIP"]
    faults.set({"clusters": {"c": {"dashboard_outage": {"mode": mode, "after_s": 5, "for_s": 30}}}})
    proxy.reconcile()  # no endpoints yet: the outage's clock has not started
    store.create(reg.get("", "pods"), head_pod(ready=True))
    backends[("head", 8265)] = backends[("head", 10001)] = echo
    proxy.reconcile()  # the head is ready: t0
    assert talk((ip, 8265)) == b"ping" and proxy.outages() == []
    clock.now += 5
    proxy.reconcile()
    assert talk((ip, 10001)) == b"ping"
    if mode == "refuse":
        assert refused((ip, 8265))
    else:
        with socket.create_connection((ip, 8265), timeout=5) as s:
            s.sendall(b"GET /api/version HTTP/1.1\r\n\r\n")
            s.settimeout(0.5)
            with pytest.raises(TimeoutError):
                s.recv(1)
    [outage] = proxy.outages()
    assert outage["cluster"] == "c" and outage["mode"] == mode and outage["address"] == f"{ip}:8265"
    assert outage["ended"] is None
    assert proxy.resync == pytest.approx(0.5)  # the end is 30 s away: the normal resync
    clock.now += 29.9
    proxy.reconcile()
    assert proxy.resync == pytest.approx(0.1)  # wakes for the end, not at the next resync
    clock.now += 0.1
    proxy.reconcile()
    assert talk((ip, 8265)) == b"ping"
    [outage] = proxy.outages()
    assert outage["ended"] is not None and outage["ended"] >= outage["started"]
    faults.clear()
    proxy.reconcile()
    assert talk((ip, 8265)) == b"ping"


def test_dashboard_outage_set_at_run_time_until_cleared_and_on_a_headless_service(faulty_cluster, echo):
    """Set on a ready head without after_s/for_s it starts at once and lasts until cleared; a
    headless Service's clients reach the head pod's address, so that is where it applies."""
    reg, store, proxy, backends, faults, clock = faulty_cluster
    store.create(reg.get("", "services"), head_service(headless=True))
    pod = store.create(reg.get("", "pods"), head_pod(ready=True))
    owner, addr = ("pod", pod["metadata"]["uid"]), ("127.0.0.9", 8265)
    assert proxy.forwarder.listen(owner, *addr, lambda: echo)  # what the kubelet does for the pod's ports
    proxy.reconcile()
    assert talk(addr) == b"ping"
    faults.patch({"clusters": {"c*": {"dashboard_outage": {"mode": "refuse"}}}})
    proxy.reconcile()
    assert refused(addr)
    clock.now += 3600
    proxy.reconcile()
    assert refused(addr)
    faults.patch({"clusters": {"c*": None}})
    proxy.reconcile()
    assert talk(addr) == b"ping"
    assert [o["ended"] is not None for o in proxy.outages()] == [True]


def test_faults_patch_merges_and_validates():
    faults = Faults()
    faults.set({"clusters": {"a": {"api_errors": {"code": 503, "count": 2}}}, "platform": {"pods_ready_timeout_s": 9}})
    assert faults.take_cluster_error("a", "get")["code"] == 503  # counts down
    faults.patch({"clusters": {"b": {"dashboard_outage": {"mode": "hang", "for_s": 3}}}})
    got = faults.get()
    assert got["clusters"]["a"]["api_errors"]["count"] == 1 and got["platform"] == {"pods_ready_timeout_s": 9}
    assert got["clusters"]["b"]["dashboard_outage"] == {"mode": "hang", "for_s": 3}
    with pytest.raises(ValueError, match="dashboard_outage"):
        faults.patch({"clusters": {"b": {"dashboard_outage": {"mode": "slow"}}}})
    with pytest.raises(ValueError, match="verbs"):
        faults.patch({"clusters": {"b": {"api_resets": {"count": 1, "verbs": ["watch"]}}}})
    assert faults.get() == got  # a rejected patch changes nothing
    faults.patch({"clusters": {"a": None}})
    assert set(faults.get()["clusters"]) == {"b"}
    faults.set({"clusters": {"x-*": {"api_errors": [{"code": 429, "count": 1, "verbs": ["create"]},
                                                    {"code": 500, "count": 1}],
                                     "api_resets": {"count": 1, "verbs": ["delete"]}}}})
    assert faults.take_cluster_error("x-1", "get")["code"] == 500  # the create-only one waits for a create
    assert faults.take_cluster_error("x-1", "create")["code"] == 429
    assert faults.take_cluster_error("x-1", "create") is None and faults.take_cluster_error("y", "get") is None
    assert not faults.take_cluster_reset("x-1", "get") and faults.take_cluster_reset("x-1", "delete")
    faults.patch({"clusters": {"x-*": {"api_latency_ms": {"ms": 250, "verbs": ["create"]}}}})
    assert faults.cluster_latency("x-1", "create") == 0.25 and faults.cluster_latency("x-1", "get") == 0.0
    with pytest.raises(ValueError, match="api_latency_ms"):
        faults.patch({"clusters": {"x-*": {"api_latency_ms": {"ms": 1, "verbs": ["list"]}}}})
