"""Kueue admission as RHOAI's Kueue does it, driven step by step (no Ray processes)."""

from __future__ import annotations

import pytest
import yaml

from sandbox.apiserver.resources import Registry
from sandbox.apiserver.store import Store
from sandbox.controllers.kueue import KueueController, pod_requests
from sandbox.core import DATA
from sandbox.faults import Faults
from tests.helpers import raycluster

NS = "sandbox"


@pytest.fixture
def kueue():
    reg, store, faults = Registry(), Store(), Faults()
    for obj in yaml.safe_load((DATA / "bootstrap.yaml").read_text()):
        group = obj["apiVersion"].rpartition("/")[0]
        store.create(reg.by_kind(group, obj["kind"]), obj)
    ctl = KueueController(store, reg, faults)
    ctl.faults = faults
    return ctl


def create(ctl, body):
    body["metadata"]["namespace"] = NS
    body["spec"]["suspend"] = True  # what the webhook does on create
    return ctl.store.create(ctl.rc_t, body)


def workload(ctl, rc_name):
    for wl in ctl.store.list(ctl.wl_t, NS)[0]:
        if wl["metadata"]["ownerReferences"][0]["name"] == rc_name:
            return wl
    return None


def condition(wl, type_):
    return next((c for c in (wl.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def test_pod_requests_sum_containers_and_fall_back_to_limits():
    tpl = {"spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
                                   {"resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}}
    req = pod_requests(tpl)
    assert req["cpu"] == 2 and req["memory"] == 1024**3 + 512 * 1024**2 and req["pods"] == 1


def test_admits_fifo_until_quota_then_holds_with_kueues_message(kueue):
    # each cluster: head 3 cpu + 1 worker 3 cpu = 6 cpu, 2 pods; quota is 9 cpu, 5 pods
    create(kueue, raycluster("first", cpu="3"))
    create(kueue, raycluster("second", cpu="3"))
    kueue.reconcile()
    first, second = workload(kueue, "first"), workload(kueue, "second")
    assert condition(first, "Admitted")["status"] == "True"
    assert first["status"]["admission"]["clusterQueue"] == "cluster-queue"
    assert kueue.store.get(kueue.rc_t, NS, "first")["spec"]["suspend"] is False
    held = condition(second, "QuotaReserved")
    assert held["status"] == "False" and held["reason"] == "Pending"
    assert held["message"] == ("couldn't assign flavors to pod set small-group: "
                               "insufficient unused quota for cpu in flavor default-flavor, 3 more needed")
    assert kueue.store.get(kueue.rc_t, NS, "second")["spec"]["suspend"] is True
    cq = kueue.store.get(kueue.cq_t, None, "cluster-queue")["status"]
    usage = {r["name"]: r["total"] for r in cq["flavorsUsage"][0]["resources"]}
    assert usage == {"cpu": "6", "memory": "4Gi", "pods": "2", "nvidia.com/gpu": "0"}
    assert cq["pendingWorkloads"] == 1 and cq["admittedWorkloads"] == 1
    lq = kueue.store.get(kueue.lq_t, NS, "local-queue-test")["status"]
    assert lq["pendingWorkloads"] == 1 and lq["admittedWorkloads"] == 1
    # deleting the admitted cluster garbage-collects its Workload and frees the quota
    kueue.store.delete(kueue.rc_t, NS, "first")
    kueue.reconcile()
    assert workload(kueue, "first") is None
    assert condition(workload(kueue, "second"), "Admitted")["status"] == "True"


def test_request_over_nominal_quota_never_fits(kueue):
    create(kueue, raycluster("huge", cpu="5"))
    kueue.reconcile()
    msg = condition(workload(kueue, "huge"), "QuotaReserved")["message"]
    assert msg == ("couldn't assign flavors to pod set small-group: insufficient quota for cpu in flavor default-flavor, "
                   "request > maximum capacity (10 > 9)")


def test_pods_quota_counts_every_replica(kueue):
    create(kueue, raycluster("many", workers=5, cpu="100m", memory="100Mi"))  # 6 pods > 5
    kueue.reconcile()
    assert "insufficient quota for pods in flavor default-flavor, request > maximum capacity (6 > 5)" in \
        condition(workload(kueue, "many"), "QuotaReserved")["message"]


def test_gpu_quota_and_uncovered_resources(kueue):
    create(kueue, raycluster("gpus", workers=1, cpu="1", gpu=3))  # 6 GPUs > 5
    body = raycluster("tpu", cpu="1")
    body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] = "1"
    create(kueue, body)
    kueue.reconcile()
    assert "insufficient quota for nvidia.com/gpu in flavor default-flavor, request > maximum capacity (6 > 5)" in \
        condition(workload(kueue, "gpus"), "QuotaReserved")["message"]
    assert condition(workload(kueue, "tpu"), "QuotaReserved")["message"] == \
        "couldn't assign flavors to pod set head: resource google.com/tpu unavailable in ClusterQueue"


def test_unknown_local_queue_is_inadmissible(kueue):
    create(kueue, raycluster("lost", queue="no-such-queue"))
    kueue.reconcile()
    cond = condition(workload(kueue, "lost"), "QuotaReserved")
    assert cond["reason"] == "Inadmissible" and cond["message"] == "LocalQueue no-such-queue doesn't exist"


def test_never_admit_fault_holds_the_workload(kueue):
    kueue.faults.set({"clusters": {"stuck-*": {"never_admit": True}}})
    create(kueue, raycluster("stuck-1", cpu="100m", memory="100Mi"))
    create(kueue, raycluster("free-1", cpu="100m", memory="100Mi"))
    kueue.reconcile()
    assert condition(workload(kueue, "stuck-1"), "QuotaReserved")["status"] == "False"
    assert "never_admit" in condition(workload(kueue, "stuck-1"), "QuotaReserved")["message"]
    assert condition(workload(kueue, "free-1"), "Admitted")["status"] == "True"  # BestEffortFIFO moves on


def test_strict_fifo_blocks_behind_the_head_of_the_queue(kueue):
    kueue.store.mutate(kueue.cq_t, None, "cluster-queue", lambda cq: cq["spec"].update(queueingStrategy="StrictFIFO"))
    create(kueue, raycluster("big", cpu="3"))
    create(kueue, raycluster("bigger", cpu="4"))
    create(kueue, raycluster("small", cpu="100m", memory="100Mi"))
    kueue.reconcile()
    assert condition(workload(kueue, "big"), "Admitted")["status"] == "True"
    assert condition(workload(kueue, "bigger"), "Admitted") is None
    assert condition(workload(kueue, "small"), "Admitted") is None
