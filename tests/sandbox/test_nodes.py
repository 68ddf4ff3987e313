"""Issue 27 items 1-3 through the runtime library and the real kubernetes client: an OpenShift
node pool (3 tainted control-plane nodes, 2 CPU workers, a tainted GPU node) and a scheduler
that decides as kube-scheduler does. Kueue's quota and the nodes' capacity both apply."""

from __future__ import annotations

import re

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.errors import StartupTimeout
from kfp_ray_sandbox.nodepool import GPU_TOLERATION
from kfp_ray_sandbox.raypip import SHARED_ENV
from tests.helpers import eventually, raycluster

NS = "sandbox"


def _pods(api, cluster: str):
    return k8s.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"ray.io/cluster={cluster}").items


def test_a_cluster_in_quota_but_too_big_for_any_node_waits_then_is_given_up_naming_the_nodes(sbx, as_admin, capsys):
    """8 CPUs fit the queue's 9 but no worker's 7.5 allocatable: admitted, never scheduled. With
    waitForPodsReady on (2.x's default; a 3.x administrator's choice) Kueue evicts and requeues it
    until provision gives up: each eviction line says what the pods wait for, and the cause is the
    nodes, not a slow pull. (Where Kueue does not evict, the startup timeout ends it with the
    same cause: the GPU test below.)"""
    from kfp_ray.errors import Evicted

    # a pods-ready timeout longer than provision's pod listing (every 5 s while starting); 5 min on RHOAI
    sbx.set_faults({"platform": {"pods_ready_timeout_s": 12, "requeue_backoff_base_s": 1, "wait_for_pods_ready": True}})
    with pytest.raises(Evicted) as err:
        tasks.provision(run_id="run-too-big-evicted", cluster_name="too-big-evicted", namespace=NS,
                        local_queue="local-queue-test", num_workers=0, head_cpu="8", head_memory="1Gi",
                        admission_timeout=120, startup_timeout=120)
    said = str(err.value)
    assert "kube-scheduler found no node for its pods" in said and "2 Insufficient cpu" in said, said
    out = capsys.readouterr().out
    assert re.search(r"evicted it: PodsReadyTimeout: .*; pods were: head Pending \(unschedulable\); head not "
                     r"scheduled: waiting for room on a node \(2 Insufficient cpu; other nodes: .*untolerated taint "
                     r"\{nvidia.com/gpu: true\}", out), out
    assert "pull" not in said.split("Fix:")[1], said


def test_gpu_workers_land_on_the_gpu_node_and_ray_places_gpu_tasks_there(sbx, as_admin, tmp_path, capsys, monkeypatch):
    """Each Ray node (pod) also installs the job's runtime_env pip packages itself, as on RHOAI:
    the suite's shared install (raypip.SHARED_ENV) is off for this cluster's nodes."""
    monkeypatch.setenv(SHARED_ENV, "0")  # read by the nodes as they start
    p = tasks.provision(run_id="run-gpu", cluster_name="gpu", namespace=NS, local_queue="local-queue-test",
                        num_workers=1, worker_gpus=1, tolerations=[GPU_TOLERATION], head_cpu="1", head_memory="1Gi",
                        worker_cpu="1", worker_memory="1Gi", admission_timeout=60, startup_timeout=240)
    assert "pods on nodes: head worker-" in capsys.readouterr().out
    api = sbx.api_client()
    where = {pod.metadata.labels["ray.io/node-type"]: pod for pod in _pods(api, "gpu")}
    assert where["worker"].spec.node_name == "gpu-worker-0"
    assert where["head"].spec.node_name in ("worker-0", "worker-1")
    usage = k8s.CustomObjectsApi(api).get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues",
                                                                "cluster-queue")["status"]["flavorsUsage"][0]
    assert {r["name"]: r["total"] for r in usage["resources"]}["nvidia.com/gpu"] == "1"  # of the seed's 5
    job = ("python -c \"import os, sys, ray, termcolor; ray.init(); print('GPUS', ray.cluster_resources().get('GPU')); "
           "where = lambda: (ray.util.get_node_ip_address(), os.path.realpath(sys.prefix)); "
           "f = ray.remote(num_gpus=1)(where); ip, env = ray.get(f.remote()); print('ON', ip); "
           "print('ENVS', env, where()[1])\"")
    job_id = tasks.submit(p.dashboard_url, job, run_id="run-gpu", cluster_name="gpu", namespace=NS, pip=["termcolor"])
    result = tasks.follow(p.dashboard_url, job_id, log_path=str(tmp_path / "job.log"), cluster_name="gpu",
                          namespace=NS, timeout=180, max_poll_seconds=1.0)
    log = (tmp_path / "job.log").read_text()
    assert result.status == "SUCCEEDED", log
    assert "GPUS 1.0" in log and f"ON {where['worker'].status.pod_ip}" in log
    envs = next(line for line in log.splitlines() if line.startswith("ENVS "))
    # each node's own virtualenv (its temp dir mounted at the head's path), not the shared pip-envs one
    assert "runtime_resources/pip/" in envs and "pip-envs" not in envs, envs


