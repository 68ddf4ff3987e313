"""Write semantics as kube-apiserver v1.31 has them, through the real kubernetes client: updates
without resourceVersion, status and resourceVersion on create, finalizers of an object being
deleted, watches with selectors, paged LISTs, deletion propagation, malformed query integers."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from kfp_ray_sandbox.apiserver.store import Store
from tests.helpers import eventually, raycluster
from tests.unit.apiserver_kit import NS, api_client, raw, start_api, status_of

PLAIN = "plain"


def _rc(co, name, **kw):
    return co.create_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", raycluster(name, queue=None, **kw))


def _refused(call, *args, **kw) -> tuple[int, dict]:
    with pytest.raises(ApiException) as exc:
        call(*args, **kw)
    return exc.value.status, status_of(exc.value)


# --- 1. PUT without resourceVersion -------------------------------------------------------

def test_custom_resource_update_needs_resource_version(admin):
    co = client.CustomObjectsApi(admin)
    rc = _rc(co, "no-rv")
    rc["metadata"].pop("resourceVersion")
    code, st = _refused(co.replace_namespaced_custom_object, "ray.io", "v1", PLAIN, "rayclusters", "no-rv", rc)
    assert (code, st["reason"]) == (422, "Invalid")
    assert st["message"] == ('rayclusters.ray.io "no-rv" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
                             "must be specified for an update")
    assert st["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                                        "message": "Invalid value: 0x0: must be specified for an update"}]
    code, st = _refused(co.replace_namespaced_custom_object_status, "ray.io", "v1", PLAIN, "rayclusters", "no-rv",
                        {**rc, "status": {"state": "ready"}})
    assert code == 422 and "must be specified for an update" in st["message"]
    # With the version it read, the update goes through.
    current = co.get_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", "no-rv")
    current["metadata"]["labels"] = {"a": "b"}
    assert co.replace_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", "no-rv", current)["metadata"]["labels"] == {"a": "b"}


def test_core_types_allow_unconditional_update(admin):
    v1 = client.CoreV1Api(admin)
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "uncond"}, "data": {"a": "1"}})
    updated = v1.replace_namespaced_config_map("uncond", PLAIN, {"metadata": {"name": "uncond"}, "data": {"a": "2"}})
    assert updated.data == {"a": "2"}
    v1.create_namespaced_secret(PLAIN, {"metadata": {"name": "uncond"}, "stringData": {"k": "v"}})
    assert v1.replace_namespaced_secret("uncond", PLAIN, {"metadata": {"name": "uncond"}, "data": {}}).metadata.name == "uncond"


# --- 2. status on create ------------------------------------------------------------------

def test_status_sent_on_create_is_dropped_with_the_status_subresource(admin):
    co = client.CustomObjectsApi(admin)
    made = co.create_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters",
                                              {**raycluster("with-status", queue=None), "status": {"state": "ready"}})
    assert "status" not in made
    assert "status" not in co.get_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", "with-status")
    # A CRD without the subresource keeps it (ResourceFlavor has no status).
    flavor = co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors",
                                             {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                              "metadata": {"name": "kept"}, "spec": {}})
    assert flavor["metadata"]["name"] == "kept"
    # A Pod's status is reset to Pending as its strategy does.
    pod = client.CoreV1Api(admin).create_namespaced_pod(PLAIN, {
        "metadata": {"name": "status-pod"}, "spec": {"containers": [{"name": "m", "image": "busybox"}]},
        "status": {"phase": "Running"}})
    assert pod.status.phase == "Pending"


# --- 3. resourceVersion on create ---------------------------------------------------------

def test_create_with_resource_version_is_refused(admin):
    v1 = client.CoreV1Api(admin)
    code, st = _refused(v1.create_namespaced_config_map, PLAIN,
                        {"metadata": {"name": "has-rv", "resourceVersion": "12"}, "data": {}})
    assert code == 500 and "reason" not in st
    assert st["message"] == "resourceVersion should not be set on objects to be created"
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("has-rv", PLAIN)
    assert exc.value.status == 404
    # "0" is no version; dry-run never reaches storage's check.
    assert v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "rv-zero", "resourceVersion": "0"}}).metadata.name
    assert v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "rv-dry", "resourceVersion": "12"}},
                                           dry_run="All").metadata.name == "rv-dry"


# --- 7. finalizers of an object being deleted ---------------------------------------------

def test_no_new_finalizers_on_an_object_being_deleted(admin):
    v1 = client.CoreV1Api(admin)
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "fin", "finalizers": ["example.com/a"]}})
    v1.delete_namespaced_config_map("fin", PLAIN)
    code, st = _refused(v1.patch_namespaced_config_map, "fin", PLAIN,
                        {"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}})
    assert (code, st["reason"]) == (422, "Invalid")
    assert st["message"] == ('ConfigMap "fin" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added '
                             'if the object is being deleted, found new finalizers []string{"example.com/b", "example.com/c"}')
    assert st["details"]["causes"][0]["reason"] == "FieldValueForbidden"
    cm = v1.read_namespaced_config_map("fin", PLAIN)
    cm.metadata.finalizers.append("example.com/b")
    code, _ = _refused(v1.replace_namespaced_config_map, "fin", PLAIN, cm)
    assert code == 422
    # Removing the last one finishes the deletion.
    v1.patch_namespaced_config_map("fin", PLAIN, {"metadata": {"finalizers": None}})
    eventually(lambda: "fin" not in [c.metadata.name for c in v1.list_namespaced_config_map(PLAIN).items],
               what="fin deleted")


# --- 4. watches with selectors ------------------------------------------------------------

def test_watch_with_selector_sees_objects_enter_and_leave(admin):
    v1 = client.CoreV1Api(admin)
    rv = v1.list_namespaced_config_map(PLAIN).metadata.resource_version
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "w1", "labels": {"team": "b"}}})
    v1.patch_namespaced_config_map("w1", PLAIN, {"metadata": {"labels": {"team": "a"}}})  # starts matching
    v1.patch_namespaced_config_map("w1", PLAIN, {"data": {"x": "1"}})  # still matching
    v1.patch_namespaced_config_map("w1", PLAIN, {"metadata": {"labels": {"team": "c"}}})  # stops matching
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "w2", "labels": {"team": "a"}}})
    v1.delete_namespaced_config_map("w2", PLAIN)
    last = v1.read_namespaced_config_map("w1", PLAIN).metadata.resource_version
    seen = []
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_config_map, PLAIN, label_selector="team=a", resource_version=rv,
                       timeout_seconds=30):
        obj = ev["object"]
        seen.append((ev["type"], obj.metadata.name, obj.metadata.labels.get("team")))
        if len(seen) == 5:
            w.stop()
    assert seen == [("ADDED", "w1", "a"), ("MODIFIED", "w1", "a"), ("DELETED", "w1", "a"),
                    ("ADDED", "w2", "a"), ("DELETED", "w2", "a")]
    assert int(last) > int(rv)


def test_watch_with_field_selector_leaving_is_deleted_at_the_events_version(admin):
    v1 = client.CoreV1Api(admin)
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "fw"}})
    rv = v1.read_namespaced_config_map("fw", PLAIN).metadata.resource_version
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "fw2"}})
    v1.patch_namespaced_config_map("fw", PLAIN, {"data": {"a": "1"}})
    changed = v1.read_namespaced_config_map("fw", PLAIN).metadata.resource_version
    w = watch.Watch()
    events = list(w.stream(v1.list_namespaced_config_map, PLAIN, field_selector="metadata.name=fw",
                           resource_version=rv, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name, e["object"].metadata.resource_version) for e in events] == [
        ("MODIFIED", "fw", changed)]


# --- 5. paged LIST ------------------------------------------------------------------------

def test_list_pages_are_one_consistent_snapshot(admin):
    v1 = client.CoreV1Api(admin)
    ns = "sandbox"
    for i in range(5):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"page-{i}", "labels": {"paged": "yes"}}})
    everything = [c.metadata.name for c in v1.list_namespaced_config_map(ns).items]
    first = v1.list_namespaced_config_map(ns, limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    assert first.metadata.remaining_item_count == len(everything) - 2
    # Changes after the first page do not show in the later ones.
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "zz-late"}})
    v1.delete_namespaced_config_map("page-4", ns)
    v1.patch_namespaced_config_map("page-3", ns, {"data": {"changed": "yes"}})
    names, token, rvs = [c.metadata.name for c in first.items], first.metadata._continue, {first.metadata.resource_version}
    while token:
        page = v1.list_namespaced_config_map(ns, limit=2, _continue=token)
        names += [c.metadata.name for c in page.items]
        assert all(not (c.data or {}).get("changed") for c in page.items)
        token, rvs = page.metadata._continue, rvs | {page.metadata.resource_version}
    assert names == everything and len(rvs) == 1
    # With a selector: no remainingItemCount; resourceVersion=0 is served whole from the cache.
    sel = v1.list_namespaced_config_map(ns, limit=1, label_selector="paged=yes")
    assert sel.metadata._continue and sel.metadata.remaining_item_count is None
    assert len(v1.list_namespaced_config_map(ns, limit=1, resource_version="0").items) == len(everything)
    # Across namespaces, pages follow the keys' order, as does the whole list.
    every = [(c.metadata.namespace, c.metadata.name) for c in v1.list_config_map_for_all_namespaces().items]
    paged, token = [], None
    while True:
        page = v1.list_config_map_for_all_namespaces(limit=3, _continue=token) if token else \
            v1.list_config_map_for_all_namespaces(limit=3)
        paged += [(c.metadata.namespace, c.metadata.name) for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert paged == every and every == sorted(every, key=lambda k: f"{k[0]}/{k[1]}")


def test_list_continue_tokens_refused_as_real(admin):
    v1 = client.CoreV1Api(admin)
    for i in range(2):
        v1.create_namespaced_config_map(NS, {"metadata": {"name": f"token-{i}"}})
    token = v1.list_namespaced_config_map(NS, limit=1).metadata._continue
    assert token
    code, st = _refused(v1.list_namespaced_config_map, NS, limit=1, _continue="garbage!!")
    assert (code, st["reason"]) == (400, "BadRequest")
    assert st["message"].startswith("invalid continue token: continue key is not valid")
    code, st = _refused(v1.list_namespaced_config_map, NS, limit=1, _continue=token, resource_version="5")
    assert (code, st["message"]) == (400, "specifying resource version is not allowed when using continue")
    bad = base64.urlsafe_b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": 0, "start": "x"}).encode()).decode().rstrip("=")
    code, st = _refused(v1.list_namespaced_config_map, NS, _continue=bad)
    assert st["message"] == ("invalid continue token: continue key is not valid: incorrect encoded start "
                             "resourceVersion (version meta.k8s.io/v1)")


def test_list_continue_past_the_kept_history_is_expired(tmp_path):
    """A server that keeps a short history (as etcd compacts): the first page's revision is gone."""
    short = start_api(tmp_path, Store(history=4))
    try:
        v1 = client.CoreV1Api(api_client(short, short.auth.admin))
        for i in range(2):
            v1.create_namespaced_config_map(NS, {"metadata": {"name": f"kept-{i}"}})
        token = v1.list_namespaced_config_map(NS, limit=1).metadata._continue
        assert token
        for i in range(5):
            v1.create_namespaced_config_map(NS, {"metadata": {"name": f"compacted-{i}"}})
        code, st = _refused(v1.list_namespaced_config_map, NS, limit=1, _continue=token)
        assert (code, st["reason"]) == (410, "Expired")
        assert st["message"].startswith("The provided continue parameter is too old to display a consistent list "
                                        "result. You can start a new list without the continue parameter, or use the "
                                        "continue token in this response")
        page = v1.list_namespaced_config_map(NS, limit=1, _continue=st["metadata"]["continue"])
        assert page.metadata.resource_version == str(short.store.rv)  # inconsistent: at the latest revision
    finally:
        short.stop()


