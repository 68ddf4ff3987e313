"""A run's task details as KFP 2.14.3's API server gives them: reported from the run's Argo
Workflow each time the persistence agent sees it change, one task per Workflow node.

From red-hat-data-services/data-science-pipelines `rhoai-3.3` (KFP 2.14.3):
- report_server.go `reportTasksFromExecution`: nothing is reported while the Workflow has no
  `status.nodes` (Argo has gzipped them into `compressedNodes`: the tasks stay as last reported);
- api_converter.go `toModelTasks` / `toModelTask(util.NodeStatus)`: nodes in node-id order;
  display name = the node's displayName (`root`, `<task>-driver`, `<task>`, `executor`,
  `executor(1)`, the Workflow's own name...), state = its phase through `RuntimeState.ToV2`
  (Error is FAILED; Omitted is RUNTIME_STATE_UNSPECIFIED), child tasks = the node's children
  as `pod_name` (node ids, not pod names), create time = the Workflow's creation;
- common/util/workflow.go `RetrievePodName`: the key a task is stored under (never shown);
- storage/task_store.go `CreateOrUpdateTasks`: a task keeps the random id it got first, and a
  state history entry is added when its state changes;
- `toApiPipelineTaskDetail`: no pod name, no error and no executor detail in what is returned;
  timestamps are whole seconds (a node not finished ends at the Unix epoch)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

EPOCH = "1970-01-01T00:00:00Z"
UNSPECIFIED = "RUNTIME_STATE_UNSPECIFIED"
# Argo node phase -> v2beta1 RuntimeState (model/run.go ToV2 of the phase, upper-cased)
V2_STATE = {"Pending": "PENDING", "Running": "RUNNING", "Succeeded": "SUCCEEDED", "Skipped": "SKIPPED",
            "Failed": "FAILED", "Error": "FAILED"}


def seconds_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def retrieve_pod_name(workflow: str, node: dict) -> str:
    """common/util/workflow.go RetrievePodName (apiVersion argoproj.io/v1alpha1)."""
    if node["name"] == workflow:
        return workflow
    prefix = workflow if ".inline" in node["name"] else f"{workflow}-{node.get('templateName', '')}"
    return f"{prefix}-{node['id'].rsplit('-', 1)[-1]}"


def report(run: dict, workflow: dict, stored: dict[str, dict]) -> None:
    """Report `workflow` (as stored) into `run`'s task details; `stored` is the run's task
    table (key -> task detail fields), kept by the caller between reports."""
    nodes = (workflow.get("status") or {}).get("nodes")
    if not nodes:
        return
    name = workflow["metadata"]["name"]
    created = workflow["metadata"].get("creationTimestamp") or seconds_now()
    for nid in sorted(nodes):
        node = nodes[nid]
        key = retrieve_pod_name(name, node)
        task = stored.get(key)
        if task is None:
            task = stored[key] = {"run_id": run["run_id"], "task_id": str(uuid.uuid4()), "state_history": []}
        state = V2_STATE.get(node.get("phase", ""), UNSPECIFIED)
        task.update(display_name=node.get("displayName", ""), create_time=created,
                    start_time=node.get("startedAt") or EPOCH, end_time=node.get("finishedAt") or EPOCH, state=state)
        if node.get("children"):
            task["child_tasks"] = [{"pod_name": child} for child in node["children"]]
        history = task["state_history"]
        if not history or history[-1]["state"] != state:
            history.append({"update_time": seconds_now(), "state": state})
    run["run_details"] = {"task_details": list(stored.values())}
