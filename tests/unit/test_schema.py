"""Field decoding as kube-apiserver v1.31 does it: pruning, defaults, validation, fieldValidation."""

from __future__ import annotations

import copy

import pytest

from kfp_ray_sandbox.apiserver import schema
from kfp_ray_sandbox.apiserver.resources import Registry
from tests.helpers import raycluster
from tests.unit.apiserver_http import NS, Api

REG = Registry()
RAY = REG.get("ray.io", "rayclusters")
CQ = REG.get("kueue.x-k8s.io", "clusterqueues")
POD = REG.get("", "pods")
CM = REG.get("", "configmaps")


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    a = Api(tmp_path_factory.mktemp("schema"))
    yield a
    a.stop()


def test_unknown_fields_are_pruned_and_named_with_their_path():
    rc = raycluster("x")
    rc["spec"]["bogus"] = 1
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["colour"] = "red"
    rc["metadata"]["nickname"] = "y"
    out = schema.check(rc, RAY.schema)
    assert out.unknown == ["metadata.nickname", "spec.bogus", "spec.workerGroupSpecs[0].template.spec.containers[0].colour"]
    assert "bogus" not in rc["spec"] and "nickname" not in rc["metadata"]
    assert out.errors == [] and out.decode_error is None


def test_crd_defaults_are_applied_and_nulls_dropped():
    rc = raycluster("x")
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    rc["spec"]["suspend"] = None
    schema.check(rc, RAY.schema)
    group = rc["spec"]["workerGroupSpecs"][0]
    assert group["numOfHosts"] == 1  # KubeRay v1.4: default 1
    assert group["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert "suspend" not in rc["spec"]
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "q"}, "spec": {}}
    schema.check(cq, CQ.schema)
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO" and cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["flavorFungibility"] == {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"}


def test_crd_type_errors_are_invalid_with_the_apiservers_words():
    rc = raycluster("x")
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    del rc["spec"]["headGroupSpec"]
    out = schema.check(rc, RAY.schema)
    assert out.errors == [
        ("spec.headGroupSpec", "Required value"),
        ("spec.workerGroupSpecs[0].replicas", 'Invalid value: "string": spec.workerGroupSpecs[0].replicas in body '
                                              'must be of type integer: "string"')]


def test_builtin_type_errors_are_what_gos_decoder_refuses():
    out = schema.check({"metadata": {"name": "c"}, "data": {"a": 1}}, CM.schema, builtin=True)
    assert out.decode_error == "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": "nginx"}}
    out = schema.check(pod, POD.schema, builtin=True)
    assert out.decode_error == ("json: cannot unmarshal string into Go struct field PodSpec.spec.containers "
                                "of type []v1.Container")
    labels = {"metadata": {"name": "c", "labels": {"a": True}}}
    out = schema.check(labels, CM.schema, builtin=True)
    assert out.decode_error == ("json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels "
                                "of type string")


def test_builtin_unknown_fields_required_fields_and_opaque_json():
    pod = {"metadata": {"name": "p", "managedFields": [{"manager": "m", "fieldsType": "FieldsV1",
                                                        "fieldsV1": {"f:spec": {}}}]},
           "spec": {"containers": [{"image": "i", "resources": {"limits": {"cpu": 1}}, "shoe": 1}]}}
    out = schema.check(pod, POD.schema, builtin=True)
    assert out.unknown == ["spec.containers[0].shoe"]
    assert out.errors == [("spec.containers[0].name", "Required value")]
    assert pod["metadata"]["managedFields"][0]["fieldsV1"] == {"f:spec": {}}  # FieldsV1 is opaque JSON
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == 1  # a Quantity may be a number


def test_duplicate_fields_are_found_last_value_wins():
    obj, dups = schema.loads(b'{"metadata": {"name": "a", "name": "b"}, "data": {"k": "1", "k": "2"}}')
    assert obj == {"metadata": {"name": "b"}, "data": {"k": "2"}}
    assert dups == ["metadata.name", "data.k"]
    assert type(obj["metadata"]) is dict


