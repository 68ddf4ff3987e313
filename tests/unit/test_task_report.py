"""The sandbox DSP's task details as KFP 2.14.3 reports them from a Workflow's nodes
(sandbox/pipelines_api/task_report.py): keys, states, ids kept across reports, nothing
reported from compressed nodes."""

from __future__ import annotations

from kfp_ray_sandbox.pipelines_api import task_report


def workflow(*nodes, compressed=False):
    status = {"compressedNodes": "H4sI..."} if compressed else {"nodes": {n["id"]: n for n in nodes}}
    return {"metadata": {"name": "small-ab12c", "creationTimestamp": "2026-11-27T01:00:00Z"}, "status": status}


def node(nid, name, display, phase, template="", children=()):
    return {"id": nid, "name": name, "displayName": display, "phase": phase, "templateName": template,
            "startedAt": "2026-11-27T01:00:01Z", "finishedAt": None, **({"children": list(children)} if children else {})}


def test_one_task_per_node_with_argos_phases_as_v2_states_and_children_as_node_ids():
    run, table = {"run_id": "r1"}, {}
    task_report.report(run, workflow(
        node("small-ab12c", "small-ab12c", "small-ab12c", "Running", "entrypoint", ["small-ab12c-1"]),
        node("small-ab12c-1", "small-ab12c.root.use-driver", "use-driver", "Omitted", "system-container-driver"),
        node("small-ab12c-2", "small-ab12c.root.make.executor", "executor", "Error", "system-container-impl")), table)
    details = {d["display_name"]: d for d in run["run_details"]["task_details"]}
    assert {k: d["state"] for k, d in details.items()} == {
        "small-ab12c": "RUNNING", "use-driver": "RUNTIME_STATE_UNSPECIFIED", "executor": "FAILED"}
    assert details["small-ab12c"]["child_tasks"] == [{"pod_name": "small-ab12c-1"}]
    assert details["executor"]["end_time"] == task_report.EPOCH and details["executor"]["create_time"] == "2026-11-27T01:00:00Z"
    assert not any("pod_name" in d or "error" in d for d in details.values())
    # the key a task is stored under is RetrievePodName's: <workflow>-<template>-<hash of the node id>
    assert set(table) == {"small-ab12c", "small-ab12c-system-container-driver-1", "small-ab12c-system-container-impl-2"}


def test_a_task_keeps_its_id_its_history_grows_on_change_and_compressed_nodes_report_nothing():
    run, table = {"run_id": "r1"}, {}
    running = node("wf-7", "wf.root.t.executor(0)", "executor(0)", "Running", "impl")
    task_report.report(run, workflow(running), table)
    first = dict(run["run_details"]["task_details"][0])
    task_report.report(run, workflow(running), table)  # no change: no new history entry
    task_report.report(run, workflow({**running, "phase": "Succeeded"}), table)
    again = run["run_details"]["task_details"][0]
    assert again["task_id"] == first["task_id"]
    assert [h["state"] for h in again["state_history"]] == ["RUNNING", "SUCCEEDED"]
    task_report.report(run, workflow({**running, "phase": "Failed"}, compressed=True), table)
    assert run["run_details"]["task_details"][0]["state"] == "SUCCEEDED"  # HasNodes() is false: not reported
