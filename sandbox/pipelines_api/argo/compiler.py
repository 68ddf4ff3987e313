"""KFP's Argo compiler in Python: a pipeline's IR (plus its kubernetes platform spec and a run's
runtime config) in, the Argo `Workflow` the KFP API server creates for the run out, as the dict
that Go's client sends (Go's JSON of the `wfapi.Workflow` struct, empty fields included).

Ported from Red Hat's fork of Kubeflow Pipelines, github.com/red-hat-data-services/
data-science-pipelines, branch `rhoai-3.3` (KFP 2.14.3):

- backend/src/v2/compiler/argocompiler/argo.go, container.go, dag.go, importer.go, common.go,
  proto.go, spec_patch.go (the compiler) and backend/src/v2/compiler/visitor.go (`Accept`: the
  bottom-up walk over components, the retry policy a sub-DAG hands down to its tasks);
- the config getters they call: backend/src/apiserver/common/config.go and const.go (metadata
  service host/port/TLS, CA cert path, DEFAULTPIPELINERUNNERSERVICEACCOUNT -> "pipeline-runner"),
  backend/src/apiserver/config/proxy/config.go (proxy env), backend/src/v2/component/constants.go;
- for `run_workflow`: backend/src/apiserver/template/v2_template.go `RunWorkflow` and
  `validatePipelineJobInputs`, backend/src/common/util/workflow.go (ReplaceUID and friends),
  backend/src/common/util/k8s_patches.go (workspace PVC patch).

The Go code reads its settings from the API server's environment (os.Getenv, viper); here they
come from the `env` mapping with the same names (V2_DRIVER_IMAGE, PIPELINE_RUN_AS_USER,
PIPELINE_LOG_LEVEL, ...), never from this process's environment, and the keyword arguments
override them. The JSON strings the Workflow carries (`components-<hash>`, `implementations-<hash>`,
`kubernetes-<component>`, the task and runtime-config arguments) are what Go's
`stablyMarshalJSON` writes: protojson of the message (proto3 defaults dropped, int64 as strings,
enums by name, durations as "3600s"), re-encoded by encoding/json (keys sorted, numbers as
float64, `<` `>` `&` escaped as \\u003c \\u003e \\u0026); the `<hash>` is sha256 of
encoding/json of the Go `PipelineContainerSpec` struct (snake_case keys in field order).

Not ported: the Go compiler's debug logging; protojson's exact error texts (the messages of
the compiler's own errors are Go's, wrapped as Go wraps them); strict decoding of a
`kubernetes-<component>` config beyond its top-level field names and podMetadata (Go unmarshals
the whole KubernetesExecutorConfig and fails on any unknown field); the API server's argo lint
(`executionSpec.Validate`) and the ScheduledWorkflow (recurring run) path. Go's
addImplicitDependencies walks Go maps (random order); here producers are added in sorted input
name order. The SDK usually lists every producer in dependentTasks, so nothing is added; where
it does not (rhoai-3.3's pipeline_with_string_machine_fields_task_output), Go's `depends` and
task JSON list them in a random order, of the same byte length.

Sizes: `go_json(workflow)` is the byte count of the JSON Go's client sends (encoding/json also
escapes the `&&` of `depends` there); dict key order follows Go's struct order only loosely.

KFP 2.5.0 (branch `rhoai-2.25`, kfp_version="2.5.0") differs in the Workflow's shape:
- no `task-name` argument or input, and no `--task_name` driver flag, on either driver;
- the launcher init container's memory limit is 128Mi (2.14.3: 256Mi);
- pod labels/annotations (kfp-kubernetes pod metadata) are written literally into the shared
  `system-container-impl` template's metadata, so the first task to create that template decides
  them for every task (2.14.3: one `metadata-<annotations>-<labels>-system-container-*` template
  pair per count, the values passed per task as `pod-metadata-*` parameters);
- no workspace (`pipelineConfig.workspace` gives no volumeClaimTemplates);
- a task input of kind taskFinalStatus fails ("task final status not supported yet");
- a kubernetes config that fails to decode is ignored instead of failing the compile;
- Argo v3.5 instead of v3.6 and a shorter default NO_PROXY list: no change to these fields.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .gojson import (
    _K8S_EXEC_FIELDS,
    _CompileError,
    _container_struct_json,
    _go_fmt_v_float,
    _json_value,
    _proto,
    _q,
    _Wrap,
    go_json,
    stably_marshal_json,
)

KFP_VERSIONS = ("2.14.3", "2.5.0")
DEFAULT_DRIVER_IMAGE = "ghcr.io/kubeflow/kfp-driver:latest"
DEFAULT_LAUNCHER_IMAGE = "ghcr.io/kubeflow/kfp-launcher:latest"
DEFAULT_DRIVER_COMMAND = "driver"
DEFAULT_LAUNCHER_COMMAND = "launcher-v2"
DEFAULT_SERVICE_ACCOUNT = "pipeline-runner"
ROOT = "root"
ENTRYPOINT = "entrypoint"
EXIT_STRATEGY = "ALL_UPSTREAM_TASKS_COMPLETED"
# Images the SDK uses for kfp-kubernetes' CreatePVC/DeletePVC tasks: driver only, no executor.
DUMMY_IMAGES = frozenset({"argostub/createpvc", "argostub/deletepvc"})
KFP_LAUNCHER_PATH = "/kfp-launcher/launch"
VOLUME_PATH_KFP_LAUNCHER = "/kfp-launcher"
WORKSPACE_VOLUME_NAME = "kfp-workspace"

LABEL_RUN_ID = "pipeline/runid"
ANNOTATION_RUN_NAME = "pipelines.kubeflow.org/run_name"
ANNOTATION_ISTIO_INJECT = "sidecar.istio.io/inject"

_DEFAULT_NO_PROXY = {
    "2.14.3": "localhost,127.0.0.1,.svc.cluster.local,kubernetes.default.svc,minio-service.kubeflow,"
    "metadata-grpc-service,metadata-grpc-service.kubeflow,ml-pipeline.kubeflow",
    "2.5.0": "localhost,127.0.0.1,.svc.cluster.local,kubernetes.default.svc,metadata-grpc-service,0,1,2,3,4,5,6,7,8,9",
}

# Scratch emptyDirs every executor pod gets, in Go's order (container.go).
_SCRATCH = (
    ("kfp-launcher", VOLUME_PATH_KFP_LAUNCHER), ("gcs-scratch", "/gcs"), ("s3-scratch", "/s3"),
    ("minio-scratch", "/minio"), ("dot-local-scratch", "/.local"), ("dot-cache-scratch", "/.cache"),
    ("dot-config-scratch", "/.config"),
)


# ---------------------------------------------------------------------------------------------
# Argo and Kubernetes objects, as Go marshals the structs (non-omitempty fields included).

def _param(name: str, *, value: str | None = None, default: str | None = None,
           value_from: dict | None = None) -> dict:
    p: dict[str, Any] = {"name": name}
    if default is not None:
        p["default"] = default
    if value is not None:
        p["value"] = value
    if value_from is not None:
        p["valueFrom"] = value_from
    return p


def _params(params: list[dict]) -> dict:
    return {"parameters": params} if params else {}


def _template(name: str, *, inputs: list[dict] | None = None, outputs: list[dict] | None = None, **rest: Any) -> dict:
    t: dict[str, Any] = {"name": name, "inputs": _params(inputs or []), "outputs": _params(outputs or []),
                         "metadata": rest.pop("metadata", None) or {}}
    t.update({k: v for k, v in rest.items() if v is not None})
    return t


def _dag_task(name: str, template: str, params: list[dict], *, depends: str = "", when: str = "",
              with_sequence: dict | None = None, hooks: dict | None = None) -> dict:
    task: dict[str, Any] = {"name": name, "template": template, "arguments": _params(params)}
    if with_sequence is not None:
        task["withSequence"] = with_sequence
    if when:
        task["when"] = when
    if depends:
        task["depends"] = depends
    if hooks:
        task["hooks"] = hooks
    return task


def _container(*, image: str, command: list[str], args: list[str] | None = None, env_from: list | None = None,
               env: list | None = None, resources: dict | None = None, volume_mounts: list | None = None,
               name: str = "") -> dict:
    c: dict[str, Any] = {"name": name, "image": image, "command": list(command)}
    if args:
        c["args"] = args
    if env_from:
        c["envFrom"] = env_from
    if env:
        c["env"] = env
    c["resources"] = resources or {}
    if volume_mounts:
        c["volumeMounts"] = volume_mounts
    return c


def _env(name: str, value: str) -> dict:
    return {"name": name, "value": value} if value else {"name": name}


def workflow_parameter(name: str) -> str:
    return f"{{{{workflow.parameters.{name}}}}}"


def input_parameter(name: str) -> str:
    return f"{{{{inputs.parameters.{name}}}}}"


def output_path(name: str) -> str:
    return f"{{{{outputs.parameters.{name}.path}}}}"


def task_output_parameter(task: str, name: str) -> str:
    return f"{{{{tasks.{task}.outputs.parameters.{name}}}}}"


def depends(deps: list[str] | None) -> str:
    """Enhanced depends: upstream must have Succeeded (a skipped one does not count)."""
    return " && ".join(f"{d}.Succeeded" for d in deps or [])


def _driver_resources() -> dict:
    # MustParse("0.5Gi") and ("0.5") as a Quantity marshals them.
    return {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}}


def _launcher_resources(version: str) -> dict:
    return {"limits": {"cpu": "500m", "memory": "256Mi" if version == "2.14.3" else "128Mi"},
            "requests": {"cpu": "100m"}}


_METADATA_ENV_FROM = [{"configMapRef": {"name": "metadata-grpc-configmap", "optional": True}}]
_COMMON_ENVS = [
    {"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "KFP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
]


def _parse_bool(text: str, name: str) -> bool:
    # strconv.ParseBool
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise _CompileError(f'strconv.ParseBool: parsing {_q(text)}: invalid syntax ({name})')


class _Config:
    """The API server's environment as the Go getters read it (common.go, config.go, proxy)."""

    def __init__(self, env: Mapping[str, str], version: str) -> None:
        self.env = env
        self.ml_pipeline_env = [
            {"name": "ML_PIPELINE_SERVICE_HOST",
             "value": env.get("ML_PIPELINE_SERVICE_HOST") or "ml-pipeline.kubeflow.svc.cluster.local"},
            {"name": "ML_PIPELINE_SERVICE_PORT_GRPC", "value": env.get("ML_PIPELINE_SERVICE_PORT_GRPC") or "8887"},
        ]
        tls = env.get("ML_PIPELINE_TLS_ENABLED", "")
        self.ml_pipeline_tls = _parse_bool(tls, "ML_PIPELINE_TLS_ENABLED") if tls else False
        self.mlmd_host = env.get("METADATA_GRPC_SERVICE_SERVICE_HOST", "metadata-grpc-service")
        self.mlmd_port = env.get("METADATA_GRPC_SERVICE_SERVICE_PORT", "8080")
        mtls = env.get("METADATA_TLS_ENABLED")
        self.metadata_tls = _parse_bool(mtls, "METADATA_TLS_ENABLED") if mtls is not None else False
        mount = env.get("ARTIFACT_COPY_STEP_CABUNDLE_MOUNTPATH", "")
        self.ca_cert_path = f"{mount}/{env.get('ARTIFACT_COPY_STEP_CABUNDLE_CONFIGMAP_KEY', '')}" if mount else ""
        self.http_proxy = env.get("HTTP_PROXY", "")
        self.https_proxy = env.get("HTTPS_PROXY", "")
        if ("HTTP_PROXY" in env or "HTTPS_PROXY" in env) and "NO_PROXY" not in env:
            self.no_proxy = _DEFAULT_NO_PROXY[version]
        else:
            self.no_proxy = env.get("NO_PROXY", "")

    def proxy_env(self) -> list[dict]:
        out = []
        for lower, upper, value in (("http_proxy", "HTTP_PROXY", self.http_proxy),
                                    ("https_proxy", "HTTPS_PROXY", self.https_proxy),
                                    ("no_proxy", "NO_PROXY", self.no_proxy)):
            if value:
                out += [{"name": lower, "value": value}, {"name": upper, "value": value}]
        return out

    def logging_args(self) -> list[str]:
        args: list[str] = []
        if "PIPELINE_LOG_LEVEL" in self.env:
            args += ["--log_level", self.env["PIPELINE_LOG_LEVEL"]]
        if "PUBLISH_LOGS" in self.env:
            args += ["--publish_logs", self.env["PUBLISH_LOGS"]]
        return args

    def run_as_user(self) -> int | None:
        text = self.env.get("PIPELINE_RUN_AS_USER", "")
        try:
            return int(text) if text else None
        except ValueError:
            return None  # Go logs the parse error and runs without runAsUser

    def shared_args(self) -> list[str]:
        return ["--http_proxy", self.http_proxy, "--https_proxy", self.https_proxy, "--no_proxy", self.no_proxy,
                "--mlPipelineServiceTLSEnabled", _bool(self.ml_pipeline_tls)] + self.metadata_args()

    def metadata_args(self) -> list[str]:
        return ["--mlmd_server_address", self.mlmd_host, "--mlmd_server_port", self.mlmd_port,
                "--metadataTLSEnabled", _bool(self.metadata_tls), "--ca_cert_path", self.ca_cert_path]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _add_ca_bundle(template: dict, env: Mapping[str, str], prefix: str) -> None:
    """ConfigureCABundle (ARTIFACT_COPY_STEP_CABUNDLE_*) and its executor twin (EXECUTOR_CABUNDLE_*)."""
    name = env.get(f"{prefix}_CONFIGMAP_NAME", "")
    key = env.get(f"{prefix}_CONFIGMAP_KEY", "")
    if not (name and key):
        return
    mount = env.get(f"{prefix}_MOUNTPATH", "")
    ca_file = f"{mount}/{key}"
    container = template["container"]
    container.setdefault("env", []).extend([
        _env("REQUESTS_CA_BUNDLE", ca_file), _env("AWS_CA_BUNDLE", ca_file), _env("SSL_CERT_FILE", ca_file),
        _env("SSL_CERT_DIR", ":".join([mount, "/etc/ssl/certs", "/etc/pki/tls/certs"]))])
    template.setdefault("volumes", []).append({"name": "ca-bundle", "configMap": {"name": name}})
    container.setdefault("volumeMounts", []).append({"name": "ca-bundle", "mountPath": ca_file, "subPath": key})


