"""The pure part of the sandbox's run executor (what Argo and KFP's driver decide): which
tasks of a compiled KFP v2 pipeline (IR) may start, which are skipped, and with what inputs.

IR facts used (compiled/xgboost_tune.yaml, kfp 2.17):
- root.dag.tasks: {name: {componentRef: {name: comp-...}, dependentTasks: [...],
  triggerPolicy: {strategy: ALL_UPSTREAM_TASKS_COMPLETED} (the exit task), inputs: {parameters:
  {k: {componentInputParameter: p} | {taskOutputParameter: {producerTask, outputParameterKey}} |
  {runtimeValue: {constant: v}}}, artifacts: {k: {taskOutputArtifact: {producerTask,
  outputArtifactKey}} | {componentInputArtifact: a}}}, cachingOptions, retryPolicy}}
- a component with "dag" is a sub-DAG (dsl.ExitHandler -> comp-exit-handler-1), its inputs are
  the parent's channels (pipelinechannel--x); its tasks reference componentInputParameter of it.
- the exit task depends on the exit-handler sub-DAG and runs whatever its outcome.
- constants may hold placeholders: {{$.pipeline_job_uuid}}, {{$.pipeline_job_name}},
  {{$.pipeline_task_name}}, {{$.pipeline_task_uuid}} (dsl.PIPELINE_*_PLACEHOLDER), and
  f-strings' {{$.inputs.parameters['pipelinechannel--x']}}.
- platform spec (doc 2): platforms.kubernetes.deploymentSpec.executors[exec-x]: secretAsEnv
  [{keyToEnv: [{envVar, secretKey}], optional, secretNameParameter: {componentInputParameter} |
  secretName}], podMetadata {labels, annotations}, tolerations, nodeSelector, ...
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

PENDING, RUNNING, SUCCEEDED, FAILED, SKIPPED, CANCELED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "SKIPPED", "CANCELED"
DONE = {SUCCEEDED, FAILED, SKIPPED, CANCELED}


@dataclass
class Node:
    """One task of one DAG (path: "exit-handler-1/follow-ray-job" for nested ones)."""
    path: str
    spec: dict
    component: dict
    state: str = PENDING
    outputs: dict = field(default_factory=dict)  # parameter name -> value
    artifacts: dict = field(default_factory=dict)  # artifact name -> [runtime artifact dicts]
    parent_inputs: dict = field(default_factory=dict)  # its DAG's input parameters (kfp-kubernetes settings name them)
    scope: str = ""  # its DAG's node in the Workflow's status (argo_status.ArgoRecord)


def is_exit_task(task: dict) -> bool:
    """The task dsl.ExitHandler compiles to: it runs when its upstream is done, however it ended."""
    return (task.get("triggerPolicy") or {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED"


def runnable(dag_tasks: dict[str, dict], states: dict[str, str]) -> tuple[list[str], list[str]]:
    """(tasks that may start now, tasks to mark SKIPPED) of one DAG, from its tasks' states.
    A task starts when every dependency SUCCEEDED; with ALL_UPSTREAM_TASKS_COMPLETED (exit
    handler) when every dependency is done, whatever its outcome. A normal task whose
    dependency failed or was skipped is skipped (Argo omits it; KFP shows it as skipped)."""
    start, skip = [], []
    for name, task in dag_tasks.items():
        if states.get(name, PENDING) != PENDING:
            continue
        deps = [states.get(d, PENDING) for d in task.get("dependentTasks") or []]
        if is_exit_task(task):
            if all(s in DONE for s in deps):
                start.append(name)
        elif all(s == SUCCEEDED for s in deps):
            start.append(name)
        elif any(s in (FAILED, SKIPPED, CANCELED) for s in deps):
            skip.append(name)
    return start, skip


def condition_holds(task: dict, parameters: dict) -> bool:
    """A dsl.If/Elif/Else branch's triggerPolicy.condition, as KFP's driver evaluates it (CEL,
    backend/src/v2/expression): kfp 2.17 compiles `==, !=, <, <=, >, >=` over
    inputs.parameter_values['pipelinechannel--x'] (int()/double() around numbers), `!(...)`
    for Else and `&&` to chain Elif's. Those forms only, as Python over the task's inputs."""
    expr = (task.get("triggerPolicy") or {}).get("condition")
    if not expr:
        return True
    import re

    py = re.sub(r"!(?!=)", " not ", expr.replace("&&", " and ").replace("||", " or "))
    py = py.replace("inputs.parameter_values", "values")
    return bool(eval(py, {"__builtins__": {}}, {"values": parameters, "int": int, "double": float, "true": True,  # noqa: S307 - compiled IR
                                                "false": False}))


def resolve_parameters(task: dict, parent_inputs: dict, siblings: dict[str, Node]) -> dict:
    """A task's input parameter values: from its DAG's inputs, a sibling's output, or a
    constant. Constants stay as compiled: their placeholders ({{$.pipeline_job_uuid}}, and
    f-strings' {{$.inputs.parameters['x']}}) are resolved in the executor input, as KFP's
    driver does (kfp.local's placeholder_utils does the same). A missing upstream output is
    an error the driver reports (KFP fails the task)."""
    out = {}
    for key, src in ((task.get("inputs") or {}).get("parameters") or {}).items():
        if "componentInputParameter" in src:
            name = src["componentInputParameter"]
            if name in parent_inputs:
                out[key] = parent_inputs[name]
                if src.get("parameterExpressionSelector"):  # a ParallelFor item's field (`item.a`)
                    out[key] = select(out[key], src["parameterExpressionSelector"])
        elif "taskOutputParameter" in src:
            ref = src["taskOutputParameter"]
            producer = siblings[ref["producerTask"]]
            if ref["outputParameterKey"] not in producer.outputs:
                raise KeyError(f"{producer.path} has no output parameter {ref['outputParameterKey']}")
            out[key] = producer.outputs[ref["outputParameterKey"]]
        elif "runtimeValue" in src:
            out[key] = src["runtimeValue"].get("constant")
        elif "taskFinalStatus" in src:
            out[key] = None  # filled by the executor: {state, pipelineJobResourceName, pipelineTaskName, error}
    return out


_FIELD = re.compile(r'^parseJson\(string_value\)\["([^"]+)"\]$')


def select(value, selector: str):
    """A parameterExpressionSelector (CEL, evaluated by KFP's driver) of the form kfp 2.17
    compiles for a ParallelFor item's field: `parseJson(string_value)["key"]`. Any other form
    fails the task, naming it (never an input silently dropped)."""
    m = _FIELD.match(selector)
    if not m:
        raise ValueError(f"parameterExpressionSelector {selector!r}: the sandbox evaluates only "
                         'parseJson(string_value)["key"]')
    item = json.loads(value) if isinstance(value, str) else value
    if not isinstance(item, dict) or m.group(1) not in item:
        raise KeyError(f"parameterExpressionSelector {selector!r}: the item {item!r} has no field {m.group(1)!r}")
    return item[m.group(1)]


def loop_items(task: dict, parameters: dict) -> list:
    """A ParallelFor task's items (parameterIterator: a raw JSON list, or an input parameter
    holding a list), as KFP's DAG driver resolves them (driver/dag.go)."""
    items = task["parameterIterator"]["items"]
    value = json.loads(items["raw"]) if "raw" in items else parameters[items["inputParameter"]]
    value = json.loads(value) if isinstance(value, str) else value
    if not isinstance(value, list):
        raise ValueError(f"the ParallelFor items of task {task.get('taskInfo', {}).get('name')} are not a list: {value!r}")
    return value


def dag_outputs(dag_spec: dict, runs: list[dict[str, Node]], collected: bool) -> tuple[dict, dict]:
    """A sub-DAG's output parameters and artifacts (dag.outputs valueFromParameter /
    artifactSelectors) from its tasks; `runs` holds one {task: Node} per iteration of a
    ParallelFor (`collected`: each output is the list of what every iteration produced,
    dsl.Collected), or just one for any other sub-DAG."""
    spec = dag_spec.get("outputs") or {}
    params, arts = {}, {}
    for name, src in (spec.get("parameters") or {}).items():
        ref = src.get("valueFromParameter") or {}
        values = [n.outputs[ref["outputParameterKey"]] for nodes in runs
                  if (n := nodes.get(ref.get("producerSubtask", ""))) and ref.get("outputParameterKey") in n.outputs]
        if collected:
            params[name] = values
        elif values:
            params[name] = values[0]
    for name, src in (spec.get("artifacts") or {}).items():
        found = []
        for sel in src.get("artifactSelectors") or []:
            for nodes in runs:
                n = nodes.get(sel.get("producerSubtask", ""))
                found += (n.artifacts.get(sel.get("outputArtifactKey", "")) or []) if n else []
        if found:
            arts[name] = found
    return params, arts


def resolve_artifacts(task: dict, parent_artifacts: dict, siblings: dict[str, Node]) -> dict:
    out = {}
    for key, src in ((task.get("inputs") or {}).get("artifacts") or {}).items():
        if "taskOutputArtifact" in src:
            ref = src["taskOutputArtifact"]
            arts = siblings[ref["producerTask"]].artifacts.get(ref["outputArtifactKey"])
            if arts:
                out[key] = arts
        elif "componentInputArtifact" in src and src["componentInputArtifact"] in parent_artifacts:
            out[key] = parent_artifacts[src["componentInputArtifact"]]
    return out


def secret_env(executor_config: dict, parameters: dict) -> list[dict]:
    """kfp-kubernetes secretAsEnv as the pod's env entries (secretKeyRef, optional kept).
    `parameters`: the input parameters of the task's DAG, which secretNameParameter's
    componentInputParameter names (the driver resolves it in the parent's scope)."""
    env = []
    for item in executor_config.get("secretAsEnv") or []:
        name = item.get("secretName") or ""
        ref = (item.get("secretNameParameter") or {}).get("componentInputParameter")
        if ref:
            name = parameters.get(ref, name)
        for k in item.get("keyToEnv") or []:
            env.append({"name": k["envVar"], "valueFrom": {"secretKeyRef": {
                "name": name, "key": k["secretKey"], **({"optional": True} if item.get("optional") else {})}}})
    return env
