"""A run's tasks as KFP 2.14's API and Argo show them, for the CLI's output.

KFP 2.14.3 reports one task detail per node of the run's Argo Workflow (api_converter.go
toModelTasks): a pipeline task `t` appears as `t-driver` (its driver) and `t` (its DAG, whose
state is the task's), beside `root`, `root-driver`, the Workflow itself and each `executor`
pod. No detail names its pod or says why it failed: a task's pods are found by the run's label
(`pipeline/runid`) and Argo's node-name annotation, and why a run failed is in its Workflow."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from types import SimpleNamespace

from kfp_ray.postmortem import NODE_KEY, task_of_node

RUN_LABEL = "pipeline/runid"
_EXECUTOR = re.compile(r"\.executor(\((\d+)\))?$")
# An omitted task (an upstream failed: Argo's node phase Omitted) is RUNTIME_STATE_UNSPECIFIED in
# the API; the CLI says what it means
OMITTED = "OMITTED"


def states(run) -> dict[str, str]:
    """Each pipeline task's state, by task name (a task is a detail with a `<name>-driver` beside it)."""
    details = (run.run_details.task_details if run.run_details else None) or []
    names = {d.display_name for d in details}
    return {d.display_name: OMITTED if d.state in (None, "RUNTIME_STATE_UNSPECIFIED") else d.state
            for d in details if d.display_name != "root" and f"{d.display_name}-driver" in names}


def run_reader(client) -> Callable[[str], SimpleNamespace]:
    """get_run for following a run: what Follower and states() read (run_id, state, each task's
    display_name and state), from the server's JSON. kfp.Client.get_run builds the whole
    V2beta1Run, its pipeline spec included, on every poll: 1.6 CPU-s of a local run's follow."""
    api = client._run_api  # kfp 2.17's RunServiceApi (what Client.get_run calls)

    def get(run_id: str) -> SimpleNamespace:
        raw = api.run_service_get_run(run_id=run_id, _preload_content=False, _request_timeout=30)
        run = json.loads(raw.data)
        tasks = [SimpleNamespace(display_name=t.get("display_name"), state=t.get("state"))
                 for t in (run.get("run_details") or {}).get("task_details") or []]
        return SimpleNamespace(run_id=run["run_id"], state=run.get("state"), run_details=SimpleNamespace(task_details=tasks))

    return get


def executor_pods(core, namespace: str, run_id: str) -> dict[str, list[str]]:
    """Each task's executor pods, first attempt first (`core`: a kubernetes CoreV1Api). The
    listing is read as JSON: follow calls this on every poll, and the client's models cost it
    more CPU than the rest of its loop."""
    found: dict[str, list[tuple[int, str]]] = {}
    raw = core.list_namespaced_pod(namespace, label_selector=f"{RUN_LABEL}={run_id}", _request_timeout=30,
                                   _preload_content=False)
    for pod in json.loads(raw.data)["items"]:
        node = (pod["metadata"].get("annotations") or {}).get(NODE_KEY, "")
        m = _EXECUTOR.search(node)
        if m:
            found.setdefault(task_of_node(node), []).append((int(m.group(2) or 0), pod["metadata"]["name"]))
    return {task: [name for _, name in sorted(pods)] for task, pods in found.items()}


def workflow_failure(custom, namespace: str, run_id: str) -> str:
    """Why the run's Workflow failed, as Argo says it: its message, and each failed pod node's
    task and message (`custom`: a kubernetes CustomObjectsApi). "" when it did not fail or is gone."""
    items = custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows",
                                                 label_selector=f"{RUN_LABEL}={run_id}", _request_timeout=30)["items"]
    if not items:
        return ""
    status = items[0].get("status") or {}
    lines = [status["message"]] if status.get("message") else []
    for node in (status.get("nodes") or {}).values():
        if node.get("type") == "Pod" and node.get("phase") in ("Failed", "Error") and node.get("message"):
            line = f"{task_of_node(node['name'])}: {node['message']}"
            if line not in lines:
                lines.append(line)
    return "; ".join(lines)