# ---------------------------------------------------------------------------------------------
# The compiler (argo.go's workflowCompiler) and the visitor (visitor.go's Accept).

class _Compiler:
    def __init__(self, spec: dict, deploy: dict, runtime_config: dict, *, display_name: str, driver_image: str,
                 launcher_image: str, cache_disabled: bool, config: _Config, version: str) -> None:
        self.spec = spec
        self.executors = deploy.get("executors")
        self.runtime_config = runtime_config
        self.display_name = display_name
        self.driver_image = driver_image
        self.launcher_image = launcher_image
        self.driver_command = config.env.get("V2_DRIVER_COMMAND") or DEFAULT_DRIVER_COMMAND
        self.launcher_command = config.env.get("V2_LAUNCHER_COMMAND") or DEFAULT_LAUNCHER_COMMAND
        self.cache_disabled = cache_disabled
        self.config = config
        self.version = version
        self.templates: dict[str, dict] = {}
        self.template_list: list[dict] = []
        self.arguments: list[dict] = []
        self.argument_names: dict[str, dict] = {}

    # -- arguments: each component spec / container / kubernetes config stored once -----------

    def hash_component_container(self, component_name: str) -> str:
        if component_name == ROOT:
            return ROOT
        if self.executors is not None:
            label = (self.spec.get("components", {}).get(component_name) or {}).get("executorLabel", "")
            executor = self.executors.get(label) if label in self.executors else None
            container = (executor or {}).get("container")
            if container is not None:
                try:
                    text = _container_struct_json(container)
                except _CompileError:
                    return ""  # Go returns the empty hash when json.Marshal fails
                return hashlib.sha256(text.encode("utf-8")).hexdigest()
        return component_name

    def save_argument(self, name: str, message: Mapping) -> None:
        if name in self.argument_names:
            return
        param = {"name": name, "value": stably_marshal_json(message)}
        self.arguments.append(param)
        self.argument_names[name] = param

    def placeholder(self, name: str) -> str:
        if name not in self.argument_names:
            raise _CompileError(f"using component spec: failed to find workflow parameter {_q(name)}")
        return workflow_parameter(name)

    def save_component_spec(self, name: str, component: Mapping) -> None:
        self.save_argument("components-" + self.hash_component_container(name), component)

    def use_component_spec(self, name: str) -> str:
        return self.placeholder("components-" + self.hash_component_container(name))

    def save_component_impl(self, name: str, impl: Mapping) -> None:
        self.save_argument("implementations-" + self.hash_component_container(name), impl)

    def use_component_impl(self, name: str) -> str:
        return self.placeholder("implementations-" + self.hash_component_container(name))

    def add_template(self, template: dict, name: str) -> str:
        template["name"] = name
        if name in self.templates:
            raise _CompileError(f"template name={_q(name)}: template already exists")
        self.template_list.append(template)
        self.templates[name] = template
        return name

    # -- visitor callbacks ------------------------------------------------------------------

    def add_kubernetes_spec(self, name: str, struct: Mapping) -> None:
        self.save_argument("kubernetes-" + name, struct)

    def container(self, name: str, component: Mapping, container: Mapping) -> None:
        self.save_component_spec(name, component)
        self.save_component_impl(name, container)

    def importer(self, name: str, component: Mapping, importer: Mapping) -> None:
        self.save_component_spec(name, component)
        self.save_component_impl(name, importer)

    def dag(self, name: str, component: dict, dag: dict) -> None:
        with _Wrap(f"compiling DAG {_q(name)}"):
            self._dag(name, component, dag)

    def _dag(self, name: str, component: dict, dag: dict) -> None:
        self._add_implicit_dependencies(dag)
        self.save_component_spec(name, component)
        tasks = dag.get("tasks", {})
        keys = sorted(tasks)
        parent = input_parameter("parent-dag-id")
        exit_templates: dict[str, str] = {}
        # Exit tasks first: they become the exit lifecycle hooks of the tasks they depend on.
        for task_name in keys:
            task = tasks[task_name]
            if "parameterIterator" in task and "artifactIterator" in task:
                raise _CompileError(f"invalid task {_q(task_name)}: parameterIterator and artifactIterator "
                                    "cannot be specified at the same time")
            if "artifactIterator" in task:
                raise _CompileError("artifact iterator not implemented yet")
            if _strategy(task) != EXIT_STRATEGY:
                continue
            hook_tasks = self.task(task_name, task, parent_dag_id=parent)
            hook_name = f"exit-hook-{name}-{task_name}"
            for dep in task.get("dependentTasks", []):
                exit_templates[dep] = hook_name
            with _Wrap("DAG"):
                self.add_template(_template(hook_name, inputs=[_param("parent-dag-id")], dag={"tasks": hook_tasks}),
                                  hook_name)
        dag_tasks: list[dict] = []
        for task_name in keys:
            task = tasks[task_name]
            if _strategy(task) == EXIT_STRATEGY:
                continue
            dag_tasks += self.task(task_name, task, parent_dag_id=parent,
                                   exit_template=exit_templates.get(task_name, ""))
        if not dag_tasks:
            raise _CompileError(f"DAG {name} must contain one or more non-exit tasks")
        with _Wrap("DAG"):
            self.add_template(_template(name, inputs=[_param("parent-dag-id")], dag={"tasks": dag_tasks}), name)
        if name == ROOT:
            self._entrypoint()

    def _entrypoint(self) -> None:
        driver, outputs = self.dag_driver_task(ROOT + "-driver", component=self.use_component_spec(ROOT),
                                               runtime_config=self.runtime_config)
        root = self.dag_task(ROOT, ROOT, parent_dag_id=outputs["execution-id"])
        root["depends"] = depends([ROOT + "-driver"])
        self.add_template(_template(ENTRYPOINT, dag={"tasks": [driver, _reorder_task(root)]}), ENTRYPOINT)

    def _add_implicit_dependencies(self, dag: dict) -> None:
        tasks = dag.get("tasks", {})
        for task in tasks.values():
            inputs = task.get("inputs", {})
            for key in sorted(inputs.get("parameters", {})):
                spec = inputs["parameters"][key]
                if "taskOutputParameter" in spec:
                    _add_dependency(tasks, task, spec["taskOutputParameter"].get("producerTask", ""))
                elif "taskFinalStatus" in spec and self.version == "2.5.0":
                    raise _CompileError("failed to add implicit deps: task final status not supported yet")
            for key in sorted(inputs.get("artifacts", {})):
                spec = inputs["artifacts"][key]
                if "taskOutputArtifact" in spec:
                    _add_dependency(tasks, task, spec["taskOutputArtifact"].get("producerTask", ""))

    # -- tasks -------------------------------------------------------------------------------

    def dag_task(self, name: str, component_name: str, *, parent_dag_id: str, condition: str = "",
                 exit_template: str = "", hook_parent_dag_id: str = "") -> dict:
        task = _dag_task(name, component_name, [_param("parent-dag-id", value=parent_dag_id),
                                                _param("condition", value=condition)])
        _add_exit_hook(task, exit_template, hook_parent_dag_id)
        return task

    def task(self, name: str, task: dict, *, parent_dag_id: str, iteration_index: str = "",
             exit_template: str = "") -> list[dict]:
        with _Wrap(f"compiling task {_q(name)}"):
            return self._task(name, task, parent_dag_id, iteration_index, exit_template)

    def _task(self, name: str, task: dict, parent_dag_id: str, iteration_index: str, exit_template: str) -> list[dict]:
        component_name = task.get("componentRef", {}).get("name", "")
        component = self.spec.get("components", {}).get(component_name)
        if component is None:
            raise _CompileError(f"component spec for {_q(component_name)} not found")
        component_placeholder = self.use_component_spec(component_name)
        task_json = stably_marshal_json(task)
        if not iteration_index and ("parameterIterator" in task or "artifactIterator" in task):
            return self.iterator_task(name, task, task_json, parent_dag_id)
        condition_set = bool(task.get("triggerPolicy", {}).get("condition"))
        # Exit tasks and iterations run whatever their upstream did.
        gated = not iteration_index and _strategy(task) != EXIT_STRATEGY
        if "dag" in component:
            driver_name = name + "-driver"
            driver, outputs = self.dag_driver_task(driver_name, component=component_placeholder,
                                                   parent_dag_id=parent_dag_id, task=task_json,
                                                   iteration_index=iteration_index, task_name=name)
            if gated:
                _set_depends(driver, depends(task.get("dependentTasks")))
            sub = self.dag_task(name, component_name, parent_dag_id=outputs["execution-id"],
                                condition=outputs["condition"], exit_template=exit_template,
                                hook_parent_dag_id=parent_dag_id)
            sub["depends"] = depends([driver_name])
            if condition_set:
                sub["when"] = outputs["condition"] + " != false"
            return [driver, _reorder_task(sub)]
        if "executorLabel" in component:
            return self._executor_task(name, task, component_name, component, component_placeholder, task_json,
                                       parent_dag_id, iteration_index, exit_template, condition_set, gated)
        raise _CompileError("unsupported component implementation kind: <nil>")

    def _executor_task(self, name: str, task: dict, component_name: str, component: dict, component_placeholder: str,
                       task_json: str, parent_dag_id: str, iteration_index: str, exit_template: str,
                       condition_set: bool, gated: bool) -> list[dict]:
        label = component["executorLabel"]
        executor = (self.executors or {}).get(label)
        if executor is None:
            raise _CompileError(f"executor with label {_q(label)} not found")
        if "container" in executor:
            container_placeholder = self.use_component_impl(component_name)
            driver_name = name + "-driver"
            k8s_name = "kubernetes-" + component_name
            k8s_placeholder = workflow_parameter(k8s_name) if k8s_name in self.argument_names else ""
            driver, outputs = self.container_driver_task(
                driver_name, component=component_placeholder, task=task_json, container=container_placeholder,
                parent_dag_id=parent_dag_id, iteration_index=iteration_index, kubernetes_config=k8s_placeholder,
                task_name=name)
            condition = outputs["condition"] if condition_set else ""
            if gated:
                _set_depends(driver, depends(task.get("dependentTasks")))
            if executor["container"].get("image", "") in DUMMY_IMAGES:
                driver["name"] = name
                return [driver]
            try:
                executor_task = self.container_executor_task(
                    name, pod_spec_patch=outputs["pod-spec-patch"], cached_decision=outputs["cached-decision"],
                    condition=condition, exit_template=exit_template, hook_parent_dag_id=parent_dag_id, task=task)
            except _CompileError as err:
                raise _CompileError(f"error creating executor for {_q(name)}: {err}") from err
            executor_task["depends"] = depends([driver_name])
            return [driver, _reorder_task(executor_task)]
        if "importer" in executor:
            if condition_set:
                raise _CompileError("triggerPolicy.condition on importer task is not supported")
            return [self.importer_task(name, task, task_json, parent_dag_id)]
        if "resolver" in executor:
            raise _CompileError("resolver executors not implemented")
        if "customJob" in executor:
            raise _CompileError("custom job executors is Google Cloud only, it's not supported")
        raise _CompileError("unknown executor spec type: <nil>")

    def iterator_task(self, name: str, task: dict, task_json: str, parent_dag_id: str) -> list[dict]:
        with _Wrap("iterator task"):
            component_name = task.get("componentRef", {}).get("name", "")
            iterator_tasks = self.iteration_item_task("iteration", task, task_json, parent_dag_id)
            loop = _template("", inputs=[_param("parent-dag-id")], dag={"tasks": iterator_tasks})
            limit = int(task.get("iteratorPolicy", {}).get("parallelismLimit", 0))
            if limit > 0:
                loop["parallelism"] = limit
            loop_name = self.add_template(loop, f"{component_name}-{name}-iterator")
            return [_dag_task(name, loop_name, [_param("parent-dag-id", value=parent_dag_id)],
                              depends=depends(task.get("dependentTasks")))]

    def iteration_item_task(self, name: str, task: dict, task_json: str, parent_dag_id: str) -> list[dict]:
        with _Wrap("iterationItem task"):
            component_name = task.get("componentRef", {}).get("name", "")
            placeholder = self.use_component_spec(component_name)
            driver_name = name + "-driver"
            driver, outputs = self.dag_driver_task(driver_name, component=placeholder, parent_dag_id=parent_dag_id,
                                                   task=task_json)
            item_tasks = self.task("iteration-item", task, parent_dag_id=input_parameter("parent-dag-id"),
                                   iteration_index=input_parameter("iteration-index"))
            tmpl = _template("", inputs=[_param("parent-dag-id"), _param("iteration-index")], dag={"tasks": item_tasks})
            tmpl_name = self.add_template(tmpl, f"{component_name}-{name}")
            when = outputs["condition"] + " != false" if task.get("triggerPolicy", {}).get("condition") else ""
            iterations = _dag_task(
                name + "-iterations", tmpl_name,
                [_param("parent-dag-id", value=outputs["execution-id"]), _param("iteration-index", value="{{item}}")],
                depends=depends([driver_name]), when=when, with_sequence={"count": outputs["iteration-count"]})
            return [driver, iterations]

    # -- drivers -----------------------------------------------------------------------------

    def dag_driver_task(self, name: str, *, component: str, parent_dag_id: str = "", task: str = "",
                        task_name: str = "", runtime_config: dict | None = None,
                        iteration_index: str = "") -> tuple[dict, dict]:
        if not component:
            raise _CompileError("dagDriverTask: component must be non-nil")
        params = [_param("component", value=component)]
        if iteration_index:
            params.append(_param("iteration-index", value=iteration_index))
        if parent_dag_id:
            params.append(_param("parent-dag-id", value=parent_dag_id))
        if runtime_config is not None:
            params += [_param("runtime-config", value=stably_marshal_json(runtime_config)),
                       _param("driver-type", value="ROOT_DAG")]
        if task:
            params.append(_param("task", value=task))
        if task_name and task_name != "iteration-item" and self.version == "2.14.3":
            params.append(_param("task-name", value=task_name))
        outputs = {k: task_output_parameter(name, k) for k in ("execution-id", "iteration-count", "condition")}
        return _dag_task(name, self.add_dag_driver_template(), params), outputs

    def _driver_container(self, args: list[str]) -> dict:
        if self.cache_disabled:
            args.append("--cache_disabled")
        args += self.config.logging_args()
        return _container(image=self.driver_image, command=self.driver_command.split(" "), args=args,
                          env=self.config.proxy_env() + copy.deepcopy(self.config.ml_pipeline_env),
                          resources=_driver_resources())

    def _driver_args(self, driver_type: str) -> list[str]:
        """The flags both drivers' templates begin with (container.go and dag.go write them alike)."""
        return (["--type", driver_type, "--pipeline_name", self.spec["pipelineInfo"]["name"],
                 "--run_id", "{{workflow.uid}}", "--run_name", "{{workflow.name}}",
                 "--run_display_name", self.display_name, "--dag_execution_id", input_parameter("parent-dag-id"),
                 "--component", input_parameter("component"), "--task", input_parameter("task")]
                + (["--task_name", input_parameter("task-name")] if self.version == "2.14.3" else []))

    def add_dag_driver_template(self) -> str:
        name = "system-dag-driver"
        if name in self.templates:
            return name
        args = (self._driver_args(input_parameter("driver-type"))
                + ["--runtime_config", input_parameter("runtime-config"),
                   "--iteration_index", input_parameter("iteration-index"),
                   "--execution_id_path", output_path("execution-id"),
                   "--iteration_count_path", output_path("iteration-count"),
                   "--condition_path", output_path("condition")]
                + self.config.shared_args())
        inputs = [_param("component"), _param("runtime-config", default=""), _param("task", default="")]
        if self.version == "2.14.3":
            inputs.append(_param("task-name", default=""))
        inputs += [_param("parent-dag-id", default="0"), _param("iteration-index", default="-1"),
                   _param("driver-type", default="DAG")]
        outputs = [
            _param("execution-id", value_from={"path": "/tmp/outputs/execution-id"}),
            _param("iteration-count", value_from={"default": "0", "path": "/tmp/outputs/iteration-count"}),
            _param("condition", value_from={"default": "true", "path": "/tmp/outputs/condition"}),
        ]
        return self._add_driver_template(name, args, inputs, outputs)

    def _add_driver_template(self, name: str, args: list[str], inputs: list[dict], outputs: list[dict]) -> str:
        t = _template(name, inputs=inputs, outputs=outputs, container=self._driver_container(args))
        _add_ca_bundle(t, self.config.env, "ARTIFACT_COPY_STEP_CABUNDLE")
        self.templates[name] = t
        self.template_list.append(t)
        return name

    def container_driver_task(self, name: str, *, component: str, task: str, container: str, parent_dag_id: str,
                              iteration_index: str, kubernetes_config: str, task_name: str) -> tuple[dict, dict]:
        params = [_param("component", value=component), _param("task", value=task),
                  _param("container", value=container)]
        if self.version == "2.14.3":
            params.append(_param("task-name", value=task_name))
        params.append(_param("parent-dag-id", value=parent_dag_id))
        if iteration_index:
            params.append(_param("iteration-index", value=iteration_index))
        if kubernetes_config:
            params.append(_param("kubernetes-config", value=kubernetes_config))
        outputs = {k: task_output_parameter(name, k) for k in ("pod-spec-patch", "cached-decision", "condition")}
        return _dag_task(name, self.add_container_driver_template(), params), outputs

    def add_container_driver_template(self) -> str:
        name = "system-container-driver"
        if name in self.templates:
            return name
        args = (self._driver_args("CONTAINER")
                + ["--container", input_parameter("container"),
                   "--iteration_index", input_parameter("iteration-index"),
                   "--cached_decision_path", output_path("cached-decision"),
                   "--pod_spec_patch_path", output_path("pod-spec-patch"),
                   "--condition_path", output_path("condition"),
                   "--kubernetes_config", input_parameter("kubernetes-config")]
                + self.config.shared_args())
        inputs = [_param("component"), _param("task"), _param("container")]
        if self.version == "2.14.3":
            inputs.append(_param("task-name"))
        inputs += [_param("parent-dag-id"), _param("iteration-index", default="-1"),
                   _param("kubernetes-config", default="")]
        outputs = [
            _param("pod-spec-patch", value_from={"default": "", "path": "/tmp/outputs/pod-spec-patch"}),
            _param("cached-decision", default="false",
                   value_from={"default": "false", "path": "/tmp/outputs/cached-decision"}),
            _param("condition", value_from={"default": "true", "path": "/tmp/outputs/condition"}),
        ]
        return self._add_driver_template(name, args, inputs, outputs)

    # -- executors ---------------------------------------------------------------------------

    def _k8s_exec_config(self, component_name: str) -> dict:
        """KubernetesExecutorConfig of a component, as containerExecutorTask unmarshals it."""
        param = self.argument_names.get("kubernetes-" + component_name)
        if param is None:
            return {}
        config = json.loads(param["value"])
        unknown = sorted(set(config) - _K8S_EXEC_FIELDS)
        metadata = config.get("podMetadata", config.get("pod_metadata"))
        problem = (f'unknown field "{unknown[0]}"' if unknown
                   else "invalid podMetadata" if metadata is not None and not _is_pod_metadata(metadata) else "")
        if problem:
            if self.version == "2.5.0":
                return {}  # jsonpb's error was ignored
            raise _CompileError(f"failed to unmarshal kubernetes config: proto: {problem}")
        return {"podMetadata": metadata} if metadata is not None else {}

    def container_executor_task(self, name: str, *, pod_spec_patch: str, cached_decision: str, condition: str,
                                exit_template: str, hook_parent_dag_id: str, task: dict) -> dict:
        ref = task.get("componentRef")
        if ref is None:
            raise _CompileError("component reference is nil")
        k8s = self._k8s_exec_config(ref.get("name", ""))
        metadata = k8s.get("podMetadata") if self.version == "2.14.3" else None
        params = ([_param("pod-spec-patch", value=pod_spec_patch),
                   _param("cached-decision", value=cached_decision, default="false")]
                  + _pod_metadata_params(metadata, with_values=True) + _retry_params_with_values(task))
        t = _dag_task(name, self.add_container_executor_template(task, k8s), params,
                      when=condition + " != false" if condition else "")
        _add_exit_hook(t, exit_template, hook_parent_dag_id)
        return t

    def add_container_executor_template(self, task: dict, k8s: dict) -> str:
        executor_name, impl_name = "system-container-executor", "system-container-impl"
        retry = task.get("retryPolicy")
        component = self.spec.get("components", {}).get(task.get("componentRef", {}).get("name", ""))
        if retry is not None and component is not None and "dag" not in component:
            executor_name, impl_name = "retry-" + executor_name, "retry-" + impl_name
        metadata = k8s.get("podMetadata")
        if metadata is not None and self.version == "2.14.3":
            # Argo cannot patch pod metadata: one template pair per (annotations, labels) count.
            prefix = f"metadata-{len(metadata.get('annotations') or {})}-{len(metadata.get('labels') or {})}-"
            executor_name, impl_name = prefix + executor_name, prefix + impl_name
        if executor_name in self.templates:
            return executor_name
        md_params = _pod_metadata_params(metadata, with_values=False) if self.version == "2.14.3" else []
        retry_names = ["retry-max-count", "retry-backoff-duration", "retry-backoff-factor",
                       "retry-backoff-max-duration"] if retry is not None else []
        executor = _template(
            executor_name,
            inputs=[_param("pod-spec-patch"), _param("cached-decision", default="false")]
            + [dict(p) for p in md_params] + [_param(n, default="0") for n in retry_names],
            dag={"tasks": [_dag_task(
                "executor", impl_name,
                [_param("pod-spec-patch", value=input_parameter("pod-spec-patch"))]
                + [_param(p["name"], value=input_parameter(p["name"])) for p in md_params]
                + [_param(n, value=input_parameter(n)) for n in retry_names],
                when=input_parameter("cached-decision") + " != true")]})
        self.templates[executor_name] = executor
        impl = self._impl_template(impl_name, [dict(p) for p in md_params] + [_param(n) for n in retry_names],
                                   retry is not None, metadata)
        self.templates[impl_name] = impl
        self.template_list += [executor, impl]
        return executor_name

    def _impl_template(self, name: str, extra_inputs: list[dict], retry: bool, metadata: dict | None) -> dict:
        launcher_args = ["--copy", KFP_LAUNCHER_PATH]
        if self.cache_disabled:
            launcher_args.append("--cache_disabled")
        launcher_args += self.config.logging_args()
        launcher = _container(
            name="kfp-launcher", image=self.launcher_image, command=self.launcher_command.split(" "),
            args=launcher_args, resources=_launcher_resources(self.version),
            volume_mounts=[{"name": "kfp-launcher", "mountPath": VOLUME_PATH_KFP_LAUNCHER}])
        main = _container(
            image="gcr.io/ml-pipeline/should-be-overridden-during-runtime",
            command=["should-be-overridden-during-runtime"], env_from=copy.deepcopy(_METADATA_ENV_FROM),
            env=copy.deepcopy(_COMMON_ENVS) + copy.deepcopy(self.config.ml_pipeline_env),
            volume_mounts=[{"name": n, "mountPath": p} for n, p in _SCRATCH])
        impl = _template(name, inputs=[_param("pod-spec-patch")] + extra_inputs,
                         metadata=_impl_metadata(metadata, self.version), container=main,
                         volumes=[{"name": n, "emptyDir": {}} for n, _ in _SCRATCH], initContainers=[launcher],
                         podSpecPatch=input_parameter("pod-spec-patch"))
        _add_ca_bundle(impl, self.config.env, "ARTIFACT_COPY_STEP_CABUNDLE")
        if retry:
            impl["retryStrategy"] = {"limit": input_parameter("retry-max-count"), "backoff": {
                "duration": input_parameter("retry-backoff-duration"),
                "factor": input_parameter("retry-backoff-factor"),
                "maxDuration": input_parameter("retry-backoff-max-duration")}}
        _add_ca_bundle(impl, self.config.env, "EXECUTOR_CABUNDLE")
        return impl

    def importer_task(self, name: str, task: dict, task_json: str, parent_dag_id: str) -> dict:
        ref = task.get("componentRef", {}).get("name", "")
        component = self.use_component_spec(ref)
        importer = self.use_component_impl(ref)
        # Go sets no `depends` here: an importer starts with its DAG whatever dependentTasks says.
        return _dag_task(name, self.add_importer_template(), [
            _param("task", value=task_json), _param("component", value=component),
            _param("importer", value=importer), _param("parent-dag-id", value=parent_dag_id)])

    def add_importer_template(self) -> str:
        name = "system-importer"
        if name in self.templates:
            return name
        args = ["--executor_type", "importer", "--task_spec", input_parameter("task"),
                "--component_spec", input_parameter("component"), "--importer_spec", input_parameter("importer"),
                "--pipeline_name", self.spec["pipelineInfo"]["name"], "--run_id", "{{workflow.uid}}",
                "--parent_dag_id", input_parameter("parent-dag-id"), "--pod_name", "$(KFP_POD_NAME)",
                "--pod_uid", "$(KFP_POD_UID)"] + self.config.metadata_args()
        if self.cache_disabled:
            args.append("--cache_disabled")
        args += self.config.logging_args()
        t = _template(name, inputs=[_param("task"), _param("component"), _param("importer"), _param("parent-dag-id")],
                      container=_container(image=self.launcher_image, command=self.launcher_command.split(" "),
                                           args=args, env_from=copy.deepcopy(_METADATA_ENV_FROM),
                                           env=copy.deepcopy(_COMMON_ENVS), resources=_driver_resources()))
        _add_ca_bundle(t, self.config.env, "ARTIFACT_COPY_STEP_CABUNDLE")
        self.templates[name] = t
        self.template_list.append(t)
        return name


