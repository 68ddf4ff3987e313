"""The sandbox's Ray serves its client port (10001) with the mutual TLS that RHOAI's CodeFlare
operator sets up (sandbox/controllers/podcerts.py), and kfp_ray's driver makes the client
certificate that gets through it, as the CodeFlare SDK's generate_cert does."""

from __future__ import annotations

import socket
import ssl

import pytest

from kfp_ray import driver
from kfp_ray.errors import KfpRayError
from tests.helpers import on_platforms

pytestmark = pytest.mark.ray

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # + an empty SETTINGS frame


def _client_port(cluster, v1):
    svc = v1.read_namespaced_service(f"{cluster.name}-head-svc", cluster.namespace)
    port = next(p.port for p in svc.spec.ports if p.name == "client")
    return svc.spec.cluster_ip, port


def _exchange(address, ctx, server_hostname) -> bytes:
    """A TLS connection to the Ray client server (gRPC: HTTP/2); what it answers the preface."""
    with socket.create_connection(address, timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=server_hostname) as s:
        s.sendall(H2_PREFACE)
        return s.recv(64)


@pytest.fixture
def tls(ray_cluster, as_admin, tmp_path, sbx):
    from kubernetes import client as k8s

    assert driver.tls_required(ray_cluster.name, ray_cluster.namespace)  # the CodeFlare webhook's RAY_USE_TLS
    data = driver.ca_secret(ray_cluster.name, ray_cluster.namespace, timeout=30)
    env = driver.client_certificate(data, ray_cluster.name, ray_cluster.namespace, str(tmp_path))
    address = _client_port(ray_cluster, k8s.CoreV1Api(sbx.api_client()))
    return env, address, f"{ray_cluster.name}-head-svc.{ray_cluster.namespace}.svc"


def _context(env, with_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=env["RAY_TLS_CA_CERT"])  # verifies the head's certificate and name
    ctx.set_alpn_protocols(["h2"])
    if with_cert:
        ctx.load_cert_chain(env["RAY_TLS_SERVER_CERT"], env["RAY_TLS_SERVER_KEY"])
    return ctx


@on_platforms("rhoai-3.3", "rhoai-2.25")
def test_the_client_certificate_gets_through_and_the_head_proves_its_service_name(tls, box):
    """On each release: its CA secret is cert-manager's on 3.x, the CodeFlare operator's on 2.x
    (interactive_train's 2.25 run, KFP_RAY_TEST_FULL only, drives a whole Ray client job through it)."""
    env, address, name = tls
    answer = _exchange(address, _context(env, with_cert=True), name)
    assert answer[3:4] == b"\x04"  # the server's HTTP/2 SETTINGS frame: gRPC is talking


def _refused(address, ctx, name) -> bool:
    """The server closed the connection (or alerted) instead of answering: with TLS 1.3 the
    client's handshake ends before the server has checked the client's certificate."""
    try:
        return _exchange(address, ctx, name) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_a_client_without_a_certificate_is_refused(tls):
    env, address, name = tls
    assert not _refused(address, _context(env, with_cert=True), name)  # the server is there and answers
    assert _refused(address, _context(env, with_cert=False), name)


def test_a_certificate_from_another_ca_is_refused(tls, tmp_path):
    from kfp_ray_sandbox.certs import ca_secret_data

    env, address, name = tls
    (tmp_path / "other").mkdir()
    other = driver.client_certificate(ca_secret_data(), "x", "y", str(tmp_path / "other"))
    ctx = ssl.create_default_context(cafile=env["RAY_TLS_CA_CERT"])
    ctx.set_alpn_protocols(["h2"])
    ctx.load_cert_chain(other["RAY_TLS_SERVER_CERT"], other["RAY_TLS_SERVER_KEY"])
    assert not _refused(address, _context(env, with_cert=True), name)  # the server is there and answers
    assert _refused(address, ctx, name)


def test_the_head_certificate_does_not_carry_a_name_it_was_not_given(tls):
    env, address, _ = tls
    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(address, _context(env, with_cert=True), "elsewhere.sandbox.svc")


def test_a_task_whose_ray_differs_from_the_clusters_fails_before_connecting(ray_cluster):
    import ray

    assert driver.check_ray_version(ray_cluster.dashboard_url) == ray.__version__ == "2.52.1"
    with pytest.raises(KfpRayError) as err:
        driver.check_ray_version(ray_cluster.dashboard_url, local="2.40.0")
    msg = str(err.value)
    assert "the RayCluster runs Ray 2.52.1 and this task has Ray 2.40.0" in msg and "Fix:" in msg
