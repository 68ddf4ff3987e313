"""Kueue as RHOAI runs it (kubernetes-sigs/kueue v0.11.6, opendatahub's config), driven pass by pass
with a fake clock: no threads, no Ray, no sleeping."""

from __future__ import annotations

import pytest

from kfp_ray_sandbox.apiserver import errors
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.selectors import selector_matches
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers.kueue import FINALIZER, KueueController, pod_requests
from kfp_ray_sandbox.core import bootstrap_objects, local_queue_of
from kfp_ray_sandbox.faults import PLATFORM_DEFAULTS, Faults
from kfp_ray_sandbox.platforms import platform as platform_profile
from tests.helpers import FakeClock, raycluster

NS = "sandbox"
MSG_CPU_3 = ("couldn't assign flavors to pod set small-group: "
             "insufficient unused quota for cpu in flavor default-flavor, 3 more needed")



def make_kueue(layout: str = "seed", platform: str | None = None) -> KueueController:
    reg, store = Registry(), Store()
    for obj in bootstrap_objects(layout):
        store.create(reg.by_kind(obj["apiVersion"].rpartition("/")[0], obj["kind"]), obj)
    return KueueController(store, reg, Faults(), clock=FakeClock(1000.0), platform=platform_profile(platform))


@pytest.fixture
def kueue():
    return make_kueue()


def settle(ctl: KueueController, passes: int = 50) -> None:
    """Reconcile until a pass changes nothing (what the controller loop does between clock ticks)."""
    for _ in range(passes):
        before = ctl.store.rv
        ctl.reconcile()
        if ctl.store.rv == before:
            return
    raise AssertionError(f"Kueue did not settle in {passes} passes")


def create(ctl, body, ns=NS, op="CREATE"):
    """What the API server does with a RayCluster: admission webhooks, then store."""
    body["metadata"]["namespace"] = ns
    ctl.admission(op, ctl.rc_t, body, None)
    return ctl.store.create(ctl.rc_t, body)


def add(ctl, group, plural, obj):
    return ctl.store.create(ctl.rt(group, plural), obj)


def rc(ctl, name, ns=NS):
    return ctl.store.get(ctl.rc_t, ns, name)


def workload(ctl, rc_name, ns=NS):
    return next((w for w in ctl.store.list(ctl.wl_t, ns)[0] if w["metadata"]["ownerReferences"][0]["name"] == rc_name),
                None)