def _add_dependency(tasks: Mapping, task: dict, producer: str) -> None:
    if producer not in tasks:
        raise _CompileError(f"failed to add implicit deps: unknown producer task {_q(producer)} in DAG")
    deps = task.setdefault("dependentTasks", [])
    if producer not in deps:
        deps.append(producer)


def _strategy(task: Mapping) -> str:
    return task.get("triggerPolicy", {}).get("strategy", "TRIGGER_STRATEGY_UNSPECIFIED")


def _set_depends(task: dict, value: str) -> None:
    if value:
        task["depends"] = value
    else:
        task.pop("depends", None)


def _reorder_task(task: dict) -> dict:
    # Go's DAGTask field order: ..., withSequence, when, depends, hooks.
    order = ("name", "template", "arguments", "withSequence", "when", "depends", "hooks")
    return {k: task[k] for k in order if k in task}


def _add_exit_hook(task: dict, exit_template: str, parent_dag_id: str) -> None:
    if exit_template:
        task["hooks"] = {"exit": {"template": exit_template,
                                  "arguments": _params([_param("parent-dag-id", value=parent_dag_id)])}}


def _is_pod_metadata(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) <= {"labels", "annotations"} and all(
        isinstance(m, Mapping) and all(isinstance(v, str) for v in m.values()) for m in value.values() if m is not None)


