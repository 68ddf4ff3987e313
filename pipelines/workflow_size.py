"""How big a compiled pipeline becomes on the cluster: the figures `kfp-ray compile --check` checks.

Modelled on KFP 2.14.3 (kubeflow/pipelines, tag 2.14.3):
- backend/src/v2/compiler/argocompiler/argo.go, saveProtoToArguments/hashComponentContainer:
  each component's spec and container JSON are Workflow arguments (spec.arguments.parameters),
  once per distinct container (keyed by its hash);
- argocompiler/container.go, containerDriverTask/addContainerDriverTemplate: every container
  task's driver gets the component spec, the task spec and the container JSON as inputs, the
  container JSON as one `--container` argument; addContainerExecutorTemplate: the driver's
  pod-spec-patch output is an input of the executor DAG node and of its pod node;
- backend/src/v2/driver/driver.go, initPodSpecPatch: the pod-spec-patch is the launcher's
  command line: executor input, component spec JSON, then the component's command and args;
- argocompiler/dag.go: a DAG task has a DAG driver (component and task spec as inputs).
Argo records every node's inputs and outputs, values included, in the Workflow's status, and
passes the resolved template to its init/wait processes in the ARGO_TEMPLATE env variable.
The Workflow is stored as JSON (Go's encoding/json: "<", ">", "&" become \\u003c...). Argo
may gzip status.nodes when the Workflow passes 1 MiB; we keep under it uncompressed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import yaml

KIB = 1024
ARG_LIMIT = 64 * KIB  # our target for one argument of an executor: room for a user's code_dir
MAX_ARG_STRLEN = 131072  # Linux: the most bytes one argv or env string may have
WORKFLOW_LIMIT = 1024 * KIB  # our target for the Workflow object (etcd refuses requests over 1.5 MiB)
# What the model does not derive from the IR: the fixed templates (drivers, executor, exit
# hooks), each node's own fields (name, phase, times, children, log artifact), the run's
# executor input (parameter values, artifact URIs) and a template's fields besides its inputs.
SPEC_FIXED = 16 * KIB
NODE = 1 * KIB
TEMPLATE_FIXED = 3 * KIB  # the executor pod's: 7 volumes, launcher init container, mounts, archive location
VALUE = 64  # a parameter given no default: a value of this many characters
LAUNCHER_ARGS = 512  # launcher path, run and pod fields (initPodSpecPatch)


def go_json(value) -> str:
    """`value` as Go's encoding/json writes it (compact, HTML characters escaped)."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def string_size(text: str) -> int:
    """Bytes `text` takes as a JSON string value in the Workflow."""
    return len(go_json(text))


@dataclass
class ExecutorFigures:
    name: str
    largest_arg: int  # the longest element of its command and args (our target: ARG_LIMIT)
    driver_container_arg: int  # the driver's --container argument (MAX_ARG_STRLEN)
    driver_template_env: int  # ARGO_TEMPLATE of its driver pod (MAX_ARG_STRLEN)
    executor_template_env: int  # ARGO_TEMPLATE of its executor pod (MAX_ARG_STRLEN)
    component_json: str = field(repr=False, default="")
    container_json: str = field(repr=False, default="")
    pod_spec_patch: str = field(repr=False, default="")

    def problems(self) -> list[str]:
        """What crosses a limit: our target for one argument, the kernel's for the driver's
        argument (an argv string is never offloaded: argoproj/argo-workflows#15471) and for
        an ARGO_TEMPLATE. Argo 3.6 (KFP 2.14.3's) would move an ARGO_TEMPLATE over
        MAX_ARG_STRLEN into a ConfigMap it creates (argoproj/argo-workflows#12325), but the
        Role DSPO gives its workflow controller allows configmaps get, watch and list only
        (opendatahub-io/data-science-pipelines-operator,
        config/internal/workflow-controller/role.yaml.tmpl): on OpenShift AI the pod is never
        made."""
        out = []
        if self.largest_arg > ARG_LIMIT:
            out.append(f"executor {self.name}: an argument of {self.largest_arg} bytes, over {ARG_LIMIT}")
        if self.driver_container_arg > MAX_ARG_STRLEN:
            out.append(f"executor {self.name}: its driver's --container argument is {self.driver_container_arg} "
                       f"bytes, over the kernel's {MAX_ARG_STRLEN}")
        out += [f"executor {self.name}: {what} ARGO_TEMPLATE is {size} bytes, over {MAX_ARG_STRLEN}: Argo would "
                "move it to a ConfigMap, which DSPO's workflow controller may not create"
                for what, size in (("its driver's", self.driver_template_env), ("its pod's", self.executor_template_env))
                if size > MAX_ARG_STRLEN]
        return out


def load(text: str) -> tuple[dict, dict]:
    """The IR and the kubernetes platform spec (empty if none) of a compiled pipeline or component."""
    docs = [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d]
    ir = docs[0]
    platform = docs[1]["platforms"]["kubernetes"] if len(docs) > 1 else {}
    return ir, platform


def executor_input(component: dict) -> str:
    """The executor input JSON the driver writes for a task of `component` (driver.go
    initPodSpecPatch: `--executor_input`): its parameters' values (defaults, or VALUE
    characters), and a URI of run length for every artifact in and out."""
    uri = "s3://" + "u" * 120
    inputs, outputs = component.get("inputDefinitions", {}), component.get("outputDefinitions", {})

    def artifact(name, spec):
        return {"artifacts": [{"name": "x" * 40, "type": spec.get("artifactType", {}), "uri": f"{uri}/{name}",
                               "metadata": {}}]}

    return go_json({
        "inputs": {"parameterValues": {n: p.get("defaultValue", "v" * VALUE)
                                       for n, p in inputs.get("parameters", {}).items()},
                   "artifacts": {n: artifact(n, a) for n, a in inputs.get("artifacts", {}).items()}},
        "outputs": {"parameters": {n: {"outputFile": f"/tmp/kfp_outputs/{n}"} for n in outputs.get("parameters", {})},
                    "artifacts": {n: artifact(n, a) for n, a in outputs.get("artifacts", {}).items()},
                    "outputFile": "/tmp/kfp_outputs/output_metadata.json"}})


