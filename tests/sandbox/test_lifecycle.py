"""Namespace deletion with a running Ray cluster in it: Terminating, new content refused,
everything deleted (finalizers respected), its Ray processes stopped, then it is gone."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client import ApiException

from tests.helpers import eventually, raycluster

pytestmark = pytest.mark.ray
DOOMED = "doomed"


def test_deleting_a_namespace_deletes_its_content_and_stops_its_ray(sbx):
    api = sbx.api_client()
    v1, co = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    ns = v1.create_namespace({"metadata": {"name": DOOMED}})
    assert ns.spec.finalizers == ["kubernetes"] and ns.status.phase == "Active"
    try:
        v1.create_namespaced_config_map(DOOMED, {"metadata": {"name": "settings"}, "data": {"a": "1"}})
        co.create_namespaced_custom_object("ray.io", "v1", DOOMED, "rayclusters", raycluster("inside", workers=0, memory="1Gi", queue=None))
        eventually(lambda: (co.get_namespaced_custom_object("ray.io", "v1", DOOMED, "rayclusters", "inside").get("status") or {})
                   .get("state") == "ready", 150, what="the cluster in the namespace to be ready")
        assert [p["namespace"] for p in sbx.processes() if p["cluster"] == "inside"] == [DOOMED]

        v1.delete_namespace(DOOMED)
        ns = v1.read_namespace(DOOMED)
        assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp and ns.spec.finalizers == ["kubernetes"]
        with pytest.raises(ApiException) as exc:
            v1.create_namespaced_config_map(DOOMED, {"metadata": {"name": "late"}})
        assert exc.value.status == 403 and json.loads(exc.value.body)["message"] == (
            f'configmaps "late" is forbidden: unable to create new content in namespace {DOOMED} because it is being terminated')
        with pytest.raises(ApiException) as exc:
            v1.delete_namespace(DOOMED)
        assert exc.value.status == 409

        def gone():
            try:
                v1.read_namespace(DOOMED)
            except ApiException as e:
                return e.status == 404
            return False
        eventually(gone, 60, what="the namespace to be emptied and removed")
        assert not [p for p in sbx.processes() if p["namespace"] == DOOMED]
    finally:
        try:
            v1.delete_namespace(DOOMED)
        except ApiException:
            pass