def _pod_metadata_params(metadata: Mapping | None, *, with_values: bool) -> list[dict]:
    if metadata is None:
        return []
    out: list[dict] = []
    for kind in ("annotation", "label"):
        entries = metadata.get(kind + "s")
        if entries is None:
            continue
        keys = sorted(entries)
        for i, key in enumerate(keys, 1):
            suffix = f"-{i}" if len(keys) > 1 else ""
            key_name, val_name = f"pod-metadata-{kind}-key{suffix}", f"pod-metadata-{kind}-val{suffix}"
            out += ([_param(key_name, value=key), _param(val_name, value=entries[key])] if with_values
                    else [_param(key_name), _param(val_name)])
    return out


def _impl_metadata(metadata: Mapping | None, version: str) -> dict:
    if metadata is None:
        return {}
    out: dict[str, dict] = {}
    if version == "2.5.0":
        # 2.5.0 copies the first task's values into the shared template.
        for kind in ("annotations", "labels"):
            if metadata.get(kind) is not None:
                out[kind] = dict(metadata[kind])
        return out
    for kind, param in (("labels", "label"), ("annotations", "annotation")):
        entries = metadata.get(kind)
        if not entries:
            continue  # an empty map leaves Go's Labels/Annotations nil: omitted
        out[kind] = {}
        for i in range(1, len(entries) + 1):
            suffix = f"-{i}" if len(entries) > 1 else ""
            out[kind][input_parameter(f"pod-metadata-{param}-key{suffix}")] = input_parameter(
                f"pod-metadata-{param}-val{suffix}")
    return out


