"""dryRun=All on every verb, and watch as a v1.31 apiserver serves it, through the real client."""

from __future__ import annotations

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from kfp_ray_sandbox.apiserver import server
from kfp_ray_sandbox.apiserver.store import Store
from tests.helpers import raycluster
from tests.unit.apiserver_kit import NS, api_client, raw, start_api

WATCH_LIST_REFUSED = ('ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is '
                      "forbidden for watch unless the WatchList feature gate is enabled")


def _unchanged(api):
    """The store's resourceVersion: any write (and any event a controller could see) moves it."""
    return api.store.rv


def test_dry_run_create_update_patch_store_nothing(api, admin):
    v1 = client.CoreV1Api(admin)
    before = _unchanged(api)
    made = v1.create_namespaced_config_map(NS, {"metadata": {"generateName": "dry-"}, "data": {"a": "1"}}, dry_run="All")
    assert made.metadata.name.startswith("dry-") and made.metadata.uid and not made.metadata.resource_version
    assert _unchanged(api) == before
    assert not [c for c in v1.list_namespaced_config_map(NS).items if c.metadata.name.startswith("dry-")]
    pod = v1.create_namespaced_pod(NS, {"metadata": {"name": "dry-pod"}, "spec": {
        "containers": [{"name": "m", "image": "busybox"}]}}, dry_run="All")
    assert pod.status.phase == "Pending" and pod.spec.service_account_name == "default"  # defaulting and admission ran
    assert _unchanged(api) == before

    cm = v1.create_namespaced_config_map(NS, {"metadata": {"name": "real"}, "data": {"a": "1"}})
    before = _unchanged(api)
    cm.data = {"a": "2"}
    assert v1.replace_namespaced_config_map("real", NS, cm, dry_run="All").data == {"a": "2"}
    assert v1.patch_namespaced_config_map("real", NS, {"data": {"a": "3"}}, dry_run="All").data == {"a": "3"}
    json_patch = [{"op": "replace", "path": "/data/a", "value": "4"}]
    code, body = raw(admin, "PATCH", f"/api/v1/namespaces/{NS}/configmaps/real", json_patch,
                     "application/json-patch+json", [("dryRun", "All")])
    assert (code, body["data"]) == (200, {"a": "4"})
    assert _unchanged(api) == before
    assert v1.read_namespaced_config_map("real", NS).data == {"a": "1"}


def test_dry_run_server_side_apply_neither_creates_nor_changes(api, admin):
    co = client.CustomObjectsApi(admin)
    rc = raycluster("dry-apply")
    before = _unchanged(api)
    code, body = raw(admin, "PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/dry-apply", rc,
                     "application/apply-patch+yaml", [("fieldManager", "kubectl"), ("dryRun", "All")])
    assert code == 201 and body["spec"]["suspend"] is True  # Kueue's webhook ran
    assert _unchanged(api) == before
    with pytest.raises(ApiException) as exc:
        co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "dry-apply")
    assert exc.value.status == 404
    co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", rc)
    before = _unchanged(api)
    rc["metadata"]["labels"]["extra"] = "yes"
    code, body = raw(admin, "PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/dry-apply", rc,
                     "application/apply-patch+yaml", [("fieldManager", "kubectl"), ("dryRun", "All")])
    assert code == 200 and body["metadata"]["labels"]["extra"] == "yes"
    assert _unchanged(api) == before
    assert "extra" not in co.get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "dry-apply")["metadata"]["labels"]
    co.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "dry-apply")


def test_dry_run_delete_and_deletecollection_delete_nothing(api, admin):
    v1 = client.CoreV1Api(admin)
    for i in range(2):
        v1.create_namespaced_config_map(NS, {"metadata": {"name": f"keep-{i}", "labels": {"keep": "1"}}})
    v1.create_namespaced_config_map(NS, {"metadata": {"name": "fin", "finalizers": ["example.com/hold"]}})
    before = _unchanged(api)
    v1.delete_namespaced_config_map("keep-0", NS, dry_run="All")
    # kubectl sends DeleteOptions in the body: {"dryRun": ["All"]}
    code, _ = raw(admin, "DELETE", f"/api/v1/namespaces/{NS}/configmaps/keep-1",
                  {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]})
    assert code == 200
    code, body = raw(admin, "DELETE", f"/api/v1/namespaces/{NS}/configmaps/fin", query=[("dryRun", "All")])
    assert code == 200 and body["metadata"]["deletionTimestamp"]  # what a real delete would answer
    code, listed = raw(admin, "DELETE", f"/api/v1/namespaces/{NS}/configmaps",
                       query=[("labelSelector", "keep=1"), ("dryRun", "All")])
    assert code == 200 and sorted(i["metadata"]["name"] for i in listed["items"]) == ["keep-0", "keep-1"]
    assert _unchanged(api) == before
    assert {c.metadata.name for c in v1.list_namespaced_config_map(NS).items} >= {"keep-0", "keep-1", "fin"}
    assert not v1.read_namespaced_config_map("fin", NS).metadata.deletion_timestamp