def cond(wl, type_):
    return next((c for c in (wl.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def events(ctl, name, ns=NS):
    return [(e["type"], e["reason"], e["message"]) for e in ctl.store.list(ctl.rt("", "events"), ns)[0]
            if e["involvedObject"]["name"] == name]


def cq_usage(ctl, name="cluster-queue"):
    return {r["name"]: r["total"] for r in ctl.store.get(ctl.cq_t, None, name)["status"]["flavorsUsage"][0]["resources"]}


def set_ray_state(ctl, name, state, ns=NS):
    """What KubeRay writes; the unit tests play KubeRay."""
    ctl.store.mutate(ctl.rc_t, ns, name, lambda o: o.setdefault("status", {}).update(state=state), subresource="status")


# --- requests and quota ------------------------------------------------------------------------
def test_pod_requests_sum_containers_and_fall_back_to_limits():
    tpl = {"spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
                                   {"resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}}
    req = pod_requests(tpl)
    assert req == {"cpu": 2, "memory": 1024**3 + 512 * 1024**2}  # `pods` is the ClusterQueue's business


def test_admits_fifo_until_quota_then_holds_with_kueues_message_and_warning(kueue):
    # each cluster: head 3 cpu + 1 worker 3 cpu = 6 cpu, 2 pods; quota is 9 cpu, 5 pods
    create(kueue, raycluster("first", cpu="3"))
    create(kueue, raycluster("second", cpu="3"))
    settle(kueue)
    first, second = workload(kueue, "first"), workload(kueue, "second")
    assert first["metadata"]["finalizers"] == [FINALIZER]
    assert cond(first, "Admitted")["status"] == "True" and cond(first, "QuotaReserved")["reason"] == "QuotaReserved"
    assert first["status"]["admission"]["clusterQueue"] == "cluster-queue"
    assert first["status"]["admission"]["podSetAssignments"][0] == {
        "name": "head", "count": 1, "resourceUsage": {"cpu": "3", "memory": "2Gi", "pods": "1"},
        "flavors": {"cpu": "default-flavor", "memory": "default-flavor", "pods": "default-flavor"}}
    assert rc(kueue, "first")["spec"]["suspend"] is False
    assert ("Normal", "Started", "Admitted by clusterQueue cluster-queue") in events(kueue, "first")
    assert ("Normal", "Admitted", "Admitted by ClusterQueue cluster-queue, wait time since reservation was 0s") \
        in events(kueue, first["metadata"]["name"])
    held = cond(second, "QuotaReserved")
    assert (held["status"], held["reason"], held["message"]) == ("False", "Pending", MSG_CPU_3)
    assert cond(second, "Admitted") is None
    assert ("Warning", "Pending", MSG_CPU_3) in events(kueue, second["metadata"]["name"])
    assert rc(kueue, "second")["spec"]["suspend"] is True
    assert cq_usage(kueue) == {"cpu": "6", "memory": "4Gi", "pods": "2", "nvidia.com/gpu": "0"}
    cq = kueue.store.get(kueue.cq_t, None, "cluster-queue")["status"]
    assert cq["pendingWorkloads"] == 1 and cq["admittedWorkloads"] == 1
    lq = kueue.store.get(kueue.lq_t, NS, "local-queue-test")["status"]
    assert lq["pendingWorkloads"] == 1 and lq["admittedWorkloads"] == 1


def test_deleted_clusters_workload_holds_quota_until_kueue_drops_its_finalizer(kueue):
    create(kueue, raycluster("first", cpu="3"))
    create(kueue, raycluster("second", cpu="3"))
    settle(kueue)
    kueue.store.delete(kueue.rc_t, NS, "first")  # garbage collection marks the Workload for deletion
    settle(kueue)
    terminating = workload(kueue, "first")
    assert terminating["metadata"]["deletionTimestamp"] and terminating["metadata"]["finalizers"] == [FINALIZER]
    # Kueue's cache keeps an admitted Workload's usage until the object is gone (Delete event)
    assert cond(terminating, "Admitted")["status"] == "True" and cq_usage(kueue)["cpu"] == "6"
    assert cond(workload(kueue, "second"), "Admitted") is None
    kueue.clock.advance(PLATFORM_DEFAULTS["finalizer_delay_s"] - 0.1)
    settle(kueue)
    assert workload(kueue, "first") is not None
    kueue.clock.advance(0.1)
    settle(kueue)
    assert workload(kueue, "first") is None
    assert cond(workload(kueue, "second"), "Admitted")["status"] == "True"


def test_a_terminating_cluster_loses_its_workload_finalizer_then_its_workload(kueue):
    kueue.faults.set({"platform": {"finalizer_delay_s": 1}})
    body = raycluster("guarded", cpu="1")
    body["metadata"]["finalizers"] = ["ray.openshift.ai/oauth-finalizer"]  # the CodeFlare operator's
    create(kueue, body)
    settle(kueue)
    kueue.store.delete(kueue.rc_t, NS, "guarded")
    settle(kueue)
    assert workload(kueue, "guarded")["metadata"]["finalizers"] == [FINALIZER]
    kueue.clock.advance(1)
    settle(kueue)  # dropFinalizers: the job is being deleted
    wl = workload(kueue, "guarded")
    assert not wl["metadata"].get("finalizers") and not wl["metadata"].get("deletionTimestamp")
    assert cq_usage(kueue)["cpu"] == "2"
    kueue.store.mutate(kueue.rc_t, NS, "guarded", lambda o: o["metadata"].update(finalizers=[]))
    settle(kueue)
    assert workload(kueue, "guarded") is None and cq_usage(kueue)["cpu"] == "0"


def test_deleting_the_workload_stops_the_cluster_and_a_new_workload_queues(kueue):
    create(kueue, raycluster("solo", cpu="1"))
    settle(kueue)
    old = workload(kueue, "solo")
    kueue.store.delete(kueue.wl_t, NS, old["metadata"]["name"])
    settle(kueue)
    assert rc(kueue, "solo")["spec"]["suspend"] is True
    assert ("Normal", "Stopped", "Workload is deleted") in events(kueue, "solo")
    kueue.clock.advance(PLATFORM_DEFAULTS["finalizer_delay_s"])
    settle(kueue)
    new = workload(kueue, "solo")
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and cond(new, "Admitted")["status"] == "True"
    assert rc(kueue, "solo")["spec"]["suspend"] is False


def test_request_over_nominal_quota_never_fits(kueue):
    create(kueue, raycluster("huge", cpu="5"))
    settle(kueue)
    msg = cond(workload(kueue, "huge"), "QuotaReserved")["message"]
    assert msg == ("couldn't assign flavors to pod set small-group: insufficient quota for cpu in flavor default-flavor, "
                   "request > maximum capacity (10 > 9)")


def test_every_short_pod_set_is_reported(kueue):
    create(kueue, raycluster("big", cpu="4", memory="16Gi"))  # 8 cpu, 32Gi, 2 pods
    create(kueue, raycluster("late", cpu="2", memory="3Gi"))
    settle(kueue)
    assert cond(workload(kueue, "late"), "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set head: insufficient unused quota for cpu in flavor default-flavor, 1 more needed; "
        "couldn't assign flavors to pod set small-group: insufficient unused quota for cpu in flavor default-flavor, "
        "3 more needed, insufficient unused quota for memory in flavor default-flavor, 2Gi more needed")


def test_pods_quota_counts_every_replica_when_covered(kueue):
    create(kueue, raycluster("many", workers=5, cpu="100m", memory="100Mi"))  # 6 pods > 5
    settle(kueue)
    assert cond(workload(kueue, "many"), "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set small-group: insufficient quota for pods in flavor default-flavor, "
        "request > maximum capacity (6 > 5)")


def test_pods_are_not_counted_when_the_cluster_queue_does_not_cover_them(kueue):
    def drop_pods(cq):
        group = cq["spec"]["resourceGroups"][0]
        group["coveredResources"] = [r for r in group["coveredResources"] if r != "pods"]
        group["flavors"][0]["resources"] = [r for r in group["flavors"][0]["resources"] if r["name"] != "pods"]
    kueue.store.mutate(kueue.cq_t, None, "cluster-queue", drop_pods)
    create(kueue, raycluster("many", workers=5, cpu="100m", memory="100Mi"))
    settle(kueue)
    wl = workload(kueue, "many")
    assert cond(wl, "Admitted")["status"] == "True"
    assert all("pods" not in psa["resourceUsage"] for psa in wl["status"]["admission"]["podSetAssignments"])
    assert "pods" not in cq_usage(kueue)


def test_gpu_quota_and_uncovered_resources(kueue):
    create(kueue, raycluster("gpus", workers=1, cpu="1", gpu=3))  # 6 GPUs > 5
    body = raycluster("tpu", cpu="1")
    body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] = "1"
    create(kueue, body)
    settle(kueue)
    assert "insufficient quota for nvidia.com/gpu in flavor default-flavor, request > maximum capacity (6 > 5)" in \
        cond(workload(kueue, "gpus"), "QuotaReserved")["message"]
    assert cond(workload(kueue, "tpu"), "QuotaReserved")["message"] == \
        "couldn't assign flavors to pod set head: resource google.com/tpu unavailable in ClusterQueue"


def test_unknown_local_queue_is_inadmissible_without_an_event(kueue):
    create(kueue, raycluster("lost", queue="no-such-queue"))
    settle(kueue)
    wl = workload(kueue, "lost")
    c = cond(wl, "QuotaReserved")
    assert (c["reason"], c["message"]) == ("Inadmissible", "LocalQueue no-such-queue doesn't exist")
    assert not [e for e in events(kueue, wl["metadata"]["name"]) if e[1] == "Pending"]


def test_never_admit_fault_holds_the_workload(kueue):
    kueue.faults.set({"clusters": {"stuck-*": {"never_admit": True}}})
    create(kueue, raycluster("stuck-1", cpu="100m", memory="100Mi"))
    create(kueue, raycluster("free-1", cpu="100m", memory="100Mi"))
    settle(kueue)
    assert cond(workload(kueue, "stuck-1"), "QuotaReserved")["status"] == "False"
    assert "never_admit" in cond(workload(kueue, "stuck-1"), "QuotaReserved")["message"]
    assert cond(workload(kueue, "free-1"), "Admitted")["status"] == "True"  # BestEffortFIFO moves on


def test_strict_fifo_blocks_behind_the_head_of_the_queue(kueue):
    kueue.store.mutate(kueue.cq_t, None, "cluster-queue", lambda cq: cq["spec"].update(queueingStrategy="StrictFIFO"))
    create(kueue, raycluster("big", cpu="3"))
    create(kueue, raycluster("bigger", cpu="4"))
    create(kueue, raycluster("small", cpu="100m", memory="100Mi"))
    settle(kueue)
    assert cond(workload(kueue, "big"), "Admitted")["status"] == "True"
    assert cond(workload(kueue, "bigger"), "Admitted") is None
    assert cond(workload(kueue, "small"), "Admitted") is None


# --- namespaces and queues ---------------------------------------------------------------------
def test_cluster_queue_without_namespace_selector_selects_no_namespace(kueue):
    kueue.store.mutate(kueue.cq_t, None, "cluster-queue", lambda cq: cq["spec"].pop("namespaceSelector"))
    create(kueue, raycluster("nowhere", cpu="1"))
    settle(kueue)
    wl = workload(kueue, "nowhere")
    c = cond(wl, "QuotaReserved")
    assert (c["status"], c["reason"], c["message"]) == \
        ("False", "Pending", "Workload namespace doesn't match ClusterQueue selector")
    assert ("Warning", "Pending", "Workload namespace doesn't match ClusterQueue selector") in \
        events(kueue, wl["metadata"]["name"])
    kueue.store.mutate(kueue.cq_t, None, "cluster-queue",
                       lambda cq: cq["spec"].update(namespaceSelector={"matchLabels": {"kueue.openshift.io/managed": "true"}}))
    settle(kueue)
    assert cond(workload(kueue, "nowhere"), "Admitted")["status"] == "True"


def test_namespace_selector_match_labels_and_expressions():
    labels = {"team": "a", "kueue.openshift.io/managed": "true"}
    assert selector_matches({}, labels) and selector_matches({}, {})
    assert not selector_matches(None, labels)
    assert selector_matches({"matchLabels": {"team": "a"}}, labels)
    assert not selector_matches({"matchLabels": {"team": "b"}}, labels)
    expr = [{"key": "team", "operator": "In", "values": ["a", "b"]}, {"key": "gone", "operator": "DoesNotExist"},
            {"key": "kueue.openshift.io/managed", "operator": "Exists"}, {"key": "team", "operator": "NotIn", "values": ["c"]}]
    assert selector_matches({"matchExpressions": expr}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["a"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "team", "operator": "Exists"}],
                                 "matchLabels": {"team": "z"}}, labels)


def test_cluster_queue_with_a_missing_flavor_is_inactive_and_admits_nothing(kueue):
    add(kueue, "kueue.x-k8s.io", "clusterqueues", {"metadata": {"name": "gpu-queue"}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
            {"name": "gpu-flavor", "resources": [{"name": "cpu", "nominalQuota": 8}, {"name": "memory", "nominalQuota": "32Gi"}]}]}]}})
    add(kueue, "kueue.x-k8s.io", "localqueues", {"metadata": {"name": "gpu-lq", "namespace": NS},
                                                 "spec": {"clusterQueue": "gpu-queue"}})
    create(kueue, raycluster("gpu-job", queue="gpu-lq", cpu="1"))
    settle(kueue)
    active = cond(kueue.store.get(kueue.cq_t, None, "gpu-queue"), "Active")
    assert (active["status"], active["reason"], active["message"]) == (
        "False", "FlavorNotFound", "Can't admit new workloads: references missing ResourceFlavor(s): [gpu-flavor].")
    lq = cond(kueue.store.get(kueue.lq_t, NS, "gpu-lq"), "Active")
    assert (lq["status"], lq["reason"], lq["message"]) == \
        ("False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
    wl = workload(kueue, "gpu-job")
    c = cond(wl, "QuotaReserved")
    assert (c["reason"], c["message"]) == ("Inadmissible", "ClusterQueue gpu-queue is inactive")
    assert kueue.store.get(kueue.cq_t, None, "gpu-queue")["status"]["pendingWorkloads"] == 1
    add(kueue, "kueue.x-k8s.io", "resourceflavors", {"metadata": {"name": "gpu-flavor"}})
    settle(kueue)
    assert cond(kueue.store.get(kueue.cq_t, None, "gpu-queue"), "Active")["reason"] == "Ready"
    assert cond(workload(kueue, "gpu-job"), "Admitted")["status"] == "True"


@pytest.mark.parametrize("platform", ["rhoai-2.25", "rhoai-3.3"])
def test_queue_labelled_clusters_are_managed_in_any_namespace(platform):
    kueue = make_kueue(platform=platform)
    add(kueue, "", "namespaces", {"metadata": {"name": "plain"}})
    add(kueue, "kueue.x-k8s.io", "localqueues", {"metadata": {"name": "q", "namespace": "plain"},
                                                 "spec": {"clusterQueue": "cluster-queue"}})
    labelled = create(kueue, raycluster("labelled", queue="q", cpu="1"), ns="plain")
    free = create(kueue, raycluster("free", queue=None, cpu="1"), ns="plain")
    empty = raycluster("empty", queue=None, cpu="1")
    empty["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": ""}
    empty = create(kueue, empty, ns="plain")
    if platform == "rhoai-2.25":  # v0.11.6's webhooks act in every namespace
        assert labelled["spec"]["suspend"] is True
    else:  # 3.3: the namespace lacks kueue.openshift.io/managed, so Kueue's webhook never saw it ...
        assert "suspend" not in labelled["spec"]
        kueue.store.mutate(kueue.cq_t, None, "cluster-queue",  # ... and while no quota is free,
                           lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota=0))
        settle(kueue)  # ... the reconciler stops it as it would stop any running unadmitted job
        assert rc(kueue, "labelled", ns="plain")["spec"]["suspend"] is True
        assert ("Normal", "Stopped", "Not admitted by cluster queue") in events(kueue, "labelled", ns="plain")
        kueue.store.mutate(kueue.cq_t, None, "cluster-queue",
                           lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota=9))
    assert "suspend" not in free["spec"] and "suspend" not in empty["spec"]
    settle(kueue)
    assert cond(workload(kueue, "labelled", ns="plain"), "Admitted")["status"] == "True"
    assert rc(kueue, "labelled", ns="plain")["spec"]["suspend"] is False
    assert workload(kueue, "free", ns="plain") is None and workload(kueue, "empty", ns="plain") is None
    assert rc(kueue, "free", ns="plain")["spec"].get("suspend") is None