def _retry_params_with_values(task: Mapping) -> list[dict]:
    retry = task.get("retryPolicy")
    if retry is None:
        return []
    # Argo's AnyStringPtr is fmt's %v: whole seconds only (Duration.Seconds), floats as %g.
    params = [_param("retry-max-count", value=str(retry.get("maxRetryCount", 0)))]
    if "backoffDuration" in retry:
        params.append(_param("retry-backoff-duration", value=_duration_seconds(retry["backoffDuration"])))
    params.append(_param("retry-backoff-factor", value=_go_fmt_v_float(float(retry.get("backoffFactor", 0.0)))))
    if "backoffMaxDuration" in retry:
        params.append(_param("retry-backoff-max-duration", value=_duration_seconds(retry["backoffMaxDuration"])))
    return params


def _duration_seconds(text: str) -> str:
    seconds = text[:-1].split(".")[0]
    return "0" if seconds in ("-0", "") else seconds


# ---------------------------------------------------------------------------------------------
# The visitor (visitor.go Accept): components bottom-up, each once, tasks in sorted order.

class _Visitor:
    def __init__(self, spec: dict, deploy: dict, kubernetes_spec: dict | None, compiler: _Compiler) -> None:
        self.spec = spec
        self.deploy = deploy
        self.kubernetes_spec = kubernetes_spec
        self.compiler = compiler
        self.visited: set[str] = set()

    def dfs(self, name: str, component: dict | None, component_task: dict | None) -> None:
        if name in self.visited:
            return
        self.visited.add(name)
        if component is None:
            return
        label = component.get("executorLabel", "")
        if label:
            self._executor(name, component, label)
            return
        dag = component.get("dag")
        if dag is None:
            raise _CompileError(f"error processing component name={_q(name)}: unknown component implementation: "
                                f"{go_json(component)}")
        tasks = dag.get("tasks", {})
        for key in sorted(tasks):
            task = tasks[key]
            ref = task.get("componentRef", {}).get("name", "")
            if not ref:
                raise _CompileError(f"error processing component name={_q(name)}: component ref name is empty for "
                                    f"task name={_q(task.get('taskInfo', {}).get('name', ''))}")
            sub = self.spec.get("components", {}).get(ref)
            if sub is None:
                raise _CompileError(f"error processing component name={_q(name)}: cannot find component ref "
                                    f"name={_q(ref)}")
            # A sub-DAG's retry policy is handed down to its tasks that have none.
            if "retryPolicy" not in task and component_task is not None and "retryPolicy" in component_task:
                task["retryPolicy"] = component_task["retryPolicy"]
            self.dfs(ref, sub, task)
        self.compiler.dag(name, component, dag)

    def _executor(self, name: str, component: dict, label: str) -> None:
        executor = self.deploy.get("executors", {}).get(label)
        if executor is None:
            raise _CompileError(f"error processing component name={_q(name)}: executor(label={_q(label)}) not found "
                                "in deployment config")
        executors = (self.kubernetes_spec or {}).get("deploymentSpec", {}).get("executors", {})
        if label in executors:
            self.compiler.add_kubernetes_spec(name, executors[label])
        if "container" in executor:
            self.compiler.container(name, component, executor["container"])
        elif "importer" in executor:
            self.compiler.importer(name, component, executor["importer"])
        else:
            raise _CompileError(f"error processing component name={_q(name)}: executor(label={_q(label)}): "
                                "non-container and non-importer executor not implemented")


