"""A run's Argo Workflow as the workflow controller keeps it: its nodes in `status.nodes`, each
with the resolved inputs and outputs Argo records, persisted through the sandbox's API server
after every change, and Argo's size limits on the way.

From argoproj/argo-workflows v3.6.12 (what KFP 2.14.3 on rhoai-3.3 runs; go.mod):
- node ids and pod names (pkg/apis/workflow/v1alpha1/workflow_types.go `NodeID`,
  workflow/util/pod_name.go `GeneratePodName`, POD_NAMES=v2): `<workflow>-<fnv32a(node name)>`,
  and `<workflow>-<template>-<the same hash>` for a pod;
- a node's inputs are its template's, resolved (workflow/controller/operator.go: `node.Inputs =
  executeTmpl.Inputs.DeepCopy()`, DAG nodes too); a driver's outputs are its output parameters
  with their values (the pod spec patch among them), so each container task carries its pod spec
  patch three times (driver output, executor DAG input, executor pod input) and its component
  and container JSON once more (driver inputs);
- persisting (operator.go `persistUpdates`, workflow/packer/packer.go): a Workflow whose JSON is
  over MAX_WORKFLOW_SIZE (1 MiB; RHOAI's pipelines operator sets no other) has status.nodes
  gzipped into status.compressedNodes; still over it, and with no node status offloading (DSPO
  configures none), the workflow is marked Error with packer's message and nothing more runs;
  an update etcd refuses ("request is too large") marks the workflow Error from its last stored
  state (`persistWorkflowSizeLimitErr`).
Nodes are laid out as KFP's compiled templates make Argo lay them out (argo/compiler.py): the
entrypoint's `root-driver` and `root`, then per container task `<task>-driver` (a pod),
`<task>` (a DAG) and its `executor` (a pod); per sub-DAG task `<task>-driver` and `<task>`; an
exit task under `<guarded task>.onExit` (workflow/controller/exit_handler.go runOnExitNode:
`common.GenerateOnExitNodeName`; its pods are exit pods, which the workflow deadline a
terminate sets does not stop, workflowpod.go). A node's display name is its name less its
boundary's (operator.go initializeNode). What the record leaves out: resourcesDuration,
progress, conditions, outboundNodes and the artifact repository fields (small, fixed per node).
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Callable

from .task_report import seconds_now as now  # metav1.Time: whole seconds

MAX_WORKFLOW_SIZE = 1024 * 1024
TOO_LARGE = "workflow is longer than maximum allowed size."
NO_OFFLOAD = "Tried to offload but encountered error: offload node status is not supported"
POD_NAME_PREFIX_MAX = 253 - 10 - 1  # pod_name.go: maxK8sResourceNameLength - k8sNamingHashLength, less one


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def node_id(workflow: str, node_name: str) -> str:
    return workflow if node_name == workflow else f"{workflow}-{fnv32a(node_name)}"


def pod_name(workflow: str, node_name: str, template: str) -> str:
    prefix = f"{workflow}-{template}" if template else workflow
    return f"{prefix[:POD_NAME_PREFIX_MAX]}-{fnv32a(node_name)}"


def _size(value) -> int:
    """Bytes of Go's encoding/json of `value` (compact; Go escapes <, > and & as six bytes each)."""
    text = json.dumps(value, separators=(",", ":"))
    return len(text.encode()) + 5 * sum(text.count(c) for c in "<>&")


class DriverFailed(Exception):
    """A driver's pod failed: its task fails with Argo's message for the pod."""


def _output(node: dict, name: str) -> str:
    return next(p.get("value", "") for p in (node.get("outputs") or {}).get("parameters", []) if p["name"] == name)


class SizeError(Exception):
    """The workflow is in Error for its size: the message Argo gives it."""


