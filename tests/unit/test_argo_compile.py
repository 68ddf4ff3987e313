"""The Python port of KFP 2.14.3's Argo compiler (sandbox/pipelines_api/argo/): the Workflow
layout it gives the repo's compiled pipelines, and hand-written IR for conditions and retries
whose expected fragments follow the Go compiler's golden Workflows (rhoai-3.3
test_data/compiled-workflows: if_else_with_oneof_parameters, pipeline_with_retry)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from kfp_ray_sandbox.pipelines_api import argo

REPO = Path(__file__).resolve().parents[2]
COMPILED = sorted((REPO / "compiled").glob("*.yaml"))
EXECUTOR_TEMPLATES = {"system-container-executor", "retry-system-container-executor"}


def load(path: Path) -> tuple[dict, dict | None]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    platform = docs[1]["platforms"]["kubernetes"] if len(docs) > 1 else None
    return docs[0], platform


def templates(wf: dict) -> dict[str, dict]:
    return {t["name"]: t for t in wf["spec"]["templates"]}


def arguments(wf: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}


def tasks_of(template: dict) -> dict[str, dict]:
    return {t["name"]: t for t in template["dag"]["tasks"]}


def params(task: dict) -> dict[str, str]:
    return {p["name"]: p.get("value") for p in task["arguments"].get("parameters", [])}


def html_safe_json(value) -> str:
    """Go's encoding/json of plain strings and lists: compact, keys sorted, <>& escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_numbers(value):
    """Floats with no fraction as Go's JSON writes them (1, not 1.0)."""
    if isinstance(value, dict):
        return {k: go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [go_numbers(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def go_struct_json(container: dict) -> str:
    """hashComponentContainer's input: encoding/json of the Go struct PipelineContainerSpec, its
    fields in the proto's declaration order under their snake_case names, empty ones left out
    (kfp's pipeline_spec_pb2 descriptors give the order; this does not use the compiler's code)."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec

    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(w.title() for w in rest)

    def number(value) -> str:
        return str(int(value)) if float(value).is_integer() else repr(float(value))

    resources = container.get("resources") or {}
    res = [f'"{f.name}":{html_safe_json(resources[camel(f.name)]) if f.type == f.TYPE_STRING else number(resources[camel(f.name)])}'
           for f in spec.ResourceSpec.DESCRIPTOR.fields if resources.get(camel(f.name))]
    parts = [f'"{k}":{html_safe_json(container[k])}' for k in ("image", "command", "args") if container.get(k)]
    if res:
        parts.append('"resources":{' + ",".join(res) + "}")
    return "{" + ",".join(parts) + "}"


@pytest.fixture(scope="module", params=COMPILED, ids=[p.stem for p in COMPILED])
def compiled(request):
    spec, platform = load(request.param)
    return spec, platform, argo.compile_workflow(spec, platform)


def test_repo_has_compiled_pipelines():
    assert len(COMPILED) >= 3


def test_one_implementation_argument_per_distinct_container(compiled):
    spec, _, wf = compiled
    used = {spec["components"][ref]["executorLabel"] for ref in spec["components"]
            if "executorLabel" in spec["components"][ref]}
    containers = {json.dumps(spec["deploymentSpec"]["executors"][label]["container"], sort_keys=True)
                  for label in used}
    impls = [n for n in arguments(wf) if n.startswith("implementations-")]
    assert len(impls) == len(set(impls)) == len(containers)
    assert all(len(n.removeprefix("implementations-")) == 64 for n in impls)
    # Each components-<hash> pairs with the implementations-<hash> of the same container.
    comps = {n.removeprefix("components-") for n in arguments(wf) if n.startswith("components-")}
    assert {n.removeprefix("implementations-") for n in impls} <= comps
    assert "components-root" in arguments(wf)


def test_container_tasks_run_driver_then_executor(compiled):
    spec, _, wf = compiled
    tmpl = templates(wf)
    dags = {"root": spec["root"], **{n: c for n, c in spec["components"].items() if "dag" in c}}
    seen = 0
    for dag_name, component in dags.items():
        for task_name, task in component["dag"]["tasks"].items():
            ref = spec["components"][task["componentRef"]["name"]]
            if "executorLabel" not in ref:
                continue
            exit_task = task.get("triggerPolicy", {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED"
            holder = tmpl[f"exit-hook-{dag_name}-{task_name}" if exit_task else dag_name]
            tasks = tasks_of(holder)
            driver, executor = tasks[f"{task_name}-driver"], tasks[task_name]
            assert driver["template"] == "system-container-driver"
            assert executor["template"] in EXECUTOR_TEMPLATES
            assert executor["depends"] == f"{task_name}-driver.Succeeded"
            assert params(driver)["task-name"] == task_name
            assert params(executor)["pod-spec-patch"] == f"{{{{tasks.{task_name}-driver.outputs.parameters.pod-spec-patch}}}}"
            # The driver waits for the IR's upstream tasks; an exit task waits for nothing.
            deps = task.get("dependentTasks", [])
            want = "" if exit_task else " && ".join(f"{d}.Succeeded" for d in deps)
            assert driver.get("depends", "") == want
            seen += 1
    assert seen >= 1


def test_entrypoint_runs_root_driver_then_root(compiled):
    spec, _, wf = compiled
    assert wf["spec"]["entrypoint"] == "entrypoint"
    entry = templates(wf)["entrypoint"]
    driver, root = entry["dag"]["tasks"]
    assert (driver["name"], driver["template"]) == ("root-driver", "system-dag-driver")
    assert params(driver)["component"] == "{{workflow.parameters.components-root}}"
    assert params(driver)["driver-type"] == "ROOT_DAG"
    runtime = json.loads(params(driver)["runtime-config"])
    defaults = {n: p["defaultValue"] for n, p in spec["root"].get("inputDefinitions", {}).get("parameters", {}).items()
                if "defaultValue" in p}
    assert runtime.get("parameterValues", {}) == defaults
    assert (root["name"], root["template"], root["depends"]) == ("root", "root", "root-driver.Succeeded")
    assert params(root) == {"parent-dag-id": "{{tasks.root-driver.outputs.parameters.execution-id}}", "condition": ""}
    assert wf["spec"]["serviceAccountName"] == "pipeline-runner"
    assert wf["metadata"]["generateName"] == spec["pipelineInfo"]["name"] + "-"


def test_exit_handler_is_a_task_level_exit_hook(compiled):
    spec, _, wf = compiled
    root_tasks = spec["root"]["dag"]["tasks"]
    exits = {n: t for n, t in root_tasks.items()
             if t.get("triggerPolicy", {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED"}
    root = tasks_of(templates(wf)["root"])
    if not exits:
        assert not any("hooks" in t for tmpl in wf["spec"]["templates"] for t in tmpl.get("dag", {}).get("tasks", []))
        assert not any(n.startswith("exit-hook-") for n in templates(wf))
    for exit_name, exit_task in exits.items():
        hook = f"exit-hook-root-{exit_name}"
        assert exit_name not in root and f"{exit_name}-driver" not in root
        for guarded in exit_task["dependentTasks"]:
            assert root[guarded]["hooks"] == {"exit": {
                "template": hook,
                "arguments": {"parameters": [{"name": "parent-dag-id", "value": "{{inputs.parameters.parent-dag-id}}"}]}}}
        assert templates(wf)[hook]["inputs"] == {"parameters": [{"name": "parent-dag-id"}]}
        assert "hooks" not in wf["spec"] and "onExit" not in wf["spec"]


def test_arguments_are_go_protojson(compiled):
    spec, platform, wf = compiled
    args = arguments(wf)
    label = sorted(spec["deploymentSpec"]["executors"])[0]
    container = spec["deploymentSpec"]["executors"][label]["container"]
    digest = hashlib.sha256(go_struct_json(container).encode()).hexdigest()
    assert args[f"implementations-{digest}"] == html_safe_json(go_numbers(container))  # protojson writes 1.0 as 1
    assert "\\u0026" in args[f"implementations-{digest}"] or "&" not in json.dumps(container)
    assert not any(c in "".join(args.values()) for c in "<>&")
    assert json.loads(args[f"components-{digest}"])["executorLabel"] == label
    for name, config in ((platform or {}).get("deploymentSpec", {}).get("executors", {})).items():
        comp = next(n for n, c in spec["components"].items() if c.get("executorLabel") == name)
        assert args[f"kubernetes-{comp}"] == html_safe_json(config)


# ---------------------------------------------------------------------------------------------
# Hand-written IR.

def container_executor(image: str = "python:3.11") -> dict:
    return {"container": {"image": image, "command": ["sh", "-c"], "args": ["echo hi"]}}


def container_component(label: str) -> dict:
    return {"executorLabel": label, "inputDefinitions": {"parameters": {"text": {"parameterType": "STRING"}}}}


HEADS = "inputs.parameter_values['pipelinechannel--flip-coin-Output'] == 'heads'"
TAILS = "inputs.parameter_values['pipelinechannel--flip-coin-Output'] == 'tails'"


def if_elif_else_ir() -> dict:
    channel = {"pipelinechannel--flip-coin-Output": {"componentInputParameter": "pipelinechannel--flip-coin-Output"}}

    def branch(n: int, condition: str) -> dict:
        return {"componentRef": {"name": f"comp-condition-{n}"}, "inputs": {"parameters": channel},
                "taskInfo": {"name": f"condition-{n}"}, "triggerPolicy": {"condition": condition}}

    def branch_dag(task: str) -> dict:
        return {"dag": {"tasks": {task: {
            "cachingOptions": {"enableCache": True}, "componentRef": {"name": "comp-print"},
            "inputs": {"parameters": {"text": {"runtimeValue": {"constant": task}}}}, "taskInfo": {"name": task}}}},
            "inputDefinitions": {"parameters": {"pipelinechannel--flip-coin-Output": {"parameterType": "STRING"}}}}

    return {
        "pipelineInfo": {"name": "if-elif-else"},
        "schemaVersion": "2.1.0",
        "sdkVersion": "kfp-2.14.3",
        "deploymentSpec": {"executors": {"exec-flip-coin": container_executor(), "exec-print": container_executor("busybox")}},
        "components": {
            "comp-flip-coin": {"executorLabel": "exec-flip-coin",
                               "outputDefinitions": {"parameters": {"Output": {"parameterType": "STRING"}}}},
            "comp-print": container_component("exec-print"),
            "comp-condition-branches-1": {"dag": {"tasks": {
                "condition-2": branch(2, HEADS),
                "condition-3": branch(3, f"!({HEADS}) && {TAILS}"),
                "condition-4": branch(4, f"!({HEADS}) && !({TAILS})")}},
                "inputDefinitions": {"parameters": {"pipelinechannel--flip-coin-Output": {"parameterType": "STRING"}}}},
            "comp-condition-2": branch_dag("print-heads"),
            "comp-condition-3": branch_dag("print-tails"),
            "comp-condition-4": branch_dag("print-edge"),
        },
        "root": {"dag": {"tasks": {
            "flip-coin": {"cachingOptions": {"enableCache": True}, "componentRef": {"name": "comp-flip-coin"},
                          "taskInfo": {"name": "flip-coin"}},
            "condition-branches-1": {
                "componentRef": {"name": "comp-condition-branches-1"}, "dependentTasks": ["flip-coin"],
                "inputs": {"parameters": {"pipelinechannel--flip-coin-Output": {
                    "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "flip-coin"}}}},
                "taskInfo": {"name": "condition-branches-1"}},
        }}},
    }


def test_if_elif_else_gates_each_branch_on_its_driver():
    wf = argo.compile_workflow(if_elif_else_ir())
    tmpl = templates(wf)
    branches = tmpl["comp-condition-branches-1"]["dag"]["tasks"]
    assert [t["name"] for t in branches] == ["condition-2-driver", "condition-2", "condition-3-driver", "condition-3",
                                             "condition-4-driver", "condition-4"]
    # As in the golden if_else_with_oneof_parameters.yaml, comp-condition-branches-1.
    assert branches[0] == {"name": "condition-2-driver", "template": "system-dag-driver", "arguments": {"parameters": [
        {"name": "component", "value": "{{workflow.parameters.components-comp-condition-2}}"},
        {"name": "parent-dag-id", "value": "{{inputs.parameters.parent-dag-id}}"},
        {"name": "task", "value": '{"componentRef":{"name":"comp-condition-2"},"inputs":{"parameters":'
                                  '{"pipelinechannel--flip-coin-Output":{"componentInputParameter":'
                                  '"pipelinechannel--flip-coin-Output"}}},"taskInfo":{"name":"condition-2"},'
                                  '"triggerPolicy":{"condition":"inputs.parameter_values[\'pipelinechannel--'
                                  'flip-coin-Output\'] == \'heads\'"}}'},
        {"name": "task-name", "value": "condition-2"}]}}
    assert branches[1] == {"name": "condition-2", "template": "comp-condition-2", "arguments": {"parameters": [
        {"name": "parent-dag-id", "value": "{{tasks.condition-2-driver.outputs.parameters.execution-id}}"},
        {"name": "condition", "value": "{{tasks.condition-2-driver.outputs.parameters.condition}}"}]},
        "when": "{{tasks.condition-2-driver.outputs.parameters.condition}} != false",
        "depends": "condition-2-driver.Succeeded"}
    # The elif condition's && is stored as Go's encoding/json writes it.
    elif_task = params(branches[2])["task"]
    assert "] == 'heads') \\u0026\\u0026 inputs.parameter_values" in elif_task
    assert "&" not in elif_task
    # The branch-holder DAG task itself has no condition: no `when`, but its condition output is passed.
    root = tasks_of(tmpl["root"])
    assert "when" not in root["condition-branches-1"]
    assert params(root["condition-branches-1"])["condition"] == \
        "{{tasks.condition-branches-1-driver.outputs.parameters.condition}}"
    assert root["condition-branches-1-driver"]["depends"] == "flip-coin.Succeeded"
    # Inside a branch, the container task is plain (the branch's DAG task carries the gate).
    heads = tasks_of(tmpl["comp-condition-2"])
    assert "when" not in heads["print-heads"] and heads["print-heads"]["template"] == "system-container-executor"
    # Both print branches share one container: one components-/implementations- pair.
    assert sum(n.startswith("implementations-") for n in arguments(wf)) == 2


def retry_ir() -> dict:
    add = {"cachingOptions": {"enableCache": True}, "componentRef": {"name": "comp-add"},
           "inputs": {"parameters": {"a": {"componentInputParameter": "a"}, "b": {"componentInputParameter": "b"}}},
           "retryPolicy": {"backoffDuration": "0s", "backoffFactor": 2, "backoffMaxDuration": "3600s",
                           "maxRetryCount": 3}, "taskInfo": {"name": "add"}}
    nested = {"componentRef": {"name": "comp-nested"}, "taskInfo": {"name": "nested"},
              "retryPolicy": {"maxRetryCount": 1, "backoffDuration": "1.5s", "backoffFactor": 1.5}}
    inner = {"cachingOptions": {}, "componentRef": {"name": "comp-inner"}, "taskInfo": {"name": "inner"}}
    number = {"parameterType": "NUMBER_DOUBLE"}
    return {
        "pipelineInfo": {"name": "test-pipeline"},
        "schemaVersion": "2.1.0",
        "deploymentSpec": {"executors": {"exec-add": container_executor(), "exec-inner": container_executor("busybox")}},
        "components": {
            "comp-add": {"executorLabel": "exec-add", "inputDefinitions": {"parameters": {"a": number, "b": number}}},
            "comp-inner": {"executorLabel": "exec-inner"},
            "comp-nested": {"dag": {"tasks": {"inner": inner}}},
        },
        "root": {"dag": {"tasks": {"add": add, "nested": nested}},
                 "inputDefinitions": {"parameters": {"a": {**number, "defaultValue": 1.0},
                                                     "b": {**number, "defaultValue": 7.5}}}},
    }


def test_retry_policy_becomes_a_retry_strategy():
    wf = argo.compile_workflow(retry_ir())
    tmpl = templates(wf)
    root = tasks_of(tmpl["root"])
    # As in the golden pipeline_with_retry.yaml: the policy rides in the task JSON and as values.
    assert params(root["add-driver"])["task"] == (
        '{"cachingOptions":{"enableCache":true},"componentRef":{"name":"comp-add"},"inputs":{"parameters":'
        '{"a":{"componentInputParameter":"a"},"b":{"componentInputParameter":"b"}}},"retryPolicy":'
        '{"backoffDuration":"0s","backoffFactor":2,"backoffMaxDuration":"3600s","maxRetryCount":3},'
        '"taskInfo":{"name":"add"}}')
    assert root["add"]["template"] == "retry-system-container-executor"
    assert root["add"]["arguments"]["parameters"][2:] == [
        {"name": "retry-max-count", "value": "3"}, {"name": "retry-backoff-duration", "value": "0"},
        {"name": "retry-backoff-factor", "value": "2"}, {"name": "retry-backoff-max-duration", "value": "3600"}]
    assert tmpl["retry-system-container-impl"]["retryStrategy"] == {
        "limit": "{{inputs.parameters.retry-max-count}}",
        "backoff": {"duration": "{{inputs.parameters.retry-backoff-duration}}",
                    "factor": "{{inputs.parameters.retry-backoff-factor}}",
                    "maxDuration": "{{inputs.parameters.retry-backoff-max-duration}}"}}
    executor = tmpl["retry-system-container-executor"]
    assert executor["inputs"]["parameters"][2:] == [
        {"name": n, "default": "0"} for n in ("retry-max-count", "retry-backoff-duration", "retry-backoff-factor",
                                              "retry-backoff-max-duration")]
    # A sub-DAG's policy is handed down to its task (visitor.go); Argo gets whole seconds.
    inner = tasks_of(tmpl["comp-nested"])
    assert json.loads(params(inner["inner-driver"])["task"])["retryPolicy"] == {
        "backoffDuration": "1.500s", "backoffFactor": 1.5, "maxRetryCount": 1}
    assert inner["inner"]["template"] == "retry-system-container-executor"
    assert inner["inner"]["arguments"]["parameters"][2:] == [
        {"name": "retry-max-count", "value": "1"}, {"name": "retry-backoff-duration", "value": "1"},
        {"name": "retry-backoff-factor", "value": "1.5"}]
    # The DAG task itself gets no retry parameters; defaults reach the runtime config as Go writes floats.
    assert "retry-max-count" not in params(root["nested"])
    entry = tasks_of(tmpl["entrypoint"])["root-driver"]
    assert params(entry)["runtime-config"] == '{"parameterValues":{"a":1,"b":7.5}}'


def test_run_options_reach_the_workflow():
    wf = argo.compile_workflow(retry_ir(), parameter_values={"a": 2}, pipeline_root="s3://bucket/root",
                               cache_disabled=True, env={"PIPELINE_RUN_AS_USER": "1001"})
    entry = tasks_of(templates(wf)["entrypoint"])["root-driver"]
    assert params(entry)["runtime-config"] == \
        '{"gcsOutputDirectory":"s3://bucket/root","parameterValues":{"a":2,"b":7.5}}'
    assert templates(wf)["system-container-driver"]["container"]["args"][-1] == "--cache_disabled"
    assert wf["spec"]["securityContext"] == {"runAsUser": 1001}
    run = argo.run_workflow(retry_ir(), run_id="1234", run_display_name="my run", namespace="ns")
    assert "{{workflow.uid}}" not in json.dumps(run)
    assert run["metadata"]["labels"] == {"pipeline/runid": "1234"}
    assert all(t["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false" for t in run["spec"]["templates"])


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s["pipelineInfo"].update(name=""), "pipelineInfo.name is empty"),
    (lambda s: s["root"]["dag"]["tasks"]["add"].update(
        artifactIterator={"items": {"inputArtifact": "x"}, "itemInput": "y"}),
     'compiling DAG "root": artifact iterator not implemented yet'),
    (lambda s: s["deploymentSpec"]["executors"].update({"exec-add": {"resolver": {}}}),
     'error processing component name="comp-add": executor(label="exec-add"): '
     "non-container and non-importer executor not implemented"),
])
def test_go_errors(mutate, message):
    spec = retry_ir()
    mutate(spec)
    with pytest.raises(ValueError) as err:
        argo.compile_workflow(spec)
    assert str(err.value) == message