# ---------------------------------------------------------------------------------------------
# Workspace PVC (argo.go GetWorkspacePVC, 2.14.3 only).

_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def canonical_quantity(text: str) -> str:
    """resource.ParseQuantity(text).String(): the canonical form ("1024Mi" -> "1Gi", "0.5" -> "500m")."""
    from fractions import Fraction

    m = _QUANTITY.fullmatch(text.strip())
    if not m:
        raise _CompileError("invalid size value for workspace PVC: quantities must match the regular expression "
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    value = Fraction(m.group(1))
    if m.group(2):
        value *= Fraction(10) ** int(m.group(2)[1:])
    elif m.group(3):
        suffix = m.group(3)
        value *= 1024 ** _BINARY.index(suffix) if suffix in _BINARY else Fraction(10) ** next(
            e for e, s in _DECIMAL.items() if s == suffix)
    value = Fraction(math.ceil(value * 10**9), 10**9)  # Go rounds up to nano precision
    binary = bool(m.group(3)) and m.group(3) in _BINARY
    if binary and abs(value) >= 1024 and value.denominator == 1:
        number, power = int(value), 0
        while number and number % 1024 == 0 and power < 6:
            number, power = number // 1024, power + 1
        return f"{number}{_BINARY[power]}"
    mantissa, exponent = value, 0
    while mantissa.denominator != 1:
        mantissa, exponent = mantissa * 10, exponent - 1
    number = int(mantissa)
    while number and number % 10 == 0:
        number, exponent = number // 10, exponent + 1
    while exponent % 3:
        number, exponent = number * 10, exponent - 1
    if m.group(2):
        return f"{number}e{exponent}" if exponent else str(number)
    while exponent > 18:
        number, exponent = number * 1000, exponent - 3
    return f"{number}{_DECIMAL[exponent]}"


def _workspace_pvc(workspace: Mapping, default_workspace: Mapping | None) -> dict:
    size = workspace.get("size", "")
    if not size:
        raise _CompileError("workspace size is required but not specified")
    spec = copy.deepcopy(dict(default_workspace or {}))
    patch = workspace.get("kubernetes", {}).get("pvcSpecPatch")
    if patch is not None:
        unknown = [k for k in patch if k not in ("accessModes", "storageClassName")]
        if unknown:
            raise _CompileError(f"unknown fields in PVC spec patch: [{' '.join(unknown)}]")
        if patch.get("accessModes"):
            spec["accessModes"] = list(patch["accessModes"])
        if patch.get("storageClassName") is not None:
            spec["storageClassName"] = patch["storageClassName"]
    quantity = canonical_quantity(size)
    if quantity.startswith("-"):
        raise _CompileError(f"negative size value for workspace PVC: {size}")
    spec.setdefault("resources", {}).setdefault("requests", {})["storage"] = quantity
    return {"metadata": {"name": WORKSPACE_VOLUME_NAME, "creationTimestamp": None}, "spec": spec, "status": {}}


# ---------------------------------------------------------------------------------------------
# Entry points.

def _single_platform_spec(platform_spec: Mapping | None) -> Mapping | None:
    if platform_spec is not None and "platforms" in platform_spec:
        return (platform_spec.get("platforms") or {}).get("kubernetes")
    return platform_spec


def compile_workflow(
    pipeline_spec: Mapping,
    platform_spec: Mapping | None = None,
    *,
    parameter_values: Mapping[str, Any] | None = None,
    pipeline_root: str | None = None,
    runtime_config: Mapping | None = None,
    run_display_name: str = "",
    service_account: str | None = None,
    driver_image: str | None = None,
    launcher_image: str | None = None,
    cache_disabled: bool = False,
    default_workspace: Mapping | None = None,
    env: Mapping[str, str] | None = None,
    kfp_version: str = "2.14.3",
) -> dict:
    """argocompiler.Compile: the Workflow for one run of `pipeline_spec` (the IR's first document).

    `platform_spec` is the kubernetes SinglePlatformSpec (`platforms.kubernetes` of the second
    document; the whole document is accepted too). `parameter_values` and `pipeline_root` make the
    run's runtime config (`runtime_config`, a protojson PipelineJob.RuntimeConfig, is the raw form).
    `env` is the API server's environment; service_account, driver_image and launcher_image
    override DEFAULTPIPELINERUNNERSERVICEACCOUNT, V2_DRIVER_IMAGE and V2_LAUNCHER_IMAGE.
    Raises ValueError with the Go compiler's message for what it refuses.
    """
    if kfp_version not in KFP_VERSIONS:
        raise ValueError(f"kfp_version must be one of {KFP_VERSIONS}, not {kfp_version!r}")
    env = dict(env or {})
    config = _Config(env, kfp_version)
    try:
        spec = _proto("PipelineSpec", pipeline_spec)
    except _CompileError as err:
        raise _CompileError(f"failed to parse pipeline spec: {err}") from None
    if not spec.get("pipelineInfo", {}).get("name"):
        raise _CompileError("pipelineInfo.name is empty")
    deploy = _proto("PipelineDeploymentConfig", spec.get("deploymentSpec", {}), discard_unknown=True)
    runtime = _runtime_config(spec, runtime_config, parameter_values)
    single = _single_platform_spec(platform_spec)
    kubernetes_spec = _proto("SinglePlatformSpec", single) if single is not None else None

    volume_claims = []
    workspace = ((kubernetes_spec or {}).get("pipelineConfig") or {}).get("workspace")
    if kfp_version == "2.14.3" and workspace is not None and "kubernetes" in workspace:
        volume_claims.append(_workspace_pvc(workspace, default_workspace))

    compiler = _Compiler(
        spec, deploy, runtime, display_name=run_display_name,
        driver_image=driver_image or env.get("V2_DRIVER_IMAGE") or DEFAULT_DRIVER_IMAGE,
        launcher_image=launcher_image or env.get("V2_LAUNCHER_IMAGE") or DEFAULT_LAUNCHER_IMAGE,
        cache_disabled=cache_disabled, config=config, version=kfp_version)
    if pipeline_root:
        runtime["gcsOutputDirectory"] = pipeline_root
    _Visitor(spec, deploy, kubernetes_spec, compiler).dfs(ROOT, spec.get("root"), None)

    wf_spec: dict[str, Any] = {
        "templates": compiler.template_list,
        "entrypoint": ENTRYPOINT,
        "arguments": _params(compiler.arguments),
        "serviceAccountName": service_account or env.get("DEFAULTPIPELINERUNNERSERVICEACCOUNT", DEFAULT_SERVICE_ACCOUNT),
    }
    if volume_claims:
        wf_spec["volumeClaimTemplates"] = volume_claims
    wf_spec["podMetadata"] = {"annotations": {"pipelines.kubeflow.org/v2_component": "true"},
                              "labels": {"pipelines.kubeflow.org/v2_component": "true"}}
    run_as_user = config.run_as_user()
    if run_as_user is not None:
        wf_spec["securityContext"] = {"runAsUser": run_as_user}
    return {
        "kind": "Workflow",
        "apiVersion": "argoproj.io/v1alpha1",
        "metadata": {"generateName": spec["pipelineInfo"]["name"].split("/")[-1] + "-", "creationTimestamp": None},
        "spec": wf_spec,
        "status": {"startedAt": None, "finishedAt": None},
    }


def _runtime_config(spec: dict, runtime_config: Mapping | None, parameter_values: Mapping | None) -> dict:
    runtime = _proto("RuntimeConfig", runtime_config or {})
    values = runtime.setdefault("parameterValues", {})
    values.update(_json_value(dict(parameter_values or {})))
    # Root inputs the run leaves out take their default, or null when optional.
    for name, param in spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {}).items():
        if name not in values:
            if "defaultValue" in param:
                values[name] = copy.deepcopy(param["defaultValue"])
            elif param.get("isOptional"):
                values[name] = None
    if not values:
        del runtime["parameterValues"]
    return runtime