def test_rhoai_3_defaults_a_cluster_without_a_queue_to_the_local_queue_named_default():
    """LocalQueueDefaulting (v0.12: on) in a kueue.openshift.io/managed namespace with a LocalQueue `default`;
    the ODH webhook then sees the label. Without that LocalQueue the ODH webhook refuses the cluster."""
    kueue = make_kueue("rhoai-default", platform="rhoai-3.3")
    got = create(kueue, raycluster("unqueued", queue=None, cpu="1"))
    assert got["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default" and got["spec"]["suspend"] is True
    settle(kueue)
    assert cond(workload(kueue, "unqueued"), "Admitted")["status"] == "True"
    child = raycluster("child", queue=None, cpu="1")  # a Kueue-managed owner's child is left alone
    child["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "j", "uid": "u",
                                             "controller": True}]
    assert denied(kueue, child).endswith('missing required label "kueue.x-k8s.io/queue-name"')
    seed = make_kueue("seed", platform="rhoai-3.3")  # no LocalQueue named `default`
    assert denied(seed, raycluster("unqueued", queue=None)).endswith('missing required label "kueue.x-k8s.io/queue-name"')
    old = make_kueue("rhoai-default", platform="rhoai-2.25")  # v0.11.6: LocalQueueDefaulting off
    assert denied(old, raycluster("unqueued", queue=None)).endswith('missing required label "kueue.x-k8s.io/queue-name"')


