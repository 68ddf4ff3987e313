"""The API server's REST semantics, seen through the real kubernetes client."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import types
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kfp_ray_sandbox.apiserver import server
from kfp_ray_sandbox.apiserver.rbac import Authenticator
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.server import ApiServer
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.certs import ServingCA
from kfp_ray_sandbox.controllers.kueue import KueueController
from kfp_ray_sandbox.faults import Faults
from tests.helpers import eventually, raycluster

NS = "sandbox"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """API server with the Kueue/ODH webhooks but no controller loops (nothing runs)."""
    reg, store, auth, faults = Registry(), Store(), Authenticator(NS), Faults()
    store.create(reg.get("", "namespaces"), {"metadata": {"name": NS, "labels": {"kueue.openshift.io/managed": "true"}}})
    store.create(reg.get("", "namespaces"), {"metadata": {"name": "plain"}})
    tmp = tmp_path_factory.mktemp("audit")
    ca = ServingCA()
    (tmp / "ca.crt").write_bytes(ca.ca_pem)
    srv = ApiServer(store, reg, auth, faults, audit_path=tmp / "audit.log", tls=ca.server_context())
    srv.ca_file = str(tmp / "ca.crt")
    srv.admission.append(KueueController(store, reg, faults).admission)
    srv.start()
    yield srv
    srv.stop()


# `admin` and `runner` clients of this module's `api`: tests/unit/conftest.py.


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_discovery_presents_openshift_kuberay_and_kueue(admin):
    groups = {g.name: [v.version for v in g.versions] for g in client.ApisApi(admin).get_api_versions().groups}
    assert groups["ray.io"] == ["v1"]
    assert groups["kueue.x-k8s.io"] == ["v1beta1"]
    assert "route.openshift.io" in groups and "authentication.k8s.io" in groups
    resources = client.CustomObjectsApi(admin).get_api_resources("ray.io", "v1").resources
    assert {r.name for r in resources} >= {"rayclusters", "rayclusters/status"}
    assert client.VersionApi(admin).get_code().major == "1"
    assert [v for v in client.CoreApi(admin).get_api_versions().versions] == ["v1"]


def test_crud_bookkeeping_and_not_found_wording(admin):
    v1 = client.CoreV1Api(admin)
    cm = v1.create_namespaced_config_map(NS, {"metadata": {"generateName": "cfg-"}, "data": {"a": "1"}})
    assert cm.metadata.name.startswith("cfg-") and len(cm.metadata.name) == 9
    assert cm.metadata.uid and cm.metadata.resource_version and cm.metadata.creation_timestamp
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_config_map(NS, {"metadata": {"name": cm.metadata.name}})
    assert exc.value.status == 409 and exc.value.reason == "Conflict"
    assert status_of(exc.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("nope", NS)
    assert exc.value.status == 404 and status_of(exc.value)["message"] == 'configmaps "nope" not found'
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_config_map("missing-ns", {"metadata": {"name": "x"}})
    assert status_of(exc.value)["message"] == 'namespaces "missing-ns" not found'
    v1.delete_namespaced_config_map(cm.metadata.name, NS)
    with pytest.raises(ApiException):
        v1.read_namespaced_config_map(cm.metadata.name, NS)


def test_update_with_stale_resource_version_conflicts(admin):
    v1 = client.CoreV1Api(admin)
    cm = v1.create_namespaced_config_map(NS, {"metadata": {"name": "rv"}, "data": {"a": "1"}})
    cm.data = {"a": "2"}
    v1.replace_namespaced_config_map("rv", NS, cm)
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map("rv", NS, cm)  # still carries the old resourceVersion
    assert exc.value.status == 409 and status_of(exc.value)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(exc.value)["message"]


def test_label_and_field_selectors(admin):
    v1 = client.CoreV1Api(admin)
    for name, tier in (("s-a", "web"), ("s-b", "db"), ("s-c", "db")):
        v1.create_namespaced_secret(NS, {"metadata": {"name": name, "labels": {"tier": tier, "sel": "yes"}}})
    names = lambda **kw: sorted(s.metadata.name for s in v1.list_namespaced_secret(NS, **kw).items)  # noqa: E731
    assert names(label_selector="sel=yes,tier=db") == ["s-b", "s-c"]
    assert names(label_selector="sel,tier in (web)") == ["s-a"]
    assert names(label_selector="sel=yes,tier!=db") == ["s-a"]
    assert names(label_selector="sel=yes", field_selector="metadata.name=s-c") == ["s-c"]
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_secret(NS, label_selector="tier in web)")
    assert exc.value.status == 400


def test_patches_and_status_subresource(admin):
    co = client.CustomObjectsApi(admin)
    rc = co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", raycluster("p1", queue=None))
    assert rc["metadata"]["generation"] == 1
    # merge patch of metadata leaves generation alone; of spec bumps it
    rc = co.patch_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "p1", {"metadata": {"labels": {"x": "y"}}})
    assert rc["metadata"]["labels"]["x"] == "y" and rc["metadata"]["generation"] == 1
    from kubernetes.dynamic import DynamicClient

    res = DynamicClient(admin).resources.get(api_version="ray.io/v1", kind="RayCluster")
    rc = res.patch(body=[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0}], name="p1",
                   namespace="plain", content_type="application/json-patch+json").to_dict()
    assert rc["spec"]["workerGroupSpecs"][0]["replicas"] == 0 and rc["metadata"]["generation"] == 2
    # status is ignored on the main resource and written through /status
    rc = co.patch_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "p1", {"status": {"state": "ready"}})
    assert "status" not in rc
    rc = co.patch_namespaced_custom_object_status("ray.io", "v1", "plain", "rayclusters", "p1", {"status": {"state": "ready"}})
    assert rc["status"]["state"] == "ready" and rc["metadata"]["generation"] == 2


def test_server_side_apply_creates_then_updates_through_dynamic_client(admin):
    from kubernetes.dynamic import DynamicClient

    res = DynamicClient(admin).resources.get(api_version="ray.io/v1", kind="RayCluster")
    body = raycluster("ssa", queue=None)
    body["metadata"]["namespace"] = "plain"
    created = res.server_side_apply(body=body, name="ssa", namespace="plain", field_manager="codeflare-sdk")
    assert created.metadata.generation == 1
    assert [m.manager for m in created.metadata.managedFields] == ["codeflare-sdk"]
    body["spec"]["workerGroupSpecs"][0]["replicas"] = 0
    updated = res.server_side_apply(body=body, name="ssa", namespace="plain", field_manager="codeflare-sdk")
    assert updated.spec.workerGroupSpecs[0].replicas == 0 and updated.metadata.generation == 2


def test_schema_rejects_wrong_types_and_unknown_fields(admin):
    co = client.CustomObjectsApi(admin)
    bad = raycluster("bad", queue=None)
    bad["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    bad["spec"]["headGroupSpec"]["bogus"] = 1
    # Strict: the decoder refuses the unknown field before anything is validated
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", bad, field_validation="Strict")
    st = status_of(exc.value)
    assert exc.value.status == 400 and st["reason"] == "BadRequest"
    assert st["message"] == ('RayCluster in version "v1" cannot be handled as a RayCluster: strict decoding error: '
                             'unknown field "spec.headGroupSpec.bogus"')
    # by default (Warn) the unknown field is pruned; the wrong type is still invalid
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", bad)
    st = status_of(exc.value)
    assert exc.value.status == 422 and st["reason"] == "Invalid"
    assert st["message"] == ('RayCluster.ray.io "bad" is invalid: spec.workerGroupSpecs[0].replicas: Invalid value: '
                             '"string": spec.workerGroupSpecs[0].replicas in body must be of type integer: "string"')
    assert {c["field"] for c in st["details"]["causes"]} == {"spec.workerGroupSpecs[0].replicas"}
    # fieldValidation=Ignore prunes unknown fields, as the apiserver does
    lenient = raycluster("lenient", queue=None)
    lenient["spec"]["bogus"] = True
    made = co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", lenient, field_validation="Ignore")
    assert "bogus" not in made["spec"]
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(admin).create_namespaced_secret(NS, {"metadata": {"name": "Bad_Name"}})
    assert exc.value.status == 422 and "RFC 1123 subdomain" in status_of(exc.value)["message"]


def test_odh_webhook_requires_queue_label_and_kueue_suspends(admin):
    co = client.CustomObjectsApi(admin)
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", raycluster("nolabel", queue=None))
    assert exc.value.status == 403
    assert 'missing required label "kueue.x-k8s.io/queue-name"' in status_of(exc.value)["message"]
    made = co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", raycluster("labelled"))
    assert made["spec"]["suspend"] is True
    # outside a Kueue-managed namespace the label is not required and nothing is suspended
    plain = co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", raycluster("free", queue=None))
    assert "suspend" not in plain["spec"]


def test_pipeline_runner_rbac_matches_the_dspa_role(runner):
    co = client.CustomObjectsApi(runner)
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", raycluster("by-runner"))
    assert co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "by-runner")["metadata"]["name"] == "by-runner"
    with pytest.raises(ApiException) as exc:
        co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "localqueues")
    assert exc.value.status == 403 and status_of(exc.value)["message"] == (
        'localqueues.kueue.x-k8s.io is forbidden: User "system:serviceaccount:sandbox:pipeline-runner-dspa" '
        'cannot list resource "localqueues" in API group "kueue.x-k8s.io" in the namespace "sandbox"')
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(runner).list_namespaced_event(NS)
    assert exc.value.status == 403
    with pytest.raises(ApiException) as exc:
        co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", watch=True, _preload_content=False)
    assert exc.value.status == 403 and 'cannot watch resource "rayclusters"' in status_of(exc.value)["message"]
    with pytest.raises(ApiException) as exc:
        co.list_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters")
    assert exc.value.status == 403  # the Role is namespaced to `sandbox`
    assert client.CoreV1Api(runner).list_namespaced_secret(NS) is not None


def test_bad_token_is_unauthorized(api):
    cfg = client.Configuration()
    cfg.host = api.url
    cfg.ssl_ca_cert = api.ca_file
    cfg.api_key = {"authorization": "Bearer not-a-token"}
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(client.ApiClient(cfg)).list_namespaced_secret(NS)
    assert exc.value.status == 401 and exc.value.reason == "Unauthorized"


def test_watch_streams_changes(admin):
    from kubernetes import watch

    v1 = client.CoreV1Api(admin)
    seen = []
    # Watch from a resourceVersion taken before the changes: the stream sees them all,
    # however late the watching thread starts.
    since = v1.list_namespaced_config_map(NS, label_selector="w=1").metadata.resource_version

    def consume():
        w = watch.Watch()
        for ev in w.stream(v1.list_namespaced_config_map, NS, label_selector="w=1", timeout_seconds=120,
                           resource_version=since):
            seen.append((ev["type"], ev["object"].metadata.name))
            if ev["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    v1.create_namespaced_config_map(NS, {"metadata": {"name": "watched", "labels": {"w": "1"}}})
    v1.patch_namespaced_config_map("watched", NS, {"data": {"k": "v"}})
    v1.delete_namespaced_config_map("watched", NS)
    t.join(timeout=150)  # bounds on a hang: the stream ends at the DELETED
    assert seen == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]


def test_owner_references_are_garbage_collected(admin):
    v1 = client.CoreV1Api(admin)
    owner = v1.create_namespaced_config_map(NS, {"metadata": {"name": "owner"}})
    v1.create_namespaced_secret(NS, {"metadata": {"name": "owned", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}})
    v1.delete_namespaced_config_map("owner", NS)
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_secret("owned", NS)
    assert exc.value.status == 404


def test_audit_log_records_identity_verb_and_status_but_no_token(api, admin, runner):
    with pytest.raises(ApiException):
        client.CustomObjectsApi(runner).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "localqueues")
    text = open(api.audit._path).read()
    entries = [json.loads(line) for line in text.splitlines()]
    denied = [e for e in entries if e["path"].endswith("/localqueues") and e["code"] == 403]
    assert denied and denied[-1]["user"] == "system:serviceaccount:sandbox:pipeline-runner-dspa"
    assert denied[-1]["verb"] == "list" and denied[-1]["method"] == "GET"
    assert api.auth.admin.token not in text and api.auth.pipeline_runner.token not in text


def test_faults_bursts_and_resets(api, admin):
    v1 = client.CoreV1Api(admin)
    # A 429 carries Retry-After, which the kubernetes client's urllib3 honours by itself:
    # the call succeeds, and the audit log shows the throttled attempt before it.
    api.faults.set({"api": {"errors": {"code": 429, "count": 1, "path": "configmaps"}}})
    v1.list_namespaced_config_map(NS, label_selector="after=429")
    tried = [json.loads(line)["code"] for line in open(api.audit._path) if "after%3D429" in line or "after=429" in line]
    assert tried == [429, 200]
    # ...until the burst outlasts its retries (3): then the caller sees the 429.
    api.faults.set({"api": {"errors": {"code": 429, "count": 10, "path": "configmaps"}}})
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_config_map(NS)
    assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "1"
    api.faults.set({"api": {"errors": {"code": 503, "count": 2, "path": "configmaps"}}})
    codes = []
    for _ in range(3):
        try:
            v1.list_namespaced_config_map(NS)
            codes.append(200)
        except ApiException as e:
            codes.append(e.status)
    assert codes == [503, 503, 200]
    api.faults.set({"api": {"resets": {"count": 1, "path": "/version"}}})
    req = urllib.request.Request(api.url + "/version", headers={"Authorization": f"Bearer {api.auth.admin.token}"})
    tls = ssl.create_default_context(cafile=api.ca_file)
    with pytest.raises(ConnectionResetError):
        try:
            urllib.request.urlopen(req, timeout=5, context=tls)
        except urllib.error.URLError as exc:
            raise exc.reason from None
    assert json.loads(urllib.request.urlopen(req, timeout=5, context=tls).read())["major"] == "1"
    api.faults.clear()


class ServerWaits:
    """The API server's injected latencies (its time.sleep), recorded, not slept: each returns
    at once while `gate` is set, else when the test sets it (a delayed answer held for as long as
    the test needs, not for a number of milliseconds that a busy machine may exceed)."""

    def __init__(self):
        self.delays: list[float] = []
        self.gate = threading.Event()
        self.gate.set()

    def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        assert self.gate.wait(60), "the test never released the delayed request"


def test_cluster_scoped_api_faults_hit_only_that_raycluster(api, admin, monkeypatch):
    """clusters.<glob>.api_errors / api_resets / api_latency_ms: the requests on that RayCluster
    object (its create, matched by the body's name, get, patch, delete), narrowed by verbs."""
    waits = ServerWaits()
    monkeypatch.setattr(server, "time", types.SimpleNamespace(
        **{k: getattr(time, k) for k in ("time", "time_ns", "monotonic")}, sleep=waits.sleep))
    co = client.CustomObjectsApi(admin)
    seen = len(open(api.audit._path).readlines())
    api.faults.set({"clusters": {"flaky-*": {"api_errors": [{"code": 503, "count": 1, "verbs": ["create"]},
                                                            {"code": 500, "count": 1, "verbs": ["get"]}],
                                             "api_resets": {"count": 1, "verbs": ["delete"]},
                                             "api_latency_ms": 300}}})
    try:
        co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", raycluster("steady", queue=None))
        with pytest.raises(ApiException) as exc:
            co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", raycluster("flaky-1", queue=None))
        assert exc.value.status == 503
        co.get_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "steady")  # not that cluster
        assert waits.delays == [0.3]  # the failed create of flaky-1 waited; steady's requests did not
        co.create_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", raycluster("flaky-1", queue=None))
        assert waits.delays == [0.3, 0.3]
        with pytest.raises(ApiException) as exc:
            co.get_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "flaky-1")
        assert exc.value.status == 500
        co.get_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "flaky-1")
        # the reset DELETE has no answer at all; urllib3 retries an idempotent verb by itself
        co.delete_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "flaky-1")
        co.delete_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "steady")
        # an answer delayed after the request was carried out: the object exists meanwhile
        api.faults.patch({"clusters": {"flaky-*": {"api_latency_ms": {"ms": 1500, "verbs": ["create"], "after": True}}}})
        done, delays = threading.Event(), len(waits.delays)
        waits.gate.clear()  # its answer is held until the object is seen
        threading.Thread(target=lambda: (co.create_namespaced_custom_object(
            "ray.io", "v1", "plain", "rayclusters", raycluster("flaky-2", queue=None)), done.set()), daemon=True).start()
        eventually(lambda: api.store.find(api.registry.get("ray.io", "rayclusters"), "plain", "flaky-2") is not None,
                   60, 0.02, what="the create to be carried out")
        eventually(lambda: len(waits.delays) > delays, 60, 0.02, what="the create's answer to be delayed")
        assert not done.is_set() and waits.delays[delays:] == [1.5]
        waits.gate.set()
        assert done.wait(60)
        co.delete_namespaced_custom_object("ray.io", "v1", "plain", "rayclusters", "flaky-2")
        entries = [json.loads(line) for line in open(api.audit._path).readlines()[seen:]]
        flaky = [(e["method"], e["code"]) for e in entries if "flaky-1" in e["path"] or (
            e["method"] == "POST" and e["path"].endswith("/plain/rayclusters"))]
        assert flaky[:7] == [("POST", 201), ("POST", 503), ("POST", 201), ("GET", 500), ("GET", 200),
                             ("DELETE", 0), ("DELETE", 200)]
    finally:
        waits.gate.set()
        api.faults.clear()