def validate_pipeline_job_inputs(pipeline_spec: Mapping, parameter_values: Mapping[str, Any] | None) -> None:
    """v2_template.go validatePipelineJobInputs: the API server's check of a run's parameters."""
    spec = _proto("PipelineSpec", pipeline_spec)
    required = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    values = dict(parameter_values or {})
    kinds = {"NUMBER_DOUBLE": ((int, float), "double or integer", "number"), "NUMBER_INTEGER": (
        (int, float), "double or integer", "number"), "STRING": (str, "string", "string"), "BOOLEAN": (
        bool, "bool", "bool"), "LIST": (list, "list", "list"), "STRUCT": (dict, "struct", "struct")}
    for name, param in required.items():
        if name not in values:
            if not param.get("isOptional") and "defaultValue" not in param:
                raise ValueError(f"parameter {name} is not optional, yet has neither default value "
                                 "nor user provided value")
            continue
        ptype = param.get("parameterType", "PARAMETER_TYPE_ENUM_UNSPECIFIED")
        if ptype == "PARAMETER_TYPE_ENUM_UNSPECIFIED":
            raise ValueError(f"input parameter {name} has unspecified type")
        if ptype == "TASK_FINAL_STATUS":
            raise ValueError(f"input parameter {name} requires type TASK_FINAL_STATUS, which is invalid for "
                             "root component")
        if ptype not in kinds:
            raise ValueError(f"input parameter {name} requires type unknown")
        python_type, wanted, got = kinds[ptype]
        value = values[name]
        if not isinstance(value, python_type) or (isinstance(value, bool) and ptype.startswith("NUMBER")):
            if ptype.startswith("NUMBER"):
                raise ValueError(f"input parameter {name} requires type {wanted}, but the parameter value is not "
                                 "of number value type")
            raise ValueError(f"input parameter {name} requires type {wanted}, but the input parameter is not of "
                             f"{got} value type")
    extra = [n for n in values if n not in required]
    if extra:
        raise ValueError("parameter(s) provided are not required by pipeline: " + ", ".join(extra))