# --- 6. deletion propagation --------------------------------------------------------------

def _owned(v1, name, owner, block=True):
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
           "blockOwnerDeletion": block}
    return v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": name, "ownerReferences": [ref]}})


def _names(v1):
    return {c.metadata.name for c in v1.list_namespaced_config_map(PLAIN).items}


def test_delete_orphan_keeps_dependents_without_the_owner_reference(admin):
    v1 = client.CoreV1Api(admin)
    owner = v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "orph-owner"}})
    _owned(v1, "orph-dep", owner)
    code, answer = raw(admin, "DELETE", f"/api/v1/namespaces/{PLAIN}/configmaps/orph-owner",
                       {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})
    assert code == 200 and answer["metadata"]["finalizers"] == ["orphan"] and answer["metadata"]["deletionTimestamp"]
    eventually(lambda: "orph-owner" not in _names(v1), what="owner gone")
    dep = v1.read_namespaced_config_map("orph-dep", PLAIN)
    assert not dep.metadata.owner_references


def test_delete_foreground_waits_for_blocking_dependents(admin):
    v1 = client.CoreV1Api(admin)
    owner = v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "fg-owner"}})
    held = _owned(v1, "fg-held", owner)
    v1.patch_namespaced_config_map("fg-held", PLAIN, {"metadata": {"finalizers": ["example.com/hold"]}})
    _owned(v1, "fg-free", owner)
    _owned(v1, "fg-nonblocking", owner, block=False)
    v1.delete_namespaced_config_map("fg-owner", PLAIN, propagation_policy="Foreground")
    answer = v1.read_namespaced_config_map("fg-owner", PLAIN)
    assert answer.metadata.finalizers == ["foregroundDeletion"] and answer.metadata.deletion_timestamp
    eventually(lambda: "fg-free" not in _names(v1), what="unheld dependent deleted")
    # The owner stays while a blocking dependent is still there (being deleted, held by its finalizer).
    names = _names(v1)
    assert {"fg-owner", "fg-held", "fg-nonblocking"} <= names
    assert v1.read_namespaced_config_map("fg-held", PLAIN).metadata.deletion_timestamp
    assert held.metadata.uid
    v1.patch_namespaced_config_map("fg-held", PLAIN, {"metadata": {"finalizers": None}})
    eventually(lambda: not ({"fg-owner", "fg-held", "fg-nonblocking"} & _names(v1)),
               what="owner, then its non-blocking dependent, gone")