def test_dry_run_values_other_than_all_are_refused(admin):
    code, body = raw(admin, "POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": "x"}},
                     query=[("dryRun", "Everything")])
    assert code == 422
    assert body["message"] == ('CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                               '[]string{"Everything"}: supported values: "All"')


def test_watch_list_is_refused_as_v1_31_refuses_it(admin):
    code, body = raw(admin, "GET", f"/api/v1/namespaces/{NS}/configmaps",
                     query=[("watch", "true"), ("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan"),
                            ("allowWatchBookmarks", "true")])
    assert code == 422 and body["message"] == WATCH_LIST_REFUSED
    assert body["details"] == {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
        {"reason": "FieldValueForbidden", "field": "sendInitialEvents",
         "message": "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}]}
    code, body = raw(admin, "GET", f"/api/v1/namespaces/{NS}/configmaps",
                     query=[("watch", "true"), ("resourceVersionMatch", "NotOlderThan")])
    assert code == 422 and "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided" in body["message"]


def test_watch_sends_bookmarks_when_allowed(admin):
    v1 = client.CoreV1Api(admin)
    since = v1.list_namespaced_config_map(NS).metadata.resource_version
    # The cacher bookmarks every minute and 2 s before the watch times out.
    events = list(watch.Watch().stream(v1.list_namespaced_config_map, NS, resource_version=since,
                                       allow_watch_bookmarks=True, timeout_seconds=3))
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) == 1
    assert int(bookmarks[0]["raw_object"]["metadata"]["resourceVersion"]) >= int(since)
    assert bookmarks[0]["raw_object"]["kind"] == "ConfigMap"
    plain = list(watch.Watch().stream(v1.list_namespaced_config_map, NS, resource_version=since, timeout_seconds=3))
    assert not [e for e in plain if e["type"] == "BOOKMARK"]


def test_too_old_resource_version_is_gone(tmp_path, monkeypatch):
    srv = start_api(tmp_path, store=Store(history=5))
    try:
        v1 = client.CoreV1Api(api_client(srv, srv.auth.admin))
        first = v1.create_namespaced_config_map(NS, {"metadata": {"name": "c0"}}).metadata.resource_version
        for i in range(1, 8):
            v1.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as exc:
            list(watch.Watch().stream(v1.list_namespaced_config_map, NS, resource_version=first, timeout_seconds=5))
        assert exc.value.status == 410
        assert "too old resource version" in exc.value.reason
        code, body = raw(v1.api_client, "GET", f"/api/v1/namespaces/{NS}/configmaps",
                         query=[("watch", "true"), ("resourceVersion", first), ("timeoutSeconds", "5")])
        assert code == 200 and body["type"] == "ERROR"
        assert body["object"]["code"] == 410 and body["object"]["reason"] == "Expired"
        assert body["object"]["message"].startswith(f"too old resource version: {first} (")
        # A resourceVersion from the future: waited for a little, then 504 as the cacher answers.
        monkeypatch.setattr(server, "FRESH_WAIT_S", 0.2)
        code, body = raw(v1.api_client, "GET", f"/api/v1/namespaces/{NS}/configmaps",
                         query=[("watch", "true"), ("resourceVersion", str(srv.store.rv + 100))])
        assert code == 504 and body["message"].startswith("Too large resource version")
    finally:
        srv.stop()


def test_watch_sees_changes_of_its_kind_while_others_change(api, admin):
    """The watch advances over other kinds' changes (it never spins on them) and still
    delivers its own."""
    v1 = client.CoreV1Api(admin)
    since = v1.list_namespaced_secret(NS).metadata.resource_version
    v1.create_namespaced_config_map(NS, {"metadata": {"name": "other-kind"}})
    v1.create_namespaced_secret(NS, {"metadata": {"name": "mine"}})
    seen = []
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_secret, NS, resource_version=since, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        w.stop()
    assert seen == [("ADDED", "mine")]