# --- webhooks ----------------------------------------------------------------------------------
def denied(ctl, body, ns=NS, op="CREATE", old=None):
    body["metadata"]["namespace"] = ns
    with pytest.raises(errors.ApiError) as exc:
        ctl.admission(op, ctl.rc_t, body, old)
    assert exc.value.code == 403 and exc.value.reason == "Forbidden"
    return exc.value.message


def test_odh_webhook_rejects_missing_or_empty_queue_label_in_managed_namespaces(kueue):
    assert denied(kueue, raycluster("nolabel", queue=None)) == (
        'admission webhook "ray-kueuelabels-validator.opendatahub.io" denied the request: '
        'Kueue label validation failed: missing required label "kueue.x-k8s.io/queue-name"')
    empty = raycluster("empty", queue=None)
    empty["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": ""}
    assert denied(kueue, empty) == (
        'admission webhook "ray-kueuelabels-validator.opendatahub.io" denied the request: '
        'Kueue label validation failed: label "kueue.x-k8s.io/queue-name" is set but empty')
    add(kueue, "", "namespaces", {"metadata": {"name": "legacy", "labels": {"kueue-managed": "true"}}})
    assert "missing required label" in denied(kueue, raycluster("old-style", queue=None), ns="legacy")
    # updates too, unless the object is being deleted
    made = create(kueue, raycluster("kept", cpu="1"))
    unlabelled = {**made, "metadata": {**made["metadata"], "labels": {}}}
    assert "missing required label" in denied(kueue, unlabelled, op="UPDATE", old=made)
    unlabelled["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    kueue.admission("UPDATE", kueue.rc_t, unlabelled, made)


def test_kueue_webhook_validates_managed_ray_clusters(kueue):
    auto = raycluster("auto")
    auto["spec"]["enableInTreeAutoscaling"] = True
    assert denied(kueue, auto) == ('admission webhook "vraycluster.kb.io" denied the request: '
                                   'spec.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should not use autoscaling')
    headed = raycluster("headed")
    headed["spec"]["workerGroupSpecs"][0]["groupName"] = "head"
    headed["spec"]["workerGroupSpecs"] += [dict(headed["spec"]["workerGroupSpecs"][0], groupName=f"g{i}") for i in range(7)]
    assert denied(kueue, headed) == (
        'admission webhook "vraycluster.kb.io" denied the request: [spec.workerGroupSpecs: Too many: 8: must have at most '
        '7 items, spec.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved for the head group]')
    running = create(kueue, raycluster("running", cpu="1"))
    running["spec"]["suspend"] = False
    moved = {**running, "metadata": {**running["metadata"], "labels": {"kueue.x-k8s.io/queue-name": "other"}}}
    assert denied(kueue, moved, op="UPDATE", old=running) == (
        'admission webhook "vraycluster.kb.io" denied the request: '
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable')
    moved["spec"] = dict(moved["spec"], suspend=True)
    kueue.admission("UPDATE", kueue.rc_t, moved, running)  # a suspended job may change queues


# --- waitForPodsReady --------------------------------------------------------------------------
@pytest.mark.parametrize("platform", ["rhoai-3.3", "rhoai-2.25"])
def test_wait_for_pods_ready_is_off_on_3x_unless_the_administrator_turns_it_on(platform):
    kueue = make_kueue(platform=platform)
    create(kueue, raycluster("slow", cpu="1"))
    settle(kueue)
    kueue.clock.advance(kueue.faults.platform("pods_ready_timeout_s") + 1)
    settle(kueue)
    wl = workload(kueue, "slow")
    if platform == "rhoai-3.3":  # RHBoK 1.1: gangScheduling.policy unset, so no PodsReady and no eviction
        assert cond(wl, "PodsReady") is None and cond(wl, "Evicted") is None
        assert cond(wl, "Admitted")["status"] == "True"
        kueue.faults.set({"platform": {"wait_for_pods_ready": True}})  # the Kueue CR's ByWorkload
        settle(kueue)
        kueue.clock.advance(kueue.faults.platform("pods_ready_timeout_s") + 1)
        settle(kueue)
    wl = workload(kueue, "slow")
    assert wl["status"]["requeueState"]["count"] == 1 and "Exceeded the PodsReady timeout" in cond(wl, "Evicted")["message"]


def test_pods_ready_timeout_evicts_requeues_with_backoff_and_readmits(kueue):
    kueue.faults.set({"platform": {"pods_ready_timeout_s": 10, "requeue_backoff_base_s": 4, "wait_for_pods_ready": True}})
    create(kueue, raycluster("slow", cpu="1"))
    settle(kueue)
    wl = workload(kueue, "slow")
    name = wl["metadata"]["name"]
    ready = cond(wl, "PodsReady")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "WaitForStart", "Not all pods are ready or succeeded")
    assert rc(kueue, "slow")["spec"]["suspend"] is False
    kueue.clock.advance(9.9)
    settle(kueue)
    assert cond(workload(kueue, "slow"), "Evicted") is None

    kueue.clock.advance(0.2)
    settle(kueue)
    wl = workload(kueue, "slow")
    message = f"Exceeded the PodsReady timeout sandbox/{name}"
    evicted = cond(wl, "Evicted")
    assert (evicted["status"], evicted["reason"], evicted["message"]) == ("True", "PodsReadyTimeout", message)
    assert ("Normal", "EvictedDueToPodsReadyTimeout", message) in events(kueue, name)
    assert rc(kueue, "slow")["spec"]["suspend"] is True
    assert ("Normal", "Stopped", message) in events(kueue, "slow")
    # the cluster was never ready, so the job reconciler released the quota at once
    assert "admission" not in wl["status"]
    assert [(c["status"], c["reason"], c["message"]) for c in (cond(wl, "QuotaReserved"), cond(wl, "Admitted"), cond(wl, "Requeued"))] == [
        ("False", "Pending", message), ("False", "NoReservation", "The workload has no reservation"),
        ("False", "PodsReadyTimeout", message)]
    assert wl["status"]["requeueState"]["count"] == 1 and wl["status"]["requeueState"]["requeueAt"].endswith("Z")
    assert cq_usage(kueue)["cpu"] == "0"

    kueue.clock.advance(3.9)  # backoff: 4 s * 2^0 (+ Kueue's 0.01% jitter)
    settle(kueue)
    assert cond(workload(kueue, "slow"), "Requeued")["status"] == "False"
    kueue.clock.advance(0.2)
    settle(kueue)
    wl = workload(kueue, "slow")
    requeued, evicted = cond(wl, "Requeued"), cond(wl, "Evicted")
    assert (requeued["status"], requeued["reason"], requeued["message"]) == \
        ("True", "BackoffFinished", "The workload backoff was finished")
    assert (evicted["status"], evicted["reason"], evicted["message"]) == ("False", "QuotaReserved", "Previously: " + message)
    assert cond(wl, "Admitted")["status"] == "True" and "requeueAt" not in wl["status"]["requeueState"]
    assert rc(kueue, "slow")["spec"]["suspend"] is False

    kueue.clock.advance(10.1)  # not ready again: second eviction, backoff 8 s
    settle(kueue)
    wl = workload(kueue, "slow")
    assert wl["status"]["requeueState"]["count"] == 2 and cond(wl, "Evicted")["status"] == "True"
    kueue.clock.advance(7.9)
    settle(kueue)
    assert "admission" not in workload(kueue, "slow")["status"]
    kueue.clock.advance(0.2)
    settle(kueue)
    assert cond(workload(kueue, "slow"), "Admitted")["status"] == "True"

    set_ray_state(kueue, "slow", "ready")  # pods ready in time now: no more evictions
    settle(kueue)
    ready = cond(workload(kueue, "slow"), "PodsReady")
    assert (ready["status"], ready["reason"], ready["message"]) == \
        ("True", "Started", "All pods reached readiness and the workload is running")
    kueue.clock.advance(1000)
    settle(kueue)
    assert cond(workload(kueue, "slow"), "Evicted")["status"] == "False"


def test_evicted_while_ready_keeps_quota_until_kuberay_reports_suspended(kueue):
    kueue.faults.set({"platform": {"pods_ready_timeout_s": 5, "wait_for_pods_ready": True}})
    create(kueue, raycluster("late", cpu="1"))
    settle(kueue)
    kueue.clock.advance(5)
    set_ray_state(kueue, "late", "ready")  # became ready in the same instant Kueue timed it out
    wl = workload(kueue, "late")

    def evict(o):  # as the workload controller wrote it a moment before
        o["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
                                          "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
        o["status"]["requeueState"] = {"count": 1, "requeueAt": "2999-01-01T00:00:00Z"}
    kueue.store.mutate(kueue.wl_t, NS, wl["metadata"]["name"], evict, subresource="status")
    settle(kueue)
    assert rc(kueue, "late")["spec"]["suspend"] is True
    assert cond(workload(kueue, "late"), "QuotaReserved")["status"] == "True"  # IsActive: state == ready
    set_ray_state(kueue, "late", "suspended")
    settle(kueue)
    wl = workload(kueue, "late")
    assert (cond(wl, "QuotaReserved")["reason"], cond(wl, "Requeued")["status"]) == ("Pending", "False")
    assert cq_usage(kueue)["cpu"] == "0"


# --- fixture variant and platform settings -----------------------------------------------------
def test_rhoai_default_layout_has_an_unannotated_local_queue_named_default():
    kueue = make_kueue("rhoai-default")
    (lq,) = kueue.store.list(kueue.lq_t, NS)[0]
    assert lq["metadata"]["name"] == "default" == local_queue_of(bootstrap_objects("rhoai-default"))
    assert "kueue.x-k8s.io/default-queue" not in (lq["metadata"].get("annotations") or {})
    create(kueue, raycluster("by-name", queue="default", cpu="1"))
    settle(kueue)
    assert cond(workload(kueue, "by-name"), "Admitted")["status"] == "True"
    assert local_queue_of(bootstrap_objects()) == "local-queue-test"
    with pytest.raises(ValueError, match="unknown local_queue_layout"):
        bootstrap_objects("nope")


def test_platform_settings_default_validate_and_clear():
    faults = Faults()
    assert faults.platform("pods_ready_timeout_s") == 300.0 and faults.platform("requeue_backoff_base_s") == 60.0
    assert faults.platform("finalizer_delay_s") == 2.0 and faults.platform("termination_grace_s") == 30.0
    assert faults.set({"platform": {"pods_ready_timeout_s": 3}})["platform"] == {"pods_ready_timeout_s": 3}
    assert faults.platform("pods_ready_timeout_s") == 3.0 and faults.platform("finalizer_delay_s") == 2.0
    with pytest.raises(ValueError, match="unknown fault.*platform.pods_ready_timeout"):
        faults.set({"platform": {"pods_ready_timeout": 3}})
    for bad in (-1, True, "5"):
        with pytest.raises(ValueError, match="platform.finalizer_delay_s must be a number of seconds"):
            faults.set({"platform": {"finalizer_delay_s": bad}})
    with pytest.raises(KeyError):
        faults.platform("nope")
    faults.clear()
    assert faults.platform("pods_ready_timeout_s") == 300.0 and faults.get()["platform"] == {}


def test_a_sandbox_started_with_platform_env_starts_with_those_timings(monkeypatch):
    from kfp_ray_sandbox.faults import PLATFORM_ENV
    from kfp_ray_sandbox.pipelines_api.workflow import Engine

    default = Faults()
    assert default.platform("task_retry_backoff_cap_s") == float("inf")  # the retryPolicy's own backoff
    monkeypatch.setenv(PLATFORM_ENV, '{"task_retry_backoff_cap_s": 1, "wait_for_pods_ready": true}')
    faults = Faults()
    assert faults.platform("task_retry_backoff_cap_s") == 1.0 and faults.switch("wait_for_pods_ready", False) is True
    policy = {"backoffDuration": "30s", "backoffFactor": 2.0, "backoffMaxDuration": "604800s"}
    engine = Engine.__new__(Engine)  # only its retry wait is asked
    engine.retry_backoff_cap = lambda: faults.platform("task_retry_backoff_cap_s")
    assert [engine._retry_wait(policy, n) for n in (1, 2)] == [1.0, 1.0]
    engine.retry_backoff_cap = lambda: default.platform("task_retry_backoff_cap_s")
    assert [engine._retry_wait(policy, n) for n in (1, 2)] == [30.0, 60.0]  # uncapped: the retryPolicy's own
    monkeypatch.setenv(PLATFORM_ENV, '{"task_retry_backoff": 1}')
    with pytest.raises(ValueError, match="unknown fault.*platform.task_retry_backoff"):
        Faults()


# --- flavors with node labels, taints and tolerations (the node pool's) -----------------------
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_TAINTED = ("untolerated taint {nvidia.com/gpu true NoSchedule <nil>} in flavor gpu-a10g")
GPU_NO_CPU_FLAVOR = "insufficient quota for nvidia.com/gpu in flavor cpu-workers, request > maximum capacity (1 > 0)"


def pool_kueue(platform: str | None = None) -> KueueController:
    """The seed plus the node pool's flavors and a ClusterQueue `pool-queue` over both (one
    resource group: cpu-workers first, no GPUs there), with LocalQueue `pool`."""
    from kfp_ray_sandbox import nodepool

    ctl = make_kueue(platform=platform)
    for flavor in nodepool.flavors(nodepool.OPENSHIFT):
        add(ctl, "kueue.x-k8s.io", "resourceflavors", flavor)

    def quota(name, gpus):
        return {"name": name, "resources": [{"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"},
                                            {"name": "pods", "nominalQuota": "10"},
                                            {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}
    add(ctl, "kueue.x-k8s.io", "clusterqueues", {"metadata": {"name": "pool-queue"}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory", "pods", "nvidia.com/gpu"],
                                                     "flavors": [quota("cpu-workers", 0), quota("gpu-a10g", 4)]}]}})
    add(ctl, "kueue.x-k8s.io", "localqueues", {"metadata": {"name": "pool", "namespace": NS},
                                               "spec": {"clusterQueue": "pool-queue"}})
    return ctl


def gpu_cluster(name, tolerations=None, workers=1):
    """A CPU head and a worker group with one GPU each (tolerations on both templates)."""
    body = raycluster(name, workers=workers, cpu="1", memory="2Gi", queue="pool", gpu=1, tolerations=tolerations)
    for kind in ("requests", "limits"):
        body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"][kind].pop("nvidia.com/gpu")
    return body


def flavors_of(wl):
    return {psa["name"]: set(psa["flavors"].values()) for psa in wl["status"]["admission"]["podSetAssignments"]}


def templates(obj):
    spec = obj["spec"].get("rayClusterSpec") or obj["spec"]
    return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]


