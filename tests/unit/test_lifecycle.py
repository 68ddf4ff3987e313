"""Graceful deletion, finalizers and namespace termination as kube-apiserver v1.31 does
them, driven step by step on the store and the namespace controller (no Ray processes)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kfp_ray_sandbox.apiserver.errors import ApiError
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store, parse_rfc3339
from kfp_ray_sandbox.controllers.namespaces import NamespaceController, NamespaceLifecycle, prepare_namespace

NS = "work"


@pytest.fixture
def env():
    reg, store = Registry(), Store()
    store.admission.append(NamespaceLifecycle(store, reg))
    store.validation.append(prepare_namespace)
    store.default_grace = lambda: 30.0
    store.create(reg.get("", "namespaces"), {"metadata": {"name": NS}})
    return reg, store


def pod(name, node="sandbox-node", **spec):
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"containers": [{"name": "c"}], "nodeName": node, **spec},
            "status": {"phase": "Running"}}


def seconds_until(ts: str) -> float:
    return (parse_rfc3339(ts) - datetime.now(UTC)).total_seconds()


def test_pod_delete_is_graceful_with_the_requests_then_the_specs_then_the_default_grace(env):
    reg, store = env
    pods = reg.get("", "pods")
    made = store.create(pods, pod("a"))
    store.create(pods, pod("b", terminationGracePeriodSeconds=7))
    store.create(pods, pod("c"))
    gone = store.delete(pods, NS, "a")
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 30  # the platform default
    assert 28 <= seconds_until(gone["metadata"]["deletionTimestamp"]) <= 30  # the time it will be deleted
    assert gone["metadata"]["generation"] == made["metadata"]["generation"] + 1
    assert store.get(pods, NS, "a")["metadata"]["deletionTimestamp"]  # Terminating, still listed
    assert store.delete(pods, NS, "b")["metadata"]["deletionGracePeriodSeconds"] == 7
    assert store.delete(pods, NS, "c", grace_period_seconds=5)["metadata"]["deletionGracePeriodSeconds"] == 5
    assert len(store.list(pods, NS)[0]) == 3


def test_pod_grace_can_only_shorten_and_zero_removes_at_once(env):
    reg, store = env
    pods = reg.get("", "pods")
    uid = store.create(pods, pod("p"))["metadata"]["uid"]
    store.delete(pods, NS, "p", grace_period_seconds=20)
    again = store.delete(pods, NS, "p", grace_period_seconds=60)  # longer: pending deletion unchanged
    assert again["metadata"]["deletionGracePeriodSeconds"] == 20
    short = store.delete(pods, NS, "p", grace_period_seconds=3)
    assert short["metadata"]["deletionGracePeriodSeconds"] == 3 and seconds_until(short["metadata"]["deletionTimestamp"]) <= 3
    with pytest.raises(ApiError) as exc:  # the kubelet's final delete carries the pod's uid
        store.delete(pods, NS, "p", grace_period_seconds=0, preconditions={"uid": "someone-else"})
    assert exc.value.code == 409 and "the UID in the precondition (someone-else) does not match" in exc.value.message
    store.delete(pods, NS, "p", grace_period_seconds=0, preconditions={"uid": uid})
    assert store.find(pods, NS, "p") is None


def test_unscheduled_or_finished_pods_and_force_deletes_go_at_once(env):
    reg, store = env
    pods = reg.get("", "pods")
    store.create(pods, pod("pending", node=""))
    store.create(pods, {**pod("done"), "status": {"phase": "Succeeded"}})
    store.create(pods, pod("forced"))
    store.delete(pods, NS, "pending")
    store.delete(pods, NS, "done")
    store.delete(pods, NS, "forced", grace_period_seconds=0)
    assert store.list(pods, NS)[0] == []


def test_a_graceful_pod_survives_status_updates_until_deleted_with_grace_zero(env):
    reg, store = env
    pods = reg.get("", "pods")
    store.create(pods, pod("p"))
    store.delete(pods, NS, "p")
    store.mutate(pods, NS, "p", lambda p: p["status"].update(phase="Failed"), subresource="status")
    assert store.get(pods, NS, "p")["status"]["phase"] == "Failed"
    store.delete(pods, NS, "p", grace_period_seconds=0)
    assert store.find(pods, NS, "p") is None


def test_finalizers_hold_an_object_with_a_deletion_timestamp_until_removed(env):
    reg, store = env
    cms = reg.get("", "configmaps")
    store.create(cms, {"metadata": {"name": "held", "namespace": NS, "finalizers": ["example.com/x"]}})
    held = store.delete(cms, NS, "held")
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["deletionGracePeriodSeconds"] == 0
    assert store.delete(cms, NS, "held")["metadata"]["deletionTimestamp"] == held["metadata"]["deletionTimestamp"]
    store.mutate(cms, NS, "held", lambda o: o["metadata"].update(labels={"still": "here"}))
    assert store.find(cms, NS, "held") is not None
    store.mutate(cms, NS, "held", lambda o: o["metadata"].update(finalizers=[]))
    assert store.find(cms, NS, "held") is None


def test_namespace_create_defaults_and_termination(env):
    reg, store = env
    nss, cms = reg.get("", "namespaces"), reg.get("", "configmaps")
    ns = store.get(nss, None, NS)
    assert ns["spec"]["finalizers"] == ["kubernetes"] and ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == NS
    store.create(cms, {"metadata": {"name": "plain", "namespace": NS}})
    store.create(cms, {"metadata": {"name": "held", "namespace": NS, "finalizers": ["example.com/x"]}})
    terminating = store.delete(nss, None, NS)
    assert terminating["status"]["phase"] == "Terminating" and terminating["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError) as exc:
        store.delete(nss, None, NS)
    assert exc.value.code == 409 and exc.value.message == (
        f'Operation cannot be fulfilled on namespaces "{NS}": The system is ensuring all content is removed from this '
        "namespace.  Upon completion, this namespace will automatically be purged by the system.")
    with pytest.raises(ApiError) as exc:  # NamespaceLifecycle, for controllers and clients alike
        store.create(cms, {"metadata": {"generateName": "late-", "namespace": NS}})
    assert exc.value.code == 403 and exc.value.message == (
        f'configmaps "late-" is forbidden: unable to create new content in namespace {NS} because it is being terminated')
    assert exc.value.details["causes"][0]["reason"] == "NamespaceTerminating"

    ctl = NamespaceController(store, reg)
    ctl.reconcile()  # deletes the content; the finalized one waits
    assert [c["metadata"]["name"] for c in store.list(cms, NS)[0]] == ["held"]
    conds = {c["type"]: c for c in store.get(nss, None, NS)["status"]["conditions"]}
    assert conds["NamespaceContentRemaining"]["message"] == "Some resources are remaining: configmaps. has 1 resource instances"
    assert conds["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/x in 1 resource instances")
    assert store.get(nss, None, NS)["spec"]["finalizers"] == ["kubernetes"]
    store.mutate(cms, NS, "held", lambda o: o["metadata"].update(finalizers=[]))
    ctl.reconcile()
    assert store.find(nss, None, NS) is None


def test_grace_period_of_an_http_delete_reaches_the_store(tmp_path):
    """`kubectl delete --grace-period=0` and client-go's DeleteOptions body: a scheduled pod
    with grace 0 goes at once, a given grace is recorded on the Terminating pod."""
    from kubernetes import client

    from tests.unit.apiserver_kit import api_client, start_api

    api = start_api(tmp_path)
    try:
        v1 = client.CoreV1Api(api_client(api, api.auth.admin))
        ns = api.store.list(api.registry.get("", "namespaces"))[0][0]["metadata"]["name"]
        for name in ("slow", "now"):
            v1.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
                "nodeName": "sandbox-node", "containers": [{"name": "c", "image": "busybox"}]}})
        kept = v1.delete_namespaced_pod("slow", ns, grace_period_seconds=7)
        assert kept.metadata.deletion_grace_period_seconds == 7
        v1.delete_namespaced_pod("now", ns, body=client.V1DeleteOptions(grace_period_seconds=0))
        names = [p.metadata.name for p in v1.list_namespaced_pod(ns).items]
        assert "now" not in names and "slow" in names
    finally:
        api.stop()
