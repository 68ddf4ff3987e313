"""One run, two provision tasks: each gets its own cluster (name, task label), a retry of the
same task adopts its own, and a task never takes a sibling's. Kueue never admits these
clusters (fault never_admit): no Ray is needed to see who creates and who adopts what."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client as k8s

from kfp_ray import cluster, rayclusters
from kfp_ray.errors import ForeignCluster
from tests.helpers import eventually

PIPELINE = "kfp_ray.components.provision_ray_cluster.tests.parallel_provisions:two_provisions"
RUN, TASK = "kfp-ray.io/run-id", "kfp-ray.io/task"


def clusters(sbx) -> dict:
    co = k8s.CustomObjectsApi(sbx.api_client())
    return {rc["metadata"]["name"]: rc for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]}


def test_two_provision_tasks_of_one_run_get_two_clusters(box, sbx, run_local):
    """kfp.local runs the two ParallelFor iterations at once; each resolves its own task id."""
    sbx.set_faults({"clusters": {"ray-*": {"never_admit": True}}})
    seen: dict = {}
    done = threading.Event()

    def watch():
        while not done.is_set():
            for name, rc in clusters(sbx).items():
                if name.startswith("ray-"):  # derived names, as the fault's glob: not other tests' clusters
                    seen.setdefault(name, (rc["metadata"]["labels"], rc["metadata"]["annotations"]))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result, log = run_local(PIPELINE, {"admission_timeout": 3})
    finally:
        done.set()
        watcher.join()
    # never admitted, so each task fails at its admission timeout and deletes its own cluster
    assert result["status"] == "FAILURE" and log.count("was not admitted by Kueue within 3s") == 2, log
    assert len(seen) == 2, seen
    (a_labels, a_notes), (b_labels, b_notes) = seen.values()
    assert a_labels[RUN] == b_labels[RUN] and a_labels[TASK] != b_labels[TASK]
    assert a_notes[TASK].startswith("provision-ray-cluster.") and b_notes[TASK].startswith("provision-ray-cluster.")
    assert all(name.startswith(f"ray-{a_labels[RUN][:8]}") and len(name) <= 40 for name in seen)
    eventually(lambda: clusters(sbx) == {}, 30, what="both clusters to be deleted")


def _body(name: str, run_id: str, task_id: str, **kw) -> dict:
    spec = cluster.ClusterSpec(name=name, namespace="sandbox", run_id=run_id, task_name="provision-ray-cluster",
                               task_id=task_id, num_workers=0, head_cpu="500m", head_memory="1Gi", **kw)
    return cluster.build_manifest(spec, "local-queue-test")


def test_a_retry_adopts_its_own_cluster_and_never_a_siblings(box, sbx, as_pipeline_runner, capsys):
    from kfp_ray.validate import derive_cluster_name, task_identity

    sbx.set_faults({"clusters": {"ray-*": {"never_admit": True}, "shared": {"never_admit": True}}})
    name = derive_cluster_name("run-7", task_identity("provision-ray-cluster", "41"))
    created, adopted = cluster.create_or_adopt(_body(name, "run-7", "41"))
    assert not adopted
    again, adopted = cluster.create_or_adopt(_body(name, "run-7", "41"))  # the same task, retried by KFP
    assert adopted and again["metadata"]["uid"] == created["metadata"]["uid"]
    assert "already exists for this run (a retried task): adopting it" in capsys.readouterr().out
    # A sibling (another iteration) given the same explicit name is refused, not handed the cluster.
    cluster.create_or_adopt(_body("shared", "run-7", "41"))
    with pytest.raises(ForeignCluster, match=r"belongs to another task of this run \(kfp-ray.io/task='provision-ray-cluster.41'\)"):
        cluster.create_or_adopt(_body("shared", "run-7", "42"))
    with pytest.raises(ForeignCluster, match="belongs to 'run-7', not to this run"):
        cluster.create_or_adopt(_body("shared", "run-8", "41"))
    # teardown still finds every cluster of the run by its run label
    assert sorted(rayclusters.clusters_of_run("sandbox", "run-7")) == sorted([name, "shared"])


def test_every_ray_container_quiets_autoscaler_events_unless_the_user_asks_for_them(box, sbx, as_pipeline_runner):
    """RAY_SCHEDULER_EVENTS=0 on the head and the workers (cluster.QUIET_AUTOSCALER_EVENTS: Ray
    2.52's import race in a driver's log thread); a value the user gives in `env` is kept."""
    def env_of(body):
        templates = [body["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in body["spec"]["workerGroupSpecs"]]
        return [{e["name"]: e.get("value") for e in c.get("env") or []} for t in templates for c in t["spec"]["containers"]]

    spec = dict(name="quiet", namespace="sandbox", run_id="run-9", task_name="provision-ray-cluster", task_id="1",
                num_workers=1, head_cpu="500m", head_memory="1Gi")
    envs = env_of(cluster.build_manifest(cluster.ClusterSpec(**spec), "local-queue-test"))
    assert len(envs) == 2 and all(e["RAY_SCHEDULER_EVENTS"] == "0" for e in envs), envs
    envs = env_of(cluster.build_manifest(cluster.ClusterSpec(**spec, env={"RAY_SCHEDULER_EVENTS": "1"}), "local-queue-test"))
    assert all(e["RAY_SCHEDULER_EVENTS"] == "1" for e in envs), envs