def run_workflow(
    pipeline_spec: Mapping,
    platform_spec: Mapping | None = None,
    *,
    run_id: str,
    run_display_name: str = "",
    namespace: str = "",
    service_account: str = "",
    parameter_values: Mapping[str, Any] | None = None,
    pipeline_root: str | None = None,
    **compile_options: Any,
) -> dict:
    """V2Spec.RunWorkflow: what the API server creates for CreateRun, compile_workflow plus its
    run-level changes (namespace, service account, istio annotation on every template, run id
    label and run name annotation, {{workflow.uid}} replaced by the run id)."""
    validate_pipeline_job_inputs(pipeline_spec, parameter_values)
    runtime = {"parameterValues": dict(parameter_values or {})}
    if pipeline_root:
        runtime["gcsOutputDirectory"] = pipeline_root
    wf = compile_workflow(pipeline_spec, platform_spec, runtime_config=runtime, run_display_name=run_display_name,
                          **compile_options)
    if namespace:
        wf["metadata"]["namespace"] = namespace
    if service_account:
        wf["spec"]["serviceAccountName"] = service_account
    for template in wf["spec"]["templates"]:
        template["metadata"].setdefault("annotations", {}).setdefault(ANNOTATION_ISTIO_INJECT, "false")
    wf["metadata"].setdefault("labels", {})[LABEL_RUN_ID] = run_id
    wf["metadata"].setdefault("annotations", {})[ANNOTATION_RUN_NAME] = run_display_name
    wf = _replace_text(wf, "{{workflow.uid}}", run_id)
    wf["spec"]["podMetadata"].setdefault("labels", {})[LABEL_RUN_ID] = run_id
    return wf


def _replace_text(value: Any, old: str, new: str) -> Any:
    # ReplaceUID rewrites the marshalled JSON text: every string, keys included.
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {_replace_text(k, old, new): _replace_text(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_text(v, old, new) for v in value]
    return value