def _rc_body(name: str, **extra) -> dict:
    rc = raycluster(name, queue=None)
    rc["spec"]["suspend"] = True
    rc["spec"].update(extra)
    return rc


def test_field_validation_over_http(api):
    base = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
    # absent = Warn (the apiserver's default since v1.23): pruned, one Warning per field
    code, hdrs, body = api.json("POST", base, _rc_body("warned", bogus=1, other="x"))
    assert code == 201 and "bogus" not in body["spec"]
    assert hdrs["Warning"] == '299 - "unknown field \\"spec.bogus\\"", 299 - "unknown field \\"spec.other\\""'
    assert body["spec"]["workerGroupSpecs"][0]["numOfHosts"] == 1
    # Ignore: pruned silently
    code, hdrs, body = api.json("POST", base + "?fieldValidation=Ignore", _rc_body("ignored", bogus=1))
    assert code == 201 and "bogus" not in body["spec"] and hdrs["Warning"] is None
    # Strict: refused, nothing stored
    code, _, st = api.json("POST", base + "?fieldValidation=Strict", _rc_body("strict", bogus=1))
    assert (code, st["reason"]) == (400, "BadRequest")
    assert st["message"] == ('RayCluster in version "v1" cannot be handled as a RayCluster: strict decoding error: '
                             'unknown field "spec.bogus"')
    assert api.call("GET", f"{base}/strict")[0] == 404
    # duplicates, on a built-in
    raw = b'{"metadata": {"name": "dup", "name": "dup"}, "data": {"a": "1"}}'
    code, _, st = api.json("POST", f"/api/v1/namespaces/{NS}/configmaps?fieldValidation=Strict", raw)
    assert code == 400 and st["message"] == ('ConfigMap in version "v1" cannot be handled as a ConfigMap: strict '
                                             'decoding error: duplicate field "metadata.name"')
    code, hdrs, _ = api.json("POST", f"/api/v1/namespaces/{NS}/configmaps", raw)
    assert code == 201 and hdrs["Warning"] == '299 - "duplicate field \\"metadata.name\\""'
    # a patch is validated after it is applied; Strict names the field without the create wording
    code, _, st = api.json("PATCH", f"{base}/warned?fieldValidation=Strict", {"spec": {"bogus": 2}},
                           {"Content-Type": "application/merge-patch+json"})
    assert code == 400 and st["message"] == 'strict decoding error: unknown field "spec.bogus"'


def test_builtin_decode_errors_over_http(api):
    code, _, st = api.json("POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": "c"}, "data": {"a": 1}})
    assert (code, st["reason"]) == (400, "BadRequest")
    assert st["message"] == ('ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal '
                             'number into Go struct field ConfigMap.data of type string')
    code, hdrs, body = api.json("POST", f"/api/v1/namespaces/{NS}/configmaps",
                                {"metadata": {"name": "c2"}, "data": {"a": "1"}, "extra": {"x": 1}})
    assert code == 201 and "extra" not in body and hdrs["Warning"] == '299 - "unknown field \\"extra\\""'


def test_server_side_apply_refuses_undeclared_fields_whatever_the_directive(api):
    rc = _rc_body("ssa", bogus=1)
    code, _, st = api.json("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/ssa?fieldManager=t&fieldValidation=Ignore",
                           rc, {"Content-Type": "application/apply-patch+yaml"})
    assert code == 500 and st["message"] == (f"failed to create typed patch object ({NS}/ssa; ray.io/v1, Kind=RayCluster): "
                                             ".spec.bogus: field not declared in schema")
    good = copy.deepcopy(rc)
    del good["spec"]["bogus"]
    code, _, body = api.json("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/ssa?fieldManager=t", good,
                             {"Content-Type": "application/apply-patch+yaml"})
    assert code == 201 and body["spec"]["workerGroupSpecs"][0]["numOfHosts"] == 1