def test_a_tolerating_gpu_worker_gets_the_gpu_flavor_and_its_node_labels():
    kueue = pool_kueue()
    create(kueue, gpu_cluster("gpu", tolerations=[GPU_TOLERATION]))
    create(kueue, raycluster("cpu", workers=1, cpu="1", memory="2Gi", queue="pool"))
    settle(kueue)
    assert flavors_of(workload(kueue, "gpu")) == {"head": {"cpu-workers"}, "small-group": {"gpu-a10g"}}
    assert flavors_of(workload(kueue, "cpu")) == {"head": {"cpu-workers"}, "small-group": {"cpu-workers"}}
    head, worker = templates(rc(kueue, "gpu"))
    assert rc(kueue, "gpu")["spec"]["suspend"] is False
    assert head["nodeSelector"] == {"node-role.kubernetes.io/worker": ""}
    assert worker["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert head["tolerations"] == worker["tolerations"] == [GPU_TOLERATION]  # the flavor adds none
    assert [t.get("nodeSelector") for t in templates(rc(kueue, "cpu"))] == [{"node-role.kubernetes.io/worker": ""}] * 2
    assert ("Normal", "Started", "Admitted by clusterQueue pool-queue") in events(kueue, "gpu")
    # the Workload keeps the templates as the job had them (what a stop restores)
    assert all("nodeSelector" not in ps["template"]["spec"] for ps in workload(kueue, "gpu")["spec"]["podSets"])


def test_an_untolerated_flavor_taint_is_skipped_with_kueues_reason():
    kueue = pool_kueue()
    create(kueue, gpu_cluster("no-toleration"))
    settle(kueue)
    wl = workload(kueue, "no-toleration")
    c = cond(wl, "QuotaReserved")
    message = f"couldn't assign flavors to pod set small-group: {GPU_NO_CPU_FLAVOR}, {GPU_TAINTED}"
    assert (c["status"], c["reason"], c["message"]) == ("False", "Pending", message)
    assert ("Warning", "Pending", message) in events(kueue, wl["metadata"]["name"])
    assert rc(kueue, "no-toleration")["spec"]["suspend"] is True and cond(wl, "Admitted") is None


@pytest.mark.parametrize("platform", ["rhoai-3.3", "rhoai-2.25"])
def test_a_flavor_toleration_counts_and_is_added_to_the_pods_then_removed_on_eviction(platform):
    kueue = pool_kueue(platform)
    kueue.store.mutate(kueue.rf_t, None, "gpu-a10g", lambda f: f["spec"].update(tolerations=[GPU_TOLERATION]))
    create(kueue, gpu_cluster("flavored"))
    settle(kueue)
    assert flavors_of(workload(kueue, "flavored"))["small-group"] == {"gpu-a10g"}
    head, worker = templates(rc(kueue, "flavored"))
    assert "tolerations" not in head  # head got cpu-workers, which has no tolerations
    assert worker["tolerations"] == [GPU_TOLERATION] and worker["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # Kueue v0.12 (3.3) also labels each template with its pod set's name; v0.11 (2.25) does not
    labels = [(t.get("metadata") or {}).get("labels") for t in
              (rc(kueue, "flavored")["spec"]["headGroupSpec"]["template"],
               rc(kueue, "flavored")["spec"]["workerGroupSpecs"][0]["template"])]
    assert labels == ([{"kueue.x-k8s.io/podset": "head"}, {"kueue.x-k8s.io/podset": "small-group"}]
                      if platform == "rhoai-3.3" else [None, None])

    def evict(o):
        o["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
                                          "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
        o["status"]["requeueState"] = {"count": 1, "requeueAt": "2999-01-01T00:00:00Z"}
    kueue.store.mutate(kueue.wl_t, NS, workload(kueue, "flavored")["metadata"]["name"], evict, subresource="status")
    settle(kueue)
    stopped = rc(kueue, "flavored")
    assert stopped["spec"]["suspend"] is True
    assert all("nodeSelector" not in t and "tolerations" not in t for t in templates(stopped))
    assert not stopped["spec"]["workerGroupSpecs"][0]["template"].get("metadata", {}).get("labels")


def test_required_node_affinity_and_selector_choose_among_flavors():
    kueue = pool_kueue()
    pinned = raycluster("pinned", workers=0, cpu="1", memory="2Gi", queue="pool", tolerations=[GPU_TOLERATION])
    pinned["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    create(kueue, pinned)
    # a key no flavor labels is left to kube-scheduler: it does not steer the flavor
    host = raycluster("host", workers=0, cpu="1", memory="2Gi", queue="pool")
    host["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "worker-1"}
    create(kueue, host)
    avoid = raycluster("avoid", workers=0, cpu="1", memory="2Gi", queue="pool")
    avoid["spec"]["headGroupSpec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}}
    create(kueue, avoid)
    settle(kueue)
    assert flavors_of(workload(kueue, "pinned"))["head"] == {"gpu-a10g"}
    assert templates(rc(kueue, "pinned"))[0]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}  # kept, no conflict
    assert flavors_of(workload(kueue, "host"))["head"] == {"cpu-workers"}
    assert templates(rc(kueue, "host"))[0]["nodeSelector"] == {"kubernetes.io/hostname": "worker-1",
                                                               "node-role.kubernetes.io/worker": ""}
    assert cond(workload(kueue, "avoid"), "QuotaReserved")["message"] == (
        f"couldn't assign flavors to pod set head: flavor cpu-workers doesn't match node affinity, {GPU_TAINTED}")


def test_a_rayjobs_cluster_spec_and_submitter_template_get_the_flavor():
    kueue = pool_kueue()
    spec = raycluster("job", workers=0, cpu="1", memory="1Gi", queue=None)["spec"]
    body = {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "job", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "pool"}},
            "spec": {"entrypoint": "python -c pass", "shutdownAfterJobFinishes": True, "rayClusterSpec": spec,
                     "submitterPodTemplate": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "submit", "image": "x", "resources": {"requests": {"cpu": "500m"}}}]}}}}
    kueue.admission("CREATE", kueue.rj_t, body, None)
    kueue.store.create(kueue.rj_t, body)
    settle(kueue)
    job = kueue.store.get(kueue.rj_t, NS, "job")
    assert job["spec"]["suspend"] is False
    # head and the (0-replica) worker group: a pod set of 0 pods requests nothing and fits the first flavor
    assert [t["nodeSelector"] for t in templates(job)] == [{"node-role.kubernetes.io/worker": ""}] * 2
    assert job["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {"node-role.kubernetes.io/worker": ""}


def test_pod_set_merge_conflicts_and_restore():
    from kfp_ray_sandbox.controllers import kueue_podset

    template = {"spec": {"nodeSelector": {"zone": "a"}, "tolerations": [GPU_TOLERATION]}}
    original = kueue_podset.from_pod_set({"template": template})
    with pytest.raises(kueue_podset.PodSetError, match="conflict for nodeSelector: conflict for key=zone, value1=a, value2=b"):
        kueue_podset.merge(template, {"nodeSelector": {"zone": "b"}, "tolerations": []})
    assert template["spec"]["nodeSelector"] == {"zone": "a"}  # nothing changed
    kueue_podset.merge(template, {"nodeSelector": {"zone": "a", "gpu": "y"}, "tolerations": [GPU_TOLERATION, {"key": "k"}]})
    assert template["spec"] == {"nodeSelector": {"zone": "a", "gpu": "y"}, "tolerations": [GPU_TOLERATION, {"key": "k"}]}
    assert kueue_podset.restore(template, original) is True
    assert template["spec"] == {"nodeSelector": {"zone": "a"}, "tolerations": [GPU_TOLERATION]}
    assert kueue_podset.restore(template, original) is False