def test_gpu_workers_without_the_toleration_fail_naming_the_taint(sbx, as_admin, capsys):
    with pytest.raises(StartupTimeout) as err:
        tasks.provision(run_id="run-no-tol", cluster_name="no-toleration", namespace=NS, local_queue="local-queue-test",
                        num_workers=1, worker_gpus=1, head_cpu="500m", head_memory="1Gi", worker_cpu="500m",
                        worker_memory="1Gi", admission_timeout=60, startup_timeout=20)
    said = str(err.value)
    assert "worker not scheduled" in said and "untolerated taint {nvidia.com/gpu: true}" in said, said
    assert "Fix: request no more per pod than a worker node can hold" in said and "`tolerations`" in said, said


def test_a_pending_pod_is_placed_once_a_node_takes_it_again(sbx):
    """Both workers cordoned: the head waits, "2 node(s) were unschedulable"; one uncordoned, it
    is scheduled there (the scheduler tries again after its back-off)."""
    api = sbx.api_client()
    core = k8s.CoreV1Api(api)
    try:
        for n in ("worker-0", "worker-1"):
            core.patch_node(n, {"spec": {"unschedulable": True}})
        sbx.set_faults({"clusters": {"cordoned": {"slow_start": 600}}})  # placement is under test, not Ray
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            "ray.io", "v1", NS, "rayclusters", raycluster("cordoned", workers=0, cpu="500m", memory="1Gi"))

        def verdict():
            head = next(iter(_pods(api, "cordoned")), None)
            cond = next((c for c in (head.status.conditions or []) if c.type == "PodScheduled"), None) if head else None
            return cond if cond and cond.status == "False" else None

        cond = eventually(verdict, 60, what="the scheduler's verdict on the head")
        assert cond.reason == "Unschedulable"
        assert cond.message.startswith("0/6 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: true}, "
                                       "2 node(s) were unschedulable, 3 node(s) had untolerated taint "
                                       "{node-role.kubernetes.io/master: }.")
        core.patch_node("worker-1", {"spec": {"unschedulable": None}})
        head = eventually(lambda: next((p for p in _pods(api, "cordoned") if p.spec.node_name), None), 60,
                          what="the head to be scheduled once worker-1 is uncordoned")
        assert head.spec.node_name == "worker-1"
    finally:
        for n in ("worker-0", "worker-1"):
            core.patch_node(n, {"spec": {"unschedulable": None}})


def test_a_cold_node_pulls_the_image_before_the_pod_starts(sbx):
    """Issue 27 item 4: the first pod needing an image on a node waits in ContainerCreating for
    the node's pull (here the `image_pull_s` fault: 4 s), with the kubelet's Pulling and Pulled
    events; the pod starts after it."""
    api = sbx.api_client()
    image = "quay.io/modh/ray:2.52.1-py311-cu121-cold-node-test"  # on no node yet
    sbx.set_faults({"clusters": {"cold": {"image_pull_s": 4}}})
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "ray.io", "v1", NS, "rayclusters", raycluster("cold", workers=0, cpu="500m", memory="1Gi", image=image))

    def creating():
        head = next((p for p in _pods(api, "cold") if p.spec.node_name), None)
        states = [cs.state.waiting.reason for cs in (head.status.container_statuses or []) if cs.state.waiting] if head else []
        return head if "ContainerCreating" in states else None

    head = eventually(creating, 60, what="the head to wait in ContainerCreating for its node's pull")
    eventually(lambda: all(cs.ready for cs in (k8s.CoreV1Api(api).read_namespaced_pod(
        head.metadata.name, NS).status.container_statuses or [])), 120, what="the head to be ready once pulled")
    events = [(e.reason, e.message) for e in k8s.CoreV1Api(api).list_namespaced_event(NS).items
              if e.involved_object.name == head.metadata.name]
    assert ("Pulling", f'Pulling image "{image}"') in events, events
    pulled = next(m for r, m in events if r == "Pulled")
    assert re.match(rf'Successfully pulled image "{re.escape(image)}" in 4\.0\d\ds \(4\.0\d\ds including waiting\)\. '
                    r"Image size: \d+ bytes\.", pulled), pulled