class ArgoRecord:
    """One run's Workflow: created at the run's creation, its nodes added and ended by the
    engine (workflow.py) as Argo's controller would add and end them, each change persisted.
    `persist(workflow) -> stored workflow` writes it (raises the API server's error)."""

    def __init__(self, workflow: dict, persist: Callable[[dict], dict],
                 run_driver: Callable[[dict], str] | None = None):
        """`run_driver(node) -> ""` or why it failed: runs a driver node's pod to its end."""
        self.run_driver = run_driver
        self.wf = workflow
        self.name = workflow["metadata"]["name"]
        self.persist = persist
        self.lock = threading.RLock()
        self.params = {p["name"]: p.get("value", "") for p in workflow["spec"]["arguments"].get("parameters", [])}
        self.templates = {t["name"]: t for t in workflow["spec"]["templates"]}
        self.nodes: dict[str, dict] = {}
        self._pods: dict[str, str] = {}  # pod name -> node name
        self.error: str | None = None  # set once the workflow is in Error for its size
        self._dag_ids = 0
        self._stored = workflow  # the last state etcd took

    # --- what the engine calls ---------------------------------------------------------------
    def begin(self) -> str:
        """The workflow starts: its own node, the root DAG's driver, the root DAG. Returns the
        root DAG node's name."""
        with self.lock:
            self.wf["status"] = {"phase": "Running", "startedAt": now(), "finishedAt": None, "nodes": self.nodes}
            top = self._node(self.name, self.name, "DAG", "entrypoint", None, None, [])
        driver = self._driver(top, "entrypoint", "root-driver", {}, self._dag_driver_outputs)
        with self.lock:
            root = self._task_node(top, "entrypoint", "root", "DAG",
                                   {"tasks.root-driver.outputs.parameters.execution-id": _output(driver, "execution-id")})
            self._save()
            return root["name"]

    def dag_task(self, parent: str, task: str, hook_of: str | None = None) -> str:
        """A sub-DAG task (an exit handler's group): its DAG driver, then its DAG node."""
        with self.lock:
            scope, where = self._scope(parent, task, hook_of)
        driver = self._driver(scope, where, f"{task}-driver", self._scope_values(scope), self._dag_driver_outputs)
        with self.lock:
            node = self._task_node(scope, where, task, "DAG",
                                   {f"tasks.{task}-driver.outputs.parameters.execution-id": _output(driver, "execution-id"),
                                    f"tasks.{task}-driver.outputs.parameters.condition": "true"})
            self._save()
            return node["name"]

    def cached_task(self, parent: str, task: str, hook_of: str | None = None) -> None:
        """A container task the driver found in the cache: its driver says cached-decision
        "true", and the executor DAG's pod task (`when: <cached-decision> != true`) is
        Skipped; the task's DAG node succeeds."""
        executor = self.container_task(parent, task, "", hook_of, cached=True)
        with self.lock:
            parent_node = self._by_name(executor)
            inner = self.templates[parent_node["templateName"]]["dag"]["tasks"][0]
            node = self._node(f"{executor}.{inner['name']}", inner["name"], "Skipped", inner["template"], parent_node,
                              parent_node["id"], None)
            self._end(node, "Skipped", message="when 'true != true' evaluated false")
            self._end(parent_node, "Succeeded")
            self._save()

    def container_task(self, parent: str, task: str, pod_spec_patch: str, hook_of: str | None = None,
                       cached: bool = False) -> str:
        """A container task's driver (its pod spec patch as output) and its executor DAG node.
        Returns the executor DAG node's name."""
        decision = "true" if cached else "false"
        with self.lock:
            scope, where = self._scope(parent, task, hook_of)
        self._driver(scope, where, f"{task}-driver", self._scope_values(scope), lambda: [
            {"name": "pod-spec-patch", "value": pod_spec_patch,
             "valueFrom": {"default": "", "path": "/tmp/outputs/pod-spec-patch"}},
            {"name": "cached-decision", "default": "false", "value": decision,
             "valueFrom": {"default": "false", "path": "/tmp/outputs/cached-decision"}},
            {"name": "condition", "value": "true", "valueFrom": {"default": "true", "path": "/tmp/outputs/condition"}}])
        with self.lock:
            prefix = f"tasks.{task}-driver.outputs.parameters."
            node = self._task_node(scope, where, task, "DAG", {prefix + "pod-spec-patch": pod_spec_patch,
                                                                prefix + "cached-decision": decision})
            self._save()
            return node["name"]

    def omitted(self, parent: str, task: str, hook_of: str | None = None) -> None:
        """A task whose upstream failed: Argo's DAG marks its driver task, then the task itself,
        Omitted (dag.go executeDAGTask: "omitted: depends condition not met")."""
        with self.lock:
            scope, where = self._scope(parent, task, hook_of)
            for name in (f"{task}-driver", task):
                node = self._task_node(scope, where, name, "Skipped", {}, inputs=False)
                self._end(node, "Omitted", message="omitted: depends condition not met")
            self._save()

    def condition_false(self, parent: str, task: str, hook_of: str | None = None) -> None:
        """A task whose dsl.If condition is false: its driver succeeds with condition "false",
        and the task's `when: <condition> != false` skips it (dag.go: "when '...' evaluated false")."""
        with self.lock:
            scope, where = self._scope(parent, task, hook_of)
        self._driver(scope, where, f"{task}-driver", self._scope_values(scope), lambda: [
            {"name": "condition", "value": "false", "valueFrom": {"default": "true", "path": "/tmp/outputs/condition"}}])
        with self.lock:
            node = self._task_node(scope, where, task, "Skipped", {}, inputs=False)
            self._end(node, "Skipped", message="when 'false != false' evaluated false")
            self._save()

    def loop_task(self, parent: str, task: str, count: int, hook_of: str | None = None) -> str:
        """A ParallelFor task (argocompiler iterator_task): its loop DAG node, the loop's
        `iteration-driver` (`iteration-count` out) and the `iteration-iterations` TaskGroup
        that Argo makes for a `withSequence` task. Returns the loop node's name."""
        with self.lock:
            scope, where = self._scope(parent, task, hook_of)
            loop = self._task_node(scope, where, task, "DAG", self._scope_values(scope))
        self._driver(loop, loop["templateName"], "iteration-driver", self._scope_values(loop),
                     lambda: self._dag_driver_outputs(count))
        with self.lock:
            self._task_node(loop, loop["templateName"], "iteration-iterations", "TaskGroup", {}, inputs=False)
            self._save()
            return loop["name"]

    def iteration(self, loop_name: str, index: int) -> str:
        """Iteration `index` of a loop starts: `iteration-iterations(i:i)` (operator.go
        generateNodeName), its `iteration-item-driver` and its `iteration-item` DAG, under
        which the loop body's tasks go. Returns the `iteration-item` node's name."""
        with self.lock:
            loop, group = self._by_name(loop_name), self._by_name(f"{loop_name}.iteration-iterations")
            spec = next(t for t in self.templates[loop["templateName"]]["dag"]["tasks"]
                        if t["name"] == "iteration-iterations")
            driver_id = _output(self._by_name(f"{loop_name}.iteration-driver"), "execution-id")
            it = self._node(f"{group['name']}({index}:{index})", f"iteration-iterations({index}:{index})", "DAG",
                            spec["template"], group, loop["id"],
                            self._inputs(spec, {"tasks.iteration-driver.outputs.parameters.execution-id": driver_id,
                                                "item": str(index)}))
            values = {**self._scope_values(it), "inputs.parameters.iteration-index": str(index)}
        driver = self._driver(it, it["templateName"], "iteration-item-driver", values, self._dag_driver_outputs)
        with self.lock:
            item = self._task_node(it, it["templateName"], "iteration-item", "DAG", {
                **values, "tasks.iteration-item-driver.outputs.parameters.execution-id": _output(driver, "execution-id")})
            self._save()
            return item["name"]

    def end_iteration(self, loop_name: str, index: int, phase: str) -> None:
        with self.lock:
            it = self._by_name(f"{loop_name}.iteration-iterations({index}:{index})")
            item = self.nodes.get(node_id(self.name, f"{it['name']}.iteration-item"))
            if item is not None:
                self._end(item, phase)
            self._end(it, phase)
            self._save()

    def _driver(self, scope: dict, where: str, task: str, values: dict, outputs: Callable[[], list]) -> dict:
        """A driver task's pod node: Pending, then run (`run_driver`, outside the lock: drivers
        of parallel tasks run side by side), then ended with its outputs. A driver that fails
        fails its node and raises DriverFailed with Argo's message."""
        with self.lock:
            node = self._task_node(scope, where, task, "Pod", values)
            node["phase"] = "Pending"
            self._save()
        failure = self.run_driver(node) if self.run_driver is not None else ""
        with self.lock:
            if failure:
                self._end(node, "Failed", message=failure)
            else:
                self._end(node, "Succeeded", outputs=outputs())
            self._save()
        if failure:
            raise DriverFailed(f"{task}: {failure}")
        return node

    def executor_pod(self, executor: str) -> str:
        """The executor DAG's next pod node (pending): `<executor>.executor`, or with a retry
        strategy a Retry node of that name and its attempts `executor(0)`, `executor(1)`...
        Returns the pod's name, as Argo names it."""
        with self.lock:
            parent = self._by_name(executor)
            template = self.templates[parent["templateName"]]
            inner = template["dag"]["tasks"][0]  # `executor`, on the impl template
            values = {f"inputs.parameters.{p['name']}": p.get("value", "") for p in parent["inputs"]["parameters"]}
            inputs = self._inputs(inner, values)
            name = f"{executor}.{inner['name']}"
            owner, display = parent, inner["name"]
            if "retryStrategy" in self.templates[inner["template"]]:
                retry = self.nodes.get(node_id(self.name, name))
                if retry is None:
                    retry = self._node(name, inner["name"], "Retry", inner["template"], parent, parent["id"], inputs)
                attempt = len(retry.get("children", []))
                name, display, owner = f"{name}({attempt})", f"{inner['name']}({attempt})", retry
            node = self._node(name, display, "Pod", inner["template"], owner, parent["id"], inputs)
            node["phase"] = "Pending"
            pod = pod_name(self.name, name, inner["template"])
            self._pods[pod] = name
            self._save()
            return pod

    def pod_node(self, pod: str) -> str:
        """The node name of the pod `pod` (executor_pod's)."""
        return self._pods[pod]

    def node_id(self, name: str) -> str:
        return node_id(self.name, name)

    def end(self, name: str, phase: str, message: str = "", host: str = "") -> None:
        """A node (and, for a pod, its executor DAG) ends: Succeeded, Failed, Skipped or Omitted."""
        with self.lock:
            node = self._by_name(name)
            if host:
                node["hostNodeName"] = host
            self._end(node, phase, message=message,
                      outputs={"exitCode": "0" if phase == "Succeeded" else "1"} if node["type"] == "Pod" else None)
            for child in node.get("children", []):  # an executor DAG's Retry node, a loop's TaskGroup, end with it
                if self.nodes[child]["type"] in ("Retry", "TaskGroup") and self.nodes[child]["phase"] == "Running":
                    self._end(self.nodes[child], phase, message=message)
            self._save()

    def pending(self, name: str, message: str) -> None:
        """A pod node that waits (its pod refused for now: markNodePending with the reason)."""
        with self.lock:
            node = self._by_name(name)
            if node.get("message") != message:
                node["phase"], node["message"] = "Pending", message
                self._save()

    def running(self, name: str, host: str = "") -> None:
        with self.lock:
            node = self._by_name(name)
            node["phase"] = "Running"
            if host:
                node["hostNodeName"] = host
            self._save()

    def close(self, phase: str, message: str = "") -> None:
        """The workflow ends (not if it is already in Error for its size)."""
        with self.lock:
            if self.error is not None:
                return
            for node in self.nodes.values():
                if node["type"] == "DAG" and node["phase"] == "Running":
                    self._end(node, phase)
            self.wf["status"].update({"phase": phase, "finishedAt": now(), **({"message": message} if message else {})})
            self._save()

    # --- nodes ----------------------------------------------------------------------------------
    def _node(self, name: str, display: str, kind: str, template: str, parent: dict | None, boundary: str | None,
              inputs: list[dict] | None) -> dict:
        nid = node_id(self.name, name)
        node = {"id": nid, "name": name, "displayName": display, "type": kind, "templateName": template,
                "templateScope": f"local/{self.name}", "phase": "Running", "startedAt": now(), "finishedAt": None}
        if boundary:
            node["boundaryID"] = boundary
        if inputs:
            node["inputs"] = {"parameters": inputs}
        self.nodes[nid] = node
        if parent is not None:
            parent.setdefault("children", []).append(nid)
        return node

    def _task_node(self, scope: dict, where: str, task: str, kind: str, values: dict, inputs: bool = True) -> dict:
        """The node of DAG template `where`'s task `task`, in the scope (DAG node) `scope` (a
        node Argo skips or omits is made before its inputs are resolved: none)."""
        spec = next(t for t in self.templates[where]["dag"]["tasks"] if t["name"] == task)
        return self._node(f"{scope['name']}.{task}", task, kind, spec["template"], scope, scope["id"],
                          self._inputs(spec, values) if inputs else None)

    def _inputs(self, task: dict, values: dict) -> list[dict]:
        """The task's template inputs, resolved from its arguments as Argo resolves them."""
        given = {p["name"]: p for p in (task.get("arguments") or {}).get("parameters", [])}
        out = []
        for p in (self.templates[task["template"]].get("inputs") or {}).get("parameters", []):
            item = {"name": p["name"]}
            if "default" in p:
                item["default"] = p["default"]
            arg = given.get(p["name"])
            value = self._resolve(arg.get("value", ""), values) if arg and "value" in arg else p.get("default")
            if value is not None:
                item["value"] = value
            out.append(item)
        return out

    def _resolve(self, text: str, values: dict) -> str:
        if not text.startswith("{{") or not text.endswith("}}"):
            return text
        key = text[2:-2]
        if key.startswith("workflow.parameters."):
            return self.params.get(key[len("workflow.parameters."):], text)
        return str(values.get(key, text))

    def _scope(self, parent: str, task: str, hook_of: str | None) -> tuple[dict, str]:
        """(the DAG node a task's nodes go under, the DAG template that declares them)."""
        node = self._by_name(parent)
        if hook_of is None:
            return node, node["templateName"]
        guarded = self._by_name(f"{parent}.{hook_of}")
        hook_template = next(t for t in self.templates[node["templateName"]]["dag"]["tasks"]
                             if t["name"] == hook_of)["hooks"]["exit"]["template"]
        hook = self.nodes.get(node_id(self.name, f"{guarded['name']}.onExit"))
        if hook is None:
            hook = self._node(f"{guarded['name']}.onExit", f"{hook_of}.onExit", "DAG", hook_template, node,
                              node["id"], [{"name": "parent-dag-id", "value": self._parent_dag_id(node)}])
            hook["nodeFlag"] = {"hooked": True}
        return hook, hook_template

    def _scope_values(self, scope: dict) -> dict:
        return {"inputs.parameters.parent-dag-id": self._parent_dag_id(scope)}

    @staticmethod
    def _parent_dag_id(node: dict) -> str:
        for p in (node.get("inputs") or {}).get("parameters", []):
            if p["name"] == "parent-dag-id":
                return p.get("value", "")
        return ""

    def _dag_driver_outputs(self, iterations: int = 0) -> list[dict]:
        self._dag_ids += 1
        return [{"name": "execution-id", "value": str(self._dag_ids), "valueFrom": {"path": "/tmp/outputs/execution-id"}},
                {"name": "iteration-count", "value": str(iterations),
                 "valueFrom": {"default": "0", "path": "/tmp/outputs/iteration-count"}},
                {"name": "condition", "value": "true", "valueFrom": {"default": "true", "path": "/tmp/outputs/condition"}}]

    def _by_name(self, name: str) -> dict:
        return self.nodes[node_id(self.name, name)]

    def _end(self, node: dict, phase: str, message: str = "", outputs=None) -> None:
        node["phase"], node["finishedAt"] = phase, now()
        if message:
            node["message"] = message
        if isinstance(outputs, list):
            node["outputs"] = {"parameters": outputs, "exitCode": "0"}
        elif outputs:
            node["outputs"] = outputs

    # --- persisting, as persistUpdates does ------------------------------------------------
    def _save(self) -> None:
        if self.error is not None:
            return
        wf = {**self.wf, "status": {**self.wf["status"], "nodes": dict(self.nodes)}}
        size = _size(wf)
        if size > MAX_WORKFLOW_SIZE:
            nodes = wf["status"].pop("nodes")
            wf["status"]["compressedNodes"] = base64.b64encode(gzip.compress(
                json.dumps(nodes, separators=(",", ":")).encode())).decode()
            compressed = _size(wf)
            if compressed > MAX_WORKFLOW_SIZE:
                self.error = f"{TOO_LARGE} compressed size {compressed} > maxSize {MAX_WORKFLOW_SIZE}{NO_OFFLOAD}"
                wf["status"] = {**self.wf["status"], "nodes": nodes, "phase": "Error", "message": self.error,
                                "finishedAt": now()}
        try:
            self._stored = self.persist(wf)
        except Exception as exc:  # noqa: BLE001 - the API server's refusal, etcd's among them
            if "request is too large" not in str(exc):
                raise
            self.error = str(getattr(exc, "message", exc))
            last = {**self._stored, "status": {**(self._stored.get("status") or {}), "phase": "Error",
                                               "message": self.error, "finishedAt": now()}}
            self._stored = self.persist(last)
