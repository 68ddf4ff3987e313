"""The sandbox's kube-proxy: a ClusterIP Service's address forwards to its endpoint's real
port, refuses without endpoints, closes cleanly, and can be made unreachable."""

from __future__ import annotations

import socket
import socketserver
import threading

import pytest

from sandbox.apiserver.resources import Registry
from sandbox.apiserver.store import Store
from sandbox.core import wait_until
from sandbox.network import Network
from sandbox.proxy import Forwarder, KubeProxy
from sandbox.raynode import free_port

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
