"""RHOAI 3.3's KubeRay (red-hat-data-services/kuberay rhoai-3.3 @ 2572dfa), driven pass by pass
with no Ray process: the mutating webhook, the authentication controller (finalizer, service
account, HTTPRoute, the head's kube-rbac-proxy), the mTLS controller (cert-manager's secrets and
the pod gate) and the cleanup once the cluster is gone; the gateway that serves the HTTPRoute."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers import kuberay_rhoai as rhoai
from kfp_ray_sandbox.controllers.kuberay import KubeRayController
from kfp_ray_sandbox.core import install_builtin_admission
from kfp_ray_sandbox.faults import Faults
from kfp_ray_sandbox.network import Network
from tests.helpers import raycluster

NS = "sandbox"


class Env:
    def __init__(self):
        self.reg, self.store, self.faults, self.net = Registry(gateway_api=True), Store(), Faults(), Network()
        install_builtin_admission(self.store, self.reg, self.net, self.faults)
        for ns in (NS, rhoai.PLATFORM_NAMESPACE):
            self.store.create(self.reg.get("", "namespaces"), {"metadata": {"name": ns}})
        self.platform = rhoai.RhoaiKubeRay(self.store, self.reg, self.faults)
        self.kuberay = KubeRayController(self.store, self.reg, self.platform)
        self.rc_t, self.pod_t = self.reg.get("ray.io", "rayclusters"), self.reg.get("", "pods")
        self.secret_t = self.reg.get("", "secrets")

    def create(self, body: dict, suspend: bool = False) -> dict:
        body["metadata"]["namespace"] = NS
        body["spec"]["suspend"] = suspend
        self.platform.admission("CREATE", self.rc_t, body, None)
        return self.store.create(self.rc_t, body)

    def rc(self, name: str) -> dict | None:
        return self.store.find(self.rc_t, NS, name)

    def pods(self, name: str) -> list[dict]:
        return [p for p in self.store.list(self.pod_t, NS)[0] if p["metadata"]["labels"].get("ray.io/cluster") == name]

    def secret(self, name: str) -> dict | None:
        return self.store.find(self.secret_t, NS, name)

    def settle(self, passes: int = 4) -> None:
        for _ in range(passes):
            self.kuberay.reconcile()


@pytest.fixture
def env():
    return Env()


def test_the_webhook_annotates_every_cluster_and_forces_ingress_off(env):
    body = raycluster("wh")
    body["metadata"]["annotations"] = {rhoai.ANNOTATION: "false"}  # a user cannot opt out
    body["spec"]["headGroupSpec"]["enableIngress"] = True
    rc = env.create(body)
    assert rc["metadata"]["annotations"][rhoai.ANNOTATION] == "true"
    assert rc["spec"]["headGroupSpec"]["enableIngress"] is False
    assert "ray.openshift.ai/version" not in rc["metadata"]["annotations"]  # no CodeFlare operator on 3.x


def test_auth_and_mtls_objects_then_pods_shaped_as_kuberay_builds_them(env):
    env.create(raycluster("life", workers=1))
    env.settle()
    rc = env.rc("life")
    assert rc["metadata"]["finalizers"] == [rhoai.FINALIZER]
    cond = next(c for c in rc["status"]["conditions"] if c["type"] == "AuthenticationReady")
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "True", "AuthenticationResourcesCreated", rc["metadata"]["generation"])
    assert env.store.find(env.reg.get("", "serviceaccounts"), NS, "life-oauth-proxy-sa") is not None
    config = env.store.find(env.reg.get("", "configmaps"), NS, "kube-rbac-proxy-config-life")
    assert 'resourceName: "life-head-svc"' in config["data"]["config.yaml"]
    route = env.store.find(env.reg.get("gateway.networking.k8s.io", "httproutes"), rhoai.PLATFORM_NAMESPACE, "sandbox-life")
    assert route["spec"]["parentRefs"][0]["name"] == "data-science-gateway"
    assert route["spec"]["rules"][1]["backendRefs"][0] == {"group": "", "kind": "Service", "name": "life-head-svc",
                                                           "namespace": NS, "port": 8265, "weight": 1}
    assert env.store.find(env.reg.get("gateway.networking.k8s.io", "referencegrants"), NS, rhoai.REFERENCE_GRANT)

    ca = env.secret(f"life-ca-secret-{rc['metadata']['uid'][:8]}")
    assert ca["metadata"]["labels"] == {rhoai.CLUSTER_LABEL: "life"} and set(ca["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    head_secret = env.secret("ray-head-secret-life")
    cert = x509.load_pem_x509_certificate(base64.b64decode(head_secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"life-head-svc", "localhost", "life-head-svc.sandbox.svc", "life-head-svc.sandbox.svc.cluster.local"} <= set(
        sans.get_values_for_type(x509.DNSName))
    assert head_secret["data"]["ca.crt"] == ca["data"]["ca.crt"]

    head = next(p for p in env.pods("life") if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    worker = next(p for p in env.pods("life") if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    assert head["metadata"]["name"].startswith("life-head-")  # generated: select the head by labels
    assert [c["name"] for c in head["spec"]["containers"]] == ["ray-head", rhoai.SIDECAR]
    assert head["spec"]["serviceAccountName"] == "life-oauth-proxy-sa"
    ray_env = {e["name"]: e.get("value") for e in head["spec"]["containers"][0]["env"]}
    assert ray_env["RAY_USE_TLS"] == "1" and ray_env["RAY_TLS_SERVER_CERT"] == "/home/ray/workspace/tls/tls.crt"
    assert "MY_POD_IP" in ray_env
    sidecar = head["spec"]["containers"][1]
    assert "--upstream=http://127.0.0.1:8265/" in sidecar["args"] and not sidecar.get("env")  # no TLS env on it
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in worker["spec"]["volumes"]} == {
        "ray-tls-vol": "ray-worker-secret-life"}
    assert "MY_POD_IP" not in {e["name"] for e in worker["spec"]["containers"][0]["env"]}
    assert not head["spec"].get("initContainers")  # no create-cert: cert-manager issued the certificates


def test_no_pod_before_the_tls_secrets_and_no_head_before_authentication(env):
    env.create(raycluster("gate", workers=1))
    original = env.platform._ensure_certificates
    env.platform._ensure_certificates = lambda rc: None  # cert-manager down
    env.settle()
    assert env.pods("gate") == []
    assert env.platform.pod_gate(env.rc("gate"), None).startswith("mTLS secrets not ready")
    env.platform._ensure_certificates = original
    env.settle()
    assert len(env.pods("gate")) == 2
    # a spec change bumps the generation: the head waits for AuthenticationReady of the new one
    rc = env.store.mutate(env.rc_t, NS, "gate", lambda o: o["spec"].update(rayVersion="2.52.0"))
    assert env.platform.pod_gate(rc, "head") == "WaitingForAuthentication"


def test_certificates_are_reissued_for_the_pods_addresses(env):
    env.create(raycluster("ips", workers=0))
    env.settle()
    first = env.secret("ray-head-secret-ips")["data"]
    head = env.pods("ips")[0]
    env.store.mutate(env.pod_t, NS, head["metadata"]["name"], lambda o: o.setdefault("status", {}).update(
        podIP="127.0.0.77"), subresource="status")
    env.settle(1)
    data = env.secret("ray-head-secret-ips")["data"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    ips = {str(ip) for ip in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
           .get_values_for_type(x509.IPAddress)}
    assert {"127.0.0.77", "127.0.0.1"} <= ips
    # a new certificate for the same key (cert-manager's rotationPolicy Never)
    assert data["tls.crt"] != first["tls.crt"] and data["tls.key"] == first["tls.key"]
    key = serialization.load_pem_private_key(base64.b64decode(data["tls.key"]), None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_deletion_waits_for_the_finalizer_then_every_object_goes(env):
    env.faults.set({"platform": {"finalizer_delay_s": 0}})
    env.create(raycluster("bye", workers=0))
    env.create(raycluster("stay", workers=0))
    env.settle()
    uid = env.rc("bye")["metadata"]["uid"]
    env.store.delete(env.rc_t, NS, "bye")
    assert env.rc("bye")["metadata"]["deletionTimestamp"]  # held by ray.io/authentication-resources
    env.settle()
    assert env.rc("bye") is None
    for gone in ("ray-head-secret-bye", "ray-worker-secret-bye", f"bye-ca-secret-{uid[:8]}"):
        assert env.secret(gone) is None, gone
    assert env.store.find(env.reg.get("gateway.networking.k8s.io", "httproutes"), rhoai.PLATFORM_NAMESPACE, "sandbox-bye") is None
    # another annotated cluster still uses the namespace's ReferenceGrant
    assert env.store.find(env.reg.get("gateway.networking.k8s.io", "referencegrants"), NS, rhoai.REFERENCE_GRANT)
    assert env.secret("ray-head-secret-stay") is not None


def test_the_gateway_serves_the_route_only_to_known_tokens_and_only_with_a_grant(env):
    """The data-science-gateway (sandbox/gateway.py) in front of the HTTPRoute: 401 without a
    token, the Exact match's 302, the PathPrefix rewritten to the Service; an unresolvable
    backend (no ReferenceGrant in its namespace) is a 500."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from werkzeug.test import Client

    from kfp_ray_sandbox.apiserver.rbac import Authenticator
    from kfp_ray_sandbox.gateway import Gateway

    seen = []

    class Dashboard(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append((self.path, self.headers.get("Authorization")))
            body = b'{"ray_version": "2.52.1"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env.create(raycluster("gw", workers=0))
        env.settle()
        port = server.server_address[1]
        env.store.mutate(env.reg.get("", "services"), NS, "gw-head-svc", lambda o: o["spec"].update(clusterIP="127.0.0.1"))
        route_t = env.reg.get("gateway.networking.k8s.io", "httproutes")
        env.store.mutate(route_t, rhoai.PLATFORM_NAMESPACE, "sandbox-gw",
                         lambda o: o["spec"]["rules"][1]["backendRefs"][0].update(port=port))
        auth = Authenticator(NS)
        client = Client(Gateway(env.store, env.reg, auth, rhoai.GATEWAY_NAMESPACE, rhoai.GATEWAY_NAME))
        token = {"Authorization": f"Bearer {auth.admin.token}"}

        assert client.get("/ray/sandbox/gw/api/version").status_code == 401
        redirect = client.get("/ray/sandbox/gw", headers=token)
        assert (redirect.status_code, redirect.headers["Location"]) == (302, "/ray/sandbox/gw/#/")
        ok = client.get("/ray/sandbox/gw/api/version?x=1", headers=token)
        assert ok.status_code == 200 and ok.get_data() == b'{"ray_version": "2.52.1"}'
        assert seen == [("/api/version?x=1", None)]  # rewritten; the user's token stays at the gateway
        assert client.get("/ray/sandbox/other/api/version", headers=token).status_code == 404

        env.store.delete(env.reg.get("gateway.networking.k8s.io", "referencegrants"), NS, rhoai.REFERENCE_GRANT)
        assert client.get("/ray/sandbox/gw/api/version", headers=token).status_code == 500
    finally:
        server.shutdown()
        server.server_close()


def test_gateway_api_types_are_openshifts_crds_and_kuberays_objects_fit_them(env):
    """HTTPRoute, Gateway (v1) and ReferenceGrant (v1beta1) come from the Gateway API v1.2.1 CRDs
    OpenShift 4.19 installs, on the 3.x profile only; what KubeRay writes passes their schemas as
    it is, and a route a user applies is routed as the CRD defaults it."""
    import copy

    from kfp_ray_sandbox.apiserver import schema
    from kfp_ray_sandbox.gateway import Gateway

    assert not [t for t in Registry().types if t.group == "gateway.networking.k8s.io"]
    served = {t.plural: t for t in env.reg.types if t.group == "gateway.networking.k8s.io"}
    assert {p: (t.version, t.subresources) for p, t in served.items()} == {
        "httproutes": ("v1", ("status",)), "gateways": ("v1", ("status",)), "referencegrants": ("v1beta1", ())}
    assert all(t.schema and not t.builtin and "gateway-api" in t.categories for t in served.values())
    assert [c["name"] for c in served["gateways"].columns] == ["Class", "Address", "Programmed", "Age"]

    env.create(raycluster("fit", workers=0))
    env.settle()
    for rt, ns, name in ((served["httproutes"], rhoai.PLATFORM_NAMESPACE, "sandbox-fit"),
                         (served["referencegrants"], NS, rhoai.REFERENCE_GRANT)):
        obj = env.store.find(rt, ns, name)
        checked = copy.deepcopy(obj)
        found = schema.check(checked, rt.schema)
        assert (found.unknown, found.errors, checked) == ([], [], obj), rt.kind

    env.store.mutate(env.reg.get("", "services"), NS, "fit-head-svc", lambda o: o["spec"].update(clusterIP="10.0.0.9"))
    applied = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "mine", "namespace": NS},
               "spec": {"parentRefs": [{"name": rhoai.GATEWAY_NAME, "namespace": rhoai.GATEWAY_NAMESPACE}],
                        "rules": [{"backendRefs": [{"name": "fit-head-svc", "port": 8265}]}]}}
    assert schema.check(applied, served["httproutes"].schema).errors == []
    rule = applied["spec"]["rules"][0]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"][0] == {"group": "", "kind": "Service", "name": "fit-head-svc", "port": 8265, "weight": 1}
    env.store.create(served["httproutes"], applied)
    gateway = Gateway(env.store, env.reg, None, rhoai.GATEWAY_NAMESPACE, rhoai.GATEWAY_NAME)
    route, rule, prefix = gateway._match("/elsewhere")
    assert (route["metadata"]["name"], prefix) == ("mine", "/")
    assert gateway._backend(route, rule) == "http://10.0.0.9:8265"