def test_delete_background_is_the_default_and_options_are_validated(admin):
    v1 = client.CoreV1Api(admin)
    owner = v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "bg-owner"}})
    _owned(v1, "bg-dep", owner)
    v1.delete_namespaced_config_map("bg-owner", PLAIN)
    eventually(lambda: not ({"bg-owner", "bg-dep"} & _names(v1)), what="owner and dependent gone")
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "bg-bad"}})
    code, st = _refused(v1.delete_namespaced_config_map, "bg-bad", PLAIN, propagation_policy="Sometimes")
    assert (code, st["message"]) == (422, 'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                                          'value: "Sometimes": supported values: "Foreground", "Background", "Orphan", "nil"')
    code, st = _refused(v1.delete_namespaced_config_map, "bg-bad", PLAIN, propagation_policy="Orphan",
                        body=client.V1DeleteOptions(orphan_dependents=True))
    assert code == 422 and "orphanDependents and deletionPropagation cannot be both set" in st["message"]


# --- 8. malformed query integers ----------------------------------------------------------

@pytest.mark.parametrize(("query", "value"), [("limit", "ten"), ("timeoutSeconds", "1.5")])
def test_malformed_integer_query_is_bad_request(admin, query, value):
    code, st = raw(admin, "GET", f"/api/v1/namespaces/{NS}/configmaps", query=[(query, value)])
    assert (code, st["reason"], st["message"]) == (400, "BadRequest", f'strconv.ParseInt: parsing "{value}": invalid syntax')
    code, st = raw(admin, "GET", f"/api/v1/namespaces/{NS}/configmaps", query=[("watch", "true"), (query, value)])
    assert (code, st["reason"]) == (400, "BadRequest")
    code, st = raw(admin, "DELETE", f"/api/v1/namespaces/{NS}/configmaps/nothing", query=[("gracePeriodSeconds", "x")])
    assert (code, st["message"]) == (400, 'strconv.ParseInt: parsing "x": invalid syntax')


def test_a_stale_update_is_a_conflict_before_finalizers_are_validated(admin):
    v1 = client.CoreV1Api(admin)
    v1.create_namespaced_config_map(PLAIN, {"metadata": {"name": "stale", "finalizers": ["example.com/a"]}})
    stale = v1.read_namespaced_config_map("stale", PLAIN)
    v1.delete_namespaced_config_map("stale", PLAIN)
    stale.metadata.finalizers.append("example.com/b")
    code, st = _refused(v1.replace_namespaced_config_map, "stale", PLAIN, stale)
    assert (code, st["reason"]) == (409, "Conflict")
    v1.patch_namespaced_config_map("stale", PLAIN, {"metadata": {"finalizers": None}})


def test_route_status_reset_on_create_and_update_needs_resource_version(admin):
    """openshift-apiserver's routeStrategy: PrepareForCreate resets status, AllowUnconditionalUpdate is false."""
    co = client.CustomObjectsApi(admin)
    route = {"apiVersion": "route.openshift.io/v1", "kind": "Route", "metadata": {"name": "r1"},
             "spec": {"to": {"kind": "Service", "name": "svc"}}, "status": {"ingress": [{"host": "x.example.com"}]}}
    made = co.create_namespaced_custom_object("route.openshift.io", "v1", PLAIN, "routes", route)
    assert not made.get("status")
    del made["metadata"]["resourceVersion"]
    code, st = _refused(co.replace_namespaced_custom_object, "route.openshift.io", "v1", PLAIN, "routes", "r1", made)
    assert (code, st["message"]) == (422, 'routes.route.openshift.io "r1" is invalid: metadata.resourceVersion: '
                                          "Invalid value: 0x0: must be specified for an update")


# --- Size limits: etcd's 1.5 MiB per write, kube-apiserver's 3 MiB per request body --------------

def _sized(name: str, env_bytes: int) -> dict:
    rc = raycluster(name, queue=None)
    rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": "x" * env_bytes}]
    return rc


def test_an_object_over_etcds_request_limit_is_refused_as_etcd_refuses_it(admin):
    co = client.CustomObjectsApi(admin)
    co.create_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", _sized("fits", 1_500_000))
    code, st = _refused(co.create_namespaced_custom_object, "ray.io", "v1", PLAIN, "rayclusters", _sized("too-big", 1_600_000))
    assert (code, st["message"]) == (500, "etcdserver: request is too large") and "reason" not in st
    # an update that grows an object past the limit is refused the same way, and the object stays as it was
    grown = co.get_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", "fits")
    grown["metadata"]["annotations"] = {"note": "y" * 100_000}
    code, st = _refused(co.replace_namespaced_custom_object, "ray.io", "v1", PLAIN, "rayclusters", "fits", grown)
    assert (code, st["message"]) == (500, "etcdserver: request is too large")
    kept = co.get_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", "fits")
    assert kept["metadata"]["resourceVersion"] == grown["metadata"]["resourceVersion"] and "annotations" not in kept["metadata"]
    co.delete_namespaced_custom_object("ray.io", "v1", PLAIN, "rayclusters", "fits")


def test_a_body_over_the_apiservers_limit_is_refused_before_it_is_read_as_an_object(admin):
    code, st = raw(admin, "POST", f"/apis/ray.io/v1/namespaces/{PLAIN}/rayclusters", body=_sized("huge", 3_200_000))
    assert (code, st["reason"], st["message"]) == (413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