def test_audit_line_is_written_before_the_answer(api, admin):
    """A client that reads the audit log right after its call always finds its own line."""
    v1 = client.CoreV1Api(admin)
    for i in range(200):
        v1.list_namespaced_config_map(NS, label_selector=f"probe={i}")
        with open(api.audit._path) as fh:
            last = json.loads(fh.readlines()[-1])
        assert f"probe%3D{i}" in last["query"] and last["code"] == 200


def test_unread_request_bodies_never_become_the_next_request(api, runner):
    # Through the real client: a forbidden create (answered before its body matters),
    # then a read on the same pool gets its own answer.
    v1 = client.CoreV1Api(runner)
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_service_account("plain", {"metadata": {"name": "x" * 2000}})
    assert exc.value.status == 403
    assert v1.list_namespaced_secret(NS) is not None
    # On the wire: an unauthenticated POST with a body, and a second request pipelined
    # right behind it. The body is consumed; nothing after it is taken for a request.
    body = json.dumps({"metadata": {"name": "GET /version HTTP/1.1"}}).encode()
    host, port = api.url.split("//")[1].split(":")
    first = (f"POST /api/v1/namespaces/{NS}/configmaps HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    second = f"GET /version HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    tls = ssl.create_default_context(cafile=api.ca_file)
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            tls.wrap_socket(raw, server_hostname=host) as conn:
        conn.sendall(first + second)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    statuses = [line for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    assert statuses == [b"HTTP/1.1 401 Unauthorized"], received[:400]
    assert b"Connection: close" in received


def test_tls_is_required_and_verified(api):
    host_port = api.url.split("//")[1]
    # Plain HTTP to the HTTPS port gets no API answer.
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://{host_port}/version", timeout=5).read()
    # A client that trusts another CA refuses the server.
    other = ServingCA()
    ctx = ssl.create_default_context(cadata=other.ca_pem.decode())
    with pytest.raises(urllib.error.URLError) as exc:
        urllib.request.urlopen(api.url + "/version", timeout=5, context=ctx)
    assert isinstance(exc.value.reason, ssl.SSLCertVerificationError)


def test_a_silent_connection_does_not_stall_the_server(api, admin):
    """The TLS handshake runs in the connection's own thread: a client that connects and
    says nothing holds no one else up."""
    host, port = api.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10):
        assert client.VersionApi(admin).get_code().major == "1"