def _component_of(ir: dict, executor: str) -> str:
    return next(n for n, c in ir["components"].items() if c.get("executorLabel") == executor)


def executor_figures(ir: dict) -> dict[str, ExecutorFigures]:
    out = {}
    for name, spec in ir["deploymentSpec"]["executors"].items():
        container = spec["container"]
        component = dict(ir["components"][_component_of(ir, name)])
        component_json = go_json(component)
        container_json = go_json(container)
        command = [*container.get("command", []), *container.get("args", [])]
        patch = go_json({"containers": [{
            "name": "main", "image": container.get("image", ""),
            "command": ["/kfp-launcher/launch", "--executor_input", executor_input(component),
                        "--component_spec", component_json, "x" * LAUNCHER_ARGS, "--", *command],
            "resources": container.get("resources", {})}]})
        task_json = "x" * 2 * KIB  # the task's spec, inline (dag.go)
        out[name] = ExecutorFigures(
            name=name, largest_arg=max((len(a.encode()) for a in command), default=0),
            driver_container_arg=len(container_json.encode()),
            driver_template_env=TEMPLATE_FIXED + sum(string_size(s) for s in (component_json, container_json, task_json)),
            executor_template_env=TEMPLATE_FIXED + 2 * string_size(patch),
            component_json=component_json, container_json=container_json, pod_spec_patch=patch)
    return out


def workflow_bytes(ir: dict, platform: dict | None = None, figures: dict[str, ExecutorFigures] | None = None) -> int:
    """The Workflow KFP 2.14.3 would create for this pipeline, with the status of every node
    after a run that took its largest branch of each If/Elif/Else (one attempt each).
    `figures`: executor_figures(ir), where the caller has them."""
    figures = figures or executor_figures(ir)
    components = ir["components"]
    platform_execs = (platform or {}).get("deploymentSpec", {}).get("executors", {})
    spec = SPEC_FIXED
    seen = set()
    for comp in components.values():
        if "executorLabel" in comp:
            f = figures[comp["executorLabel"]]
            if f.container_json not in seen:  # arguments, once per distinct container
                seen.add(f.container_json)
                spec += string_size(f.component_json) + string_size(f.container_json)
        else:
            spec += string_size(go_json(comp))
    for config in platform_execs.values():
        spec += string_size(go_json(config))
    spec += string_size(go_json(ir["root"]))

    def task_cost(task: dict) -> tuple[int, int]:
        """(spec bytes in its DAG template, status bytes after it ran) of one task."""
        ref = task["componentRef"]["name"]
        comp = components[ref]
        task_json = string_size(go_json(task))
        if "executorLabel" in comp:
            f = figures[comp["executorLabel"]]
            config = platform_execs.get(comp["executorLabel"])
            driver_in = (string_size(f.component_json) + task_json + string_size(f.container_json)
                         + (string_size(go_json(config)) if config else 0))
            patch = string_size(f.pod_spec_patch)
            copies = 3 + ("retryPolicy" in task)  # driver output, executor DAG and pod inputs, retry node
            return task_json + NODE, driver_in + copies * patch + (3 + ("retryPolicy" in task)) * NODE
        sub_spec, sub_status = dag_cost(ref)
        driver = string_size(go_json(comp)) + task_json + 2 * NODE
        return task_json + NODE + sub_spec, driver + sub_status

    def dag_cost(ref: str) -> tuple[int, int]:
        tasks = components[ref].get("dag", {}).get("tasks", {})
        costs = [task_cost(t) for t in tasks.values()]
        spec_bytes = sum(c[0] for c in costs)
        if ref.startswith("comp-condition-branches-"):  # If/Elif/Else: one branch runs
            return spec_bytes, max((c[1] for c in costs), default=0)
        return spec_bytes, sum(c[1] for c in costs)

    root = ir["root"]
    root_tasks = [task_cost(t) for t in root.get("dag", {}).get("tasks", {}).values()]
    if "executorLabel" in root:  # a component compiled alone: one task
        root_tasks = [task_cost({"componentRef": {"name": _component_of(ir, root["executorLabel"])}})]
    spec += sum(c[0] for c in root_tasks)
    status = sum(c[1] for c in root_tasks) + 2 * NODE
    return spec + status


def check(paths) -> tuple[list[str], list[str]]:
    """(figures, problems) for compiled pipelines and components at `paths`
    (relative names are shown): each executor's largest argument, each file's Workflow."""
    figures, problems = [], []
    for path in paths:
        ir, platform = load(path.read_text())
        executors = executor_figures(ir)
        size = workflow_bytes(ir, platform, executors)
        figures.append(f"{path.name}: Workflow ~{size:,} bytes (limit {WORKFLOW_LIMIT:,})")
        if size > WORKFLOW_LIMIT:
            problems.append(f"{path.name}: its Workflow would be ~{size:,} bytes, over {WORKFLOW_LIMIT:,}")
        for f in executors.values():
            figures.append(f"  {f.name}: largest argument {f.largest_arg:,} (limit {ARG_LIMIT:,}), driver --container "
                           f"{f.driver_container_arg:,}, ARGO_TEMPLATE {f.driver_template_env:,} / "
                           f"{f.executor_template_env:,}")
            problems += [f"{path.name}: {p}" for p in f.problems()]
    return figures, problems
