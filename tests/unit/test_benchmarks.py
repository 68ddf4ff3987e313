"""The benchmarks' arithmetic (benchmarks/): what their tables claim follows from what they saw."""

from __future__ import annotations

import math

from benchmarks import harness, overhead, release


def test_percentiles_are_nearest_rank_and_ignore_missing_values():
    assert harness.pct([3.0, 1.0, 2.0, None], 50) == 2.0
    assert harness.pct([float(i) for i in range(1, 21)], 95) == 19.0
    assert harness.pct([0.4, 0.5], 95) == 0.5
    assert math.isnan(harness.pct([None], 95))


def test_the_overhead_phases_add_up_to_the_wall_time():
    asked, ended = 1000.0, 1047.5
    tasks = {"provision-ray-cluster": {"start": 1000.5, "end": 1014.0}, "follow-ray-job": {"start": 1016.0, "end": 1040.0},
             "publish-training-results": {"start": 1040.5, "end": 1044.0}}
    cluster = {"admitted": 1003.2, "ready": 1012.5, "job_start": 1016.2, "job_end": 1036.0}
    requests = [{"ts": 1003.0, "method": "POST", "path": "/apis/ray.io/v1/namespaces/ns/rayclusters"},
                {"ts": 1036.4, "method": "GET", "path": "/apis/ray.io/v1/namespaces/ns/rayclusters/c"},
                {"ts": 1036.5, "method": "DELETE", "path": "/apis/ray.io/v1/namespaces/ns/rayclusters/c"}]
    phases = overhead.split(asked, ended, tasks, {"c": cluster}, requests)
    assert math.isclose(sum(phases[p] for p in overhead.PHASES), ended - asked, abs_tol=0.05)
    assert phases["admission"] == 0.2 and phases["follow sees the end"] == 0.4
    assert phases["_delete_request_after_end"] == 0.5
    assert "incomplete" in overhead.split(asked, ended, tasks, {}, requests)  # no cluster seen: said, not guessed


def test_api_cost_counts_each_phase_of_the_clusters_life_by_verb():
    reqs = [{"ts": t, "verb": v} for t, v in ((0.0, "create"), (0.1, "get"), (2.0, "get"), (2.5, "list"),
                                              (40.0, "patch"), (59.9, "get"), (60.0, "delete"))]
    cost = release.cost(reqs, create=0.0, admitted=1.0, ready=10.0, delete=60.0)
    assert cost["queued"] == {"seconds": 1.0, "requests": 2, "verbs": {"create": 1, "get": 1}}
    assert cost["starting"]["requests"] == 2 and cost["running"]["verbs"] == {"patch": 1, "get": 1}
    assert cost["per_cluster_minute"] == 7.0  # the delete request itself included: 7 in one minute


def test_task_pod_costs_split_driver_and_executor_and_sum_a_tasks_attempts():
    import json
    from types import SimpleNamespace

    wf = "wf-1.root.exit-handler-1"
    pods = {  # name -> (Argo's node name, first seen, Running, ended)
        "d1": (f"{wf}.follow-ray-job-driver", 10.0, 10.1, 10.6),
        "e1": (f"{wf}.follow-ray-job.executor", 11.0, 11.5, 20.0),
        "e2": (f"{wf}.follow-ray-job.executor(1)", 21.0, 21.4, 25.0),  # KFP's retry: the same task
        "r": ("wf-1.root-driver", 9.0, 9.1, 9.4),
        "t": (f"{wf}.teardown-ray-cluster.executor", 30.0, 30.2, None),  # still running: not counted
    }
    items = [{"metadata": {"name": n, "labels": {"pipeline/runid": "r1"},
                           "annotations": {"workflows.argoproj.io/node-name": node}}, "status": {"phase": "Pending"}}
             for n, (node, *_) in pods.items()]
    obs = harness.Observer.__new__(harness.Observer)  # its pod bookkeeping alone, on a canned listing
    obs.ns, obs.pods = "ns", {}
    obs.core = SimpleNamespace(list_namespaced_pod=lambda *a, **kw: SimpleNamespace(data=json.dumps({"items": items})))
    obs._task_pods(0.0)
    assert {n: (p["task"], p["kind"]) for n, p in obs.pods.items()} == {
        "d1": ("follow-ray-job", "driver"), "e1": ("follow-ray-job", "executor"), "e2": ("follow-ray-job", "executor"),
        "r": ("root", "driver"), "t": ("teardown-ray-cluster", "executor")}
    for n, (_, first, running, ended) in pods.items():  # as the polls would have seen them
        obs.pods[n] |= {"first_seen": first, "running": running, **({"ended": ended} if ended else {})}
    assert obs.pod_costs("r1") == {
        "follow-ray-job": {"driver": 0.6, "executor_start": 0.9, "executor": 12.1},
        "root": {"driver": 0.4, "executor_start": 0.0, "executor": 0.0}}
    assert obs.pod_costs("r2") == {}


def test_the_four_way_comparison_takes_medians_percentiles_and_issue_31s_ratios():
    def runs(walls, releases=None, requests=None):
        return [{"wall": w, "release": (releases or [None] * len(walls))[i], "requests": (requests or [0] * len(walls))[i]}
                for i, w in enumerate(walls)]

    rows = {"hand": runs([30, 32, 31]), "peer": runs([40, 44, 42], [300.5, 301.0, 300.2], [7, 7, 9]),
            "image": runs([35, 33, 34], [1.0, 2.0, 4.0], [120, 130, 125]), "rayjob": runs([43, 41, 42], [0.5, 0.6, 0.7]),
            "pipeline": runs([60, 62, 61])}
    fw = overhead.four_way(rows)
    assert fw["kinds"]["peer"] == {"wall_s": 42, "release_p50_s": 300.5, "release_p95_s": 301.0, "requests": 7}
    assert fw["kinds"]["image"]["release_p95_s"] == 4.0 and fw["kinds"]["image"]["requests"] == 125
    assert math.isnan(fw["kinds"]["hand"]["release_p50_s"])  # by hand: no cluster to release
    assert fw["ratios"] == {"raycluster / peer": round(34 / 42, 3), "raycluster / floor": round(34 / 31, 3),
                            "rayjob / peer": 1.0}
    assert fw["met"] == {"raycluster / peer": True, "raycluster / floor": True, "rayjob / peer": True}
    assert overhead.four_way({"hand": runs([30]), "image": runs([40])})["ratios"] == {}  # no peer run: no ratio


def test_the_pip_path_suite_knows_every_kind_of_component():
    """Each kind of _build.KINDS has its imports to check and its components to name (a kind
    added without them failed the whole suite with a KeyError)."""
    from benchmarks import pip_path
    from kfp_ray.components import _build

    for kind in {**pip_path.BASELINE, **_build.KINDS}:
        assert pip_path.IMPORTS.get(kind) and pip_path.COMPONENTS.get(kind), kind
