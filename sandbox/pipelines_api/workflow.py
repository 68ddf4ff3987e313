"""The sandbox's run engine: what Argo's workflow controller and KFP's driver do for a run of
KFP 2.17 on RHOAI's Data Science Pipelines.

- The run's DAG is walked as Argo walks it (dag.py decides what starts and what is skipped):
  independent tasks start together, a sub-DAG (dsl.ExitHandler's) runs its own tasks, the exit
  task runs whatever happened upstream.
- Each container task is a pod of the sandbox, run by its kubelet: the pipeline-runner service
  account, the compiled YAML's kfp-kubernetes settings (secretAsEnv, pod labels and
  annotations, tolerations, node selector), labels `pipeline/runid` and
  `workflows.argoproj.io/workflow` as Argo sets them, and the sandbox's launcher
  (launcher.py) as its first program. Nothing else reaches its environment.
- Each driver node is a pod too (driver.py: the template's command line, resolved), which
  the run waits for; the driver's work itself happens here: the executor input (kfp.local's builders: the same
  protobufs), placeholders ({{$}}, {{$.pipeline_job_uuid}}, f-strings), output paths
  (/tmp/kfp/outputs/<name>, /tmp/kfp_outputs/output_metadata.json, as KFP's driver sets them)
  and artifact URIs: <pipeline root>/<pipeline name>/<run id>/<task name>/<task uuid>/<output>.
- retryPolicy: maxRetryCount more pods after a failure, backoffDuration * backoffFactor^n
  apart (capped by backoffMaxDuration), as KFP's Argo compiler sets the template's retryStrategy.
- cachingOptions.enableCache: a task whose fingerprint (component, inputs) matches a task that
  succeeded before on this server reuses its outputs and runs no pod (state SKIPPED, as the
  v2beta1 API reports a cached execution); the compiled kfp-ray pipelines disable caching.
- dsl.ParallelFor (parameterIterator): the body DAG once per item, parallelismLimit at a time,
  an item's fields through parameterExpressionSelector; a sub-DAG's outputs (dsl.Collected for
  a loop: one list) reach the tasks after it. An artifact iterator is refused at creation, as
  KFP 2.14.3's compiler refuses it ("artifact iterator not implemented yet").
- Terminate (KFP 2.17 TerminateRun on Argo: activeDeadlineSeconds=0 on the Workflow): the run
  is CANCELING, nothing new starts except the exit handler, running pods are deleted (SIGTERM,
  their grace period, SIGKILL, as the kubelet does), the exit handler runs, and the run ends
  FAILED (Argo's workflow phase, which KFP reports). Delete: the Workflow goes, its pods are
  deleted with it and no exit handler runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import re
import secrets
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import argo, argo_status, dag, platform_spec, task_report
from .argo_status import ArgoRecord
from .dag import CANCELED, FAILED, PENDING, RUNNING, SKIPPED, SUCCEEDED, Node
from .launcher import RESOLVED_ARG_ENV
from .wire import ApiError, now

log = logging.getLogger("sandbox.workflow")

LAUNCHER = Path(__file__).with_name("launcher.py")
DRIVER = Path(__file__).with_name("driver.py")
OUTPUT_PARAMETER_DIR = "/tmp/kfp/outputs"
OUTPUT_METADATA = "/tmp/kfp_outputs/output_metadata.json"
STORAGE_SECRET = "ds-pipeline-s3-dspa"  # the DSPA's object storage secret (accesskey, secretkey)
RUNNER_ACCOUNT = "pipeline-runner-dspa"
DEFAULT_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when the spec sets none
POD_TIMEOUT_S = 6 * 3600  # no single task pod runs longer in the sandbox
# base images that are a Python and pip alone: ubi9/python-311 (kfp-ray's), python:3.x (kfp's default)
PLAIN_PYTHON = re.compile(r"(^|/)(ubi\d+/python-3\d+|python:3[\d.]*)(?:[:@-]|$)|(^|/)python:3")


@dataclass
class _Driven:
    """What the driver worked out for a container task (Engine._drive)."""
    task_root: str
    command: list[str]  # resolved
    argv: list[str]  # the launcher's flags
    executor: str  # its executor DAG node's name in the Workflow
    launch: dict  # what the sandbox's launcher needs besides its flags


def component_command(container: dict) -> list[str]:
    """The component's command and args as compiled (what follows the launcher's `--`)."""
    return list(container.get("command") or []) + list(container.get("args") or [])


def component_env(container: dict) -> list[dict]:
    return [{"name": e["name"], "value": e.get("value", "")} for e in container.get("env") or []]


# kfp 2.17's PipelineContainerSpec.resources (set_cpu_limit & co.), as KFP 2.14.3's driver puts
# them on the main container (driver.go initPodSpecPatch: the resource* strings)
_RESOURCES = {"resourceCpuRequest": ("requests", "cpu"), "resourceCpuLimit": ("limits", "cpu"),
              "resourceMemoryRequest": ("requests", "memory"), "resourceMemoryLimit": ("limits", "memory")}
QUOTA_RETRY_S = (1.0, 10.0)  # a pod the namespace's quota refuses is retried, backing off to


def component_resources(container: dict) -> dict:
    given = container.get("resources") or {}
    out: dict = {}
    for key, (kind, name) in _RESOURCES.items():
        if given.get(key):
            out.setdefault(kind, {})[name] = str(given[key])
    return out


def pod_spec_patch(container: dict, argv: list[str]) -> str:
    """The driver's pod-spec-patch output (driver.go initPodSpecPatch): the main container with
    the launcher's command line, the component's command and args, image, env and resources."""
    main = {"name": "main", "image": container.get("image", ""), "command": ["/kfp-launcher/launch", *argv],
            "args": component_command(container), "resources": component_resources(container)}
    env = component_env(container)
    if env:
        main["env"] = env
    return json.dumps({"containers": [main]}, separators=(",", ":"))


def launcher_argv(pipeline_name: str, run_id: str, executor_input: dict, component: dict, container: dict) -> list[str]:
    """The launcher's flags as KFP 2.14.3's driver writes them into the pod spec patch
    (backend/src/v2/driver/driver.go initPodSpecPatch, rhoai-3.3), up to the `--` before the
    component's own command and args: the executor input and the component spec are one
    argument each, so their size meets the kernel's per-argument limit here as there."""
    def compact(value) -> str:
        return json.dumps(value, separators=(",", ":"))

    return ["--pipeline_name", pipeline_name, "--run_id", run_id, "--execution_id", "0",
            "--executor_input", compact(executor_input), "--component_spec", compact(component),
            "--pod_name", "$(KFP_POD_NAME)", "--pod_uid", "$(KFP_POD_UID)",
            "--mlmd_server_address", "ds-pipeline-metadata-grpc-dspa", "--mlmd_server_port", "8080",
            "--publish_logs", "false", "--metadataTLSEnabled", "true", "--mlPipelineServiceTLSEnabled", "true",
            "--ca_cert_path", "/etc/pki/tls/certs/ca.crt", "--"]


# The engine's task states as Argo's node phases
_ARGO_PHASE = {SUCCEEDED: "Succeeded", FAILED: "Failed", SKIPPED: "Skipped", CANCELED: "Failed"}


def _guarded(node: Node) -> str | None:
    """The task an exit task guards (KFP's compiler makes it that task's exit hook), or None."""
    if not dag.is_exit_task(node.spec):
        return None
    deps = node.spec.get("dependentTasks") or []
    return deps[0] if deps else None


def _display(node: Node) -> str:
    """The task's name as KFP shows it (taskInfo.name), which names its pod and its artifacts' path."""
    return node.spec.get("taskInfo", {}).get("name", node.path.rsplit("/", 1)[-1])


class PodApi:
    """What the engine asks of the sandbox's Kubernetes (core.py gives the real one)."""

    def create(self, pod: dict) -> dict: ...
    def get(self, name: str) -> dict | None: ...
    def delete(self, name: str) -> None:
        """Delete gracefully; a pod that is already gone is not an error."""


@dataclass
class Execution:
    """One run being executed."""
    run: dict
    pipeline_spec: dict
    executors: dict  # kfp-kubernetes settings by executor label
    workflow: str  # the Argo Workflow's name
    root: str  # pipeline root URI
    record: ArgoRecord | None = None  # the Workflow object, as Argo's controller keeps it (set by start)
    uid: str = ""  # the Workflow's uid (its pods' owner)
    canceling: threading.Event = field(default_factory=threading.Event)
    deleted: threading.Event = field(default_factory=threading.Event)
    pods: set = field(default_factory=set)
    tasks: dict = field(default_factory=dict)  # the API's task table (task_report), by Argo pod name
    errors: list = field(default_factory=list)  # why tasks failed, first first (the exit handler's final status)

    def halted(self, node: Node | None = None) -> bool:
        """Whether `node` may no longer run: the run was deleted, its Workflow is in Error (for
        its size: nothing more runs, not even the exit handler), or it was terminated and the
        node is not its exit task (which still runs after a terminate). With no node (a driver
        pod's wait), a terminate halts it too."""
        exempt = node is not None and dag.is_exit_task(node.spec)
        return self.deleted.is_set() or self.broken() or (self.canceling.is_set() and not exempt)

    def broken(self) -> bool:
        return self.record.error is not None


class Engine:
    def __init__(self, pipeline_store, pods: PodApi, s3, *, bucket: str, namespace: str, s3_endpoint: str,
                 workflows, pip_index: str, retry_backoff_cap=lambda: float("inf")):
        """`workflows`: create/update/delete of Workflow objects (core.py's, through the API
        server); `s3`: a boto3 client with the DSPA's storage keys (reads what launchers wrote);
        `pip_index`: the package index the clean task images' pip uses (wheelhouse.py);
        `retry_backoff_cap`: the longest wait before a task's retry, in seconds (the faults'
        task_retry_backoff_cap_s; infinite: the retryPolicy's own backoff)."""
        self.retry_backoff_cap = retry_backoff_cap
        self.workflows = workflows
        self.store = pipeline_store
        self.pods = pods
        self.s3 = s3
        self.bucket = bucket
        self.namespace = namespace
        self.s3_endpoint = s3_endpoint
        self.pip_index = pip_index
        self._images: dict[bool, dict] = {}
        self.default_root = f"s3://{bucket}"
        self.executions: dict[str, Execution] = {}
        self.cache: dict[str, dict] = {}  # fingerprint -> {"outputs", "artifacts"}
        self.lock = threading.RLock()

    def image(self, name: str) -> dict:
        """What a task pod of image `name` runs (rayimage): a plain Python base image is clean
        (pip and the sandbox's index, nothing else); any other image is taken to be built with
        the project's stack (`compile --image`) and has all of it."""
        from .. import rayimage

        clean = bool(PLAIN_PYTHON.search(name or ""))
        with self.lock:
            if clean not in self._images:
                self._images[clean] = rayimage.clean_task_image(self.pip_index) if clean else rayimage.task_image()
            return self._images[clean]

    # --- what the API server calls --------------------------------------------------
    def start(self, run: dict) -> None:
        """Create the run's Workflow (raises wire.ApiError, as KFP's CreateRun fails, when it
        cannot be: its inputs, the compiler, etcd's size limit), then run it."""
        spec = self.store.spec_of(run)
        pipeline_spec = spec["pipeline_spec"]
        executors = self._as_compiled(platform_spec.executors(spec))
        name = pipeline_spec.get("pipelineInfo", {}).get("name", "pipeline")
        root = ((run.get("runtime_config") or {}).get("pipeline_root") or pipeline_spec.get("defaultPipelineRoot")
                or self.default_root).rstrip("/")
        ex = Execution(run=run, pipeline_spec=pipeline_spec, executors=executors,
                       workflow=f"{name[:50]}-{secrets.token_hex(3)[:5]}", root=root)
        created = self._create_workflow(run, spec, root)
        ex.workflow, ex.uid = created["metadata"]["name"], created["metadata"]["uid"]
        ex.record = ArgoRecord(created, lambda wf: self._reported(ex, self.workflows.update(wf)),
                               run_driver=lambda node: self._run_driver(ex, node))
        with self.lock:
            self.executions[run["run_id"]] = ex
        threading.Thread(target=self._main, args=(ex,), daemon=True, name=f"run-{run['run_id'][:8]}").start()

    def _create_workflow(self, run: dict, spec: dict, root: str) -> dict:
        """What KFP's CreateRun does before it stores the run (resource_manager.go CreateRun,
        v2_template.go RunWorkflow): compile the Workflow, then create it; errors as it words them."""
        kfp = "2.5.0" if self.store.server == "rhoai-2.25" else "2.14.3"
        try:
            wf = argo.run_workflow(spec["pipeline_spec"], spec.get("platform_spec") or None, run_id=run["run_id"],
                                   run_display_name=run.get("display_name", ""), namespace=self.namespace,
                                   service_account=run.get("service_account") or RUNNER_ACCOUNT,
                                   parameter_values=(run.get("runtime_config") or {}).get("parameters") or {},
                                   pipeline_root=root, kfp_version=kfp)
        except ValueError as exc:
            text = str(exc)
            if text.startswith(("parameter", "input parameter")):
                raise ApiError("INVALID_ARGUMENT", "Failed to create a new run: Failed to generate the ExecutionSpec: "
                                                   f"invalid pipeline job inputs: Invalid input error: {text}") from None
            raise ApiError("INTERNAL", "Failed to create a new run: Failed to generate the ExecutionSpec: "
                                       f"Failed to compile job: {text}") from None
        try:
            return self.workflows.create(wf)
        except Exception as exc:  # noqa: BLE001 - the API server's refusal (etcd's size limit among them)
            why = getattr(exc, "message", str(exc))
            raise ApiError("INTERNAL", "Failed to create a new run: InternalServerError: Failed to create a workflow "
                                       f"for (): {why}") from None

    def _as_compiled(self, executors: dict) -> dict:
        """What the release's Argo compiler keeps of each executor's settings: on 2.x (lenient)
        a config with a field it does not know loses its pod labels and annotations."""
        server = self.store.server
        if not server or platform_spec.STRICT[server]:
            return executors
        return {label: ({k: v for k, v in config.items() if k != "podMetadata"}
                        if platform_spec.unknown_fields(config, server) else config)
                for label, config in executors.items()}

    def terminate(self, run_id: str) -> None:
        ex = self.executions.get(run_id)
        if ex is None or ex.run["state"] in dag.DONE:
            return
        self._set_state(ex, "CANCELING")
        ex.canceling.set()
        self._stop_pods(ex)

    def delete(self, run_id: str) -> None:
        """The Workflow is deleted: its pods go too (SIGTERM, grace, SIGKILL); no exit handler."""
        with self.lock:
            ex = self.executions.pop(run_id, None)
        if ex is None:
            return
        ex.deleted.set()
        self._stop_pods(ex)
        self.workflows.delete(ex.workflow)

    def shutdown(self) -> None:
        for run_id in list(self.executions):
            self.delete(run_id)

    # --- the run ----------------------------------------------------------------------
    def _main(self, ex: Execution) -> None:
        self._set_state(ex, RUNNING)
        try:
            params = self._root_parameters(ex)
            scope = ex.record.begin()
            state, _ = self._dag(ex, "", ex.pipeline_spec["root"]["dag"], params, {}, scope)
            error = ""  # a failed DAG leaves the Workflow's message empty (dag.go: markNodePhase, no message)
        except argo_status.DriverFailed:  # the root DAG's driver pod failed: its node says why
            state, error = FAILED, ""
        except Exception as exc:  # noqa: BLE001 - a run the driver cannot start fails with the reason
            log.exception("run %s", ex.run["run_id"])
            state, error = FAILED, str(exc)
        if ex.deleted.is_set():
            return
        if ex.canceling.is_set():
            state = FAILED
        if ex.broken():  # Argo put the Workflow in Error: the run fails, the Workflow says why
            state, error = FAILED, ex.record.error
        ex.record.close("Succeeded" if state == SUCCEEDED else "Failed", "" if state == SUCCEEDED else error)
        with self.store.lock:  # KFP's run has no error for a failed run: its Workflow says why
            ex.run["finished_at"] = now()
        self._set_state(ex, state)

    def _root_parameters(self, ex: Execution) -> dict:
        """Pipeline inputs: the run's values over the compiled defaults (CreateRun has already
        refused a run missing a required one or giving one the pipeline does not have)."""
        given = (ex.run.get("runtime_config") or {}).get("parameters") or {}
        out = {}
        for name, d in ((ex.pipeline_spec["root"].get("inputDefinitions") or {}).get("parameters") or {}).items():
            if name in given:
                out[name] = given[name]
            elif "defaultValue" in d:
                out[name] = d["defaultValue"]
        return out

    def _dag(self, ex: Execution, prefix: str, spec: dict, inputs: dict, artifacts: dict,
             scope: str) -> tuple[str, dict[str, Node]]:
        """Run one DAG's tasks to the end; its state (FAILED if any task failed) and its tasks.
        `scope`: its node in the Workflow's status (ArgoRecord)."""
        tasks = spec.get("tasks") or {}
        components = ex.pipeline_spec.get("components") or {}
        nodes = {name: Node(path=f"{prefix}/{name}" if prefix else name, spec=t,
                            component=components[t["componentRef"]["name"]]) for name, t in tasks.items()}
        done: queue.Queue = queue.Queue()
        running = 0
        while True:
            states = {n: node.state for n, node in nodes.items()}
            start, skip = dag.runnable(tasks, states)
            if ex.deleted.is_set() or ex.broken():
                start, skip = [], [n for n, s in states.items() if s == PENDING]
            elif ex.canceling.is_set():
                exits = [n for n in start if dag.is_exit_task(tasks[n])]
                skip = skip + [n for n in start if n not in exits]
                start = exits
            for n in skip:
                nodes[n].state = SKIPPED
                if not (ex.deleted.is_set() or ex.broken() or ex.canceling.is_set()):  # a past deadline makes no nodes
                    ex.record.omitted(scope, n, _guarded(nodes[n]))
            for n in start:
                nodes[n].state = RUNNING
                threading.Thread(target=self._run_task, args=(ex, nodes[n], inputs, artifacts, nodes, done, scope),
                                 daemon=True, name=f"task-{n}").start()
                running += 1
            if start or skip:
                continue
            if running == 0:
                break
            done.get()
            running -= 1
        states = [node.state for node in nodes.values()]
        if any(s == FAILED for s in states):
            return FAILED, nodes
        if any(s == CANCELED for s in states):
            return CANCELED, nodes
        return SUCCEEDED, nodes

    def _run_task(self, ex, node: Node, inputs, artifacts, siblings, done: queue.Queue, scope: str) -> None:
        task = node.path.rsplit("/", 1)[-1]
        try:
            params = dag.resolve_parameters(node.spec, inputs, siblings)
            node.parent_inputs = inputs
            for key, src in ((node.spec.get("inputs") or {}).get("parameters") or {}).items():
                if "taskFinalStatus" in src:
                    params[key] = self._final_status(ex, src["taskFinalStatus"]["producerTask"], siblings)
            arts = dag.resolve_artifacts(node.spec, artifacts, siblings)
            if not dag.condition_holds(node.spec, params):  # a dsl.If branch not taken: skipped, not failed
                ex.record.condition_false(scope, task, _guarded(node))
                node.state = SKIPPED
                return
            node.scope = scope
            if "parameterIterator" in node.spec:
                state = self._loop(ex, node, task, params, arts, scope)
            elif "dag" in node.component:
                sub = ex.record.dag_task(scope, task, _guarded(node))
                state, tasks = self._dag(ex, node.path, node.component["dag"], params, arts, sub)
                node.outputs, node.artifacts = dag.dag_outputs(node.component["dag"], [tasks], collected=False)
                ex.record.end(sub, _ARGO_PHASE.get(state, "Failed"))
            else:
                state = self._container(ex, node, params, arts)
            node.state = state
        except Exception as exc:  # noqa: BLE001 - the driver's failure fails the task, not the engine
            log.exception("task %s of run %s", node.path, ex.run["run_id"])
            node.state = FAILED
            self._task_error(ex, f"{type(exc).__name__}: {exc}")
        finally:
            done.put(node.path)

    def _loop(self, ex: Execution, node: Node, task: str, params: dict, arts: dict, scope: str) -> str:
        """A ParallelFor: its body DAG once per item, at most iteratorPolicy.parallelismLimit at
        a time (Argo's DAG `parallelism` over `withSequence`); its outputs are collected
        (dsl.Collected: a list, in item order). It fails if any iteration failed."""
        items = dag.loop_items(node.spec, params)
        limit = int((node.spec.get("iteratorPolicy") or {}).get("parallelismLimit") or 0) or max(len(items), 1)
        loop = ex.record.loop_task(scope, task, len(items), _guarded(node))
        item_input = node.spec["parameterIterator"]["itemInput"]
        results: list = [None] * len(items)
        slots = threading.Semaphore(limit)

        def iteration(i: int) -> None:
            with slots:
                if ex.halted(node):
                    results[i] = (CANCELED, {})
                    return
                try:
                    body = ex.record.iteration(loop, i)
                    results[i] = self._dag(ex, f"{node.path}/{i}", node.component["dag"],
                                           {**params, item_input: items[i]}, arts, body)
                except Exception as exc:  # noqa: BLE001 - its driver failed: the iteration, and the loop, fail
                    self._task_error(ex, f"{type(exc).__name__}: {exc}")
                    results[i] = (FAILED, {})
                ex.record.end_iteration(loop, i, _ARGO_PHASE.get(results[i][0], "Failed"))

        threads = [threading.Thread(target=iteration, args=(i,), daemon=True, name=f"task-{task}-{i}")
                   for i in range(len(items))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        states = [state for state, _ in results]
        state = FAILED if FAILED in states else CANCELED if CANCELED in states else SUCCEEDED
        node.outputs, node.artifacts = dag.dag_outputs(node.component["dag"], [tasks for _, tasks in results],
                                                       collected=True)
        ex.record.end(loop, _ARGO_PHASE[state])
        return state

    def _final_status(self, ex: Execution, producer: str, siblings) -> dict:
        node = siblings.get(producer)
        state = node.state if node else FAILED
        status = {"state": state, "pipelineJobResourceName": ex.workflow, "pipelineTaskName": producer}
        if state != SUCCEEDED:
            status["error"] = {"code": 2, "message": self._first_error(ex) or f"{producer} did not succeed"}
        return status

    # --- a container task: the driver's work, then a pod --------------------------------
    def _container(self, ex: Execution, node: Node, params: dict, arts: dict) -> str:
        label = node.component["executorLabel"]
        container = ex.pipeline_spec["deploymentSpec"]["executors"][label]["container"]
        config = ex.executors.get(label) or {}
        task_name = _display(node)
        policy = node.spec.get("retryPolicy") or {}
        attempts = 1 + int(policy.get("maxRetryCount") or 0)
        fingerprint = None
        if (node.spec.get("cachingOptions") or {}).get("enableCache"):
            fingerprint = self._fingerprint(ex, node, task_name, params, arts)
            hit = self.cache.get(fingerprint)
            if hit is not None:
                node.outputs, node.artifacts = dict(hit["outputs"]), dict(hit["artifacts"])
                ex.record.cached_task(node.scope, node.path.rsplit("/", 1)[-1], _guarded(node))  # no pod
                return SKIPPED
        driven = self._drive(ex, node, task_name, container, params, arts)
        state = FAILED
        for attempt in range(attempts):
            if ex.halted(node):
                state = CANCELED
                break
            if attempt:
                if ex.canceling.wait(self._retry_wait(policy, attempt)) or ex.deleted.is_set():
                    state = CANCELED
                    break
            state = self._attempt(ex, node, task_name, container, config, driven)
            if state == SUCCEEDED:
                if fingerprint:
                    self.cache[fingerprint] = {"outputs": dict(node.outputs), "artifacts": dict(node.artifacts)}
                break
            if state == CANCELED:
                break
        if not ex.deleted.is_set():
            ex.record.end(driven.executor, _ARGO_PHASE[state])
        return state

    def _retry_wait(self, policy: dict, attempt: int) -> float:
        """How long before retry `attempt`: the retryPolicy's backoff, capped by the faults' timing."""
        return min(self._backoff(policy, attempt), self.retry_backoff_cap())

    @staticmethod
    def _backoff(policy: dict, attempt: int) -> float:
        def seconds(text) -> float:
            text = str(text or "0s")
            return float(text[:-1]) if text.endswith("s") else float(text)

        base = seconds(policy.get("backoffDuration"))
        factor = float(policy.get("backoffFactor") or 2)
        cap = seconds(policy.get("backoffMaxDuration") or "3600s")
        return min(base * factor ** (attempt - 1), cap)

    def _fingerprint(self, ex: Execution, node: Node, task_name: str, params: dict, arts: dict) -> str:
        """KFP 2.14.3's cache key (backend/src/v2/cacheutils/cache.go GenerateCacheKey, looked up
        per pipeline name and namespace): the input artifacts (each a distinct artifact, so a new
        upstream output misses), the input parameter values, the output definitions, the image
        and the command and args as compiled. The env, resources and cachingOptions.cacheKey
        are not in it: a task whose env changed is still a hit, as on the cluster."""
        from kfp.local import placeholder_utils

        inputs = self._executor_input(ex, node, params, arts, "s3://cache-key")
        inputs = placeholder_utils.resolve_self_references_in_executor_input(
            inputs, pipeline_resource_name=ex.workflow, task_resource_name=task_name, pipeline_root=ex.root,
            pipeline_job_id=ex.run["run_id"], pipeline_task_id="")["inputs"]
        container = ex.pipeline_spec["deploymentSpec"]["executors"][node.component["executorLabel"]]["container"]
        outputs = node.component.get("outputDefinitions") or {}
        body = json.dumps({"pipeline": ex.pipeline_spec["pipelineInfo"]["name"], "namespace": self.namespace,
                           "inputArtifactNames": {k: [a.get("uri") for a in v] for k, v in arts.items()},
                           "inputParameterValues": inputs.get("parameterValues") or {},
                           "outputArtifactsSpec": outputs.get("artifacts") or {},
                           "outputParametersSpec": outputs.get("parameters") or {},
                           "containerSpec": {"image": container.get("image", ""), "cmdArgs": component_command(container)}},
                          sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()

    def _executor_input(self, ex: Execution, node: Node, params: dict, arts: dict, task_root: str) -> dict:
        from google.protobuf import json_format
        from kfp.local import executor_input_utils
        from kfp.pipeline_spec import pipeline_spec_pb2

        component = json_format.ParseDict({k: v for k, v in node.component.items() if k != "dag"},
                                          pipeline_spec_pb2.ComponentSpec())
        message = executor_input_utils.construct_executor_input(component, params, task_root, block_input_artifact=False)
        executor_input = executor_input_utils.executor_input_to_dict(message, component)
        outputs = executor_input.setdefault("outputs", {})
        for name, p in (outputs.get("parameters") or {}).items():
            p["outputFile"] = f"{OUTPUT_PARAMETER_DIR}/{name}"
        outputs["outputFile"] = OUTPUT_METADATA
        if arts:
            executor_input.setdefault("inputs", {})["artifacts"] = {k: {"artifacts": v} for k, v in arts.items()}
        return executor_input

    def _drive(self, ex: Execution, node: Node, task_name: str, container: dict, params: dict, arts: dict) -> _Driven:
        """The driver's part, once per task (its retries reuse it, as Argo reruns only the
        executor pod): the executor input, the resolved command, the launcher's command line,
        and the task's driver and executor nodes in the Workflow."""
        from kfp.local import placeholder_utils

        task_uuid = str(uuid.uuid4())
        pipeline_name = ex.pipeline_spec["pipelineInfo"]["name"]
        task_root = f"{ex.root}/{pipeline_name}/{ex.run['run_id']}/{task_name}/{task_uuid}"
        executor_input = self._executor_input(ex, node, params, arts, task_root)
        command = placeholder_utils.replace_placeholders(
            component_command(container), executor_input,
            pipeline_resource_name=ex.workflow, task_resource_name=task_name, pipeline_root=ex.root,
            unique_pipeline_id=ex.run["run_id"])
        types = {k: v.get("parameterType", "STRING") for k, v in
                 ((node.component.get("outputDefinitions") or {}).get("parameters") or {}).items()}
        argv = launcher_argv(pipeline_name, ex.run["run_id"], executor_input,
                             {k: v for k, v in node.component.items() if k != "dag"}, container)
        executor = ex.record.container_task(node.scope, node.path.rsplit("/", 1)[-1],
                                            pod_spec_patch(container, argv), _guarded(node))
        return _Driven(task_root=task_root, command=command, argv=argv, executor=executor,
                       launch={"task_root": task_root, "output_parameter_types": types, "image": self.image(container.get("image", ""))})

    def _attempt(self, ex: Execution, node: Node, task_name: str, container: dict, config: dict, driven: _Driven) -> str:
        task_root = driven.task_root
        argo_pod = ex.record.executor_pod(driven.executor)
        pod, refused = self._create_pod(ex, node, task_name, container, config, driven, argo_pod)
        if pod is None:
            if not ex.deleted.is_set():
                ex.record.end(ex.record.pod_node(argo_pod), "Error", refused)
            if ex.halted(node):
                return CANCELED
            self._task_error(ex, f"task {task_name} failed: {refused}")
            return FAILED
        name = pod["metadata"]["name"]
        with self.lock:
            ex.pods.add(name)
        if ex.halted(node):  # terminated while the pod was being made
            self.pods.delete(name)
        phase, ended = self._wait_pod(ex, name)
        failure = "" if phase == "Succeeded" else self._pod_failure(name, ended)
        if phase != "Succeeded" and ex.halted(node):  # Argo stopped it: the terminate's deadline
            failure = "Step exceeded its deadline"
        if not ex.deleted.is_set():
            ex.record.end(ex.record.pod_node(argo_pod), "Succeeded" if phase == "Succeeded" else "Failed", failure,
                          host=((ended or {}).get("spec") or {}).get("nodeName", ""))
        if phase == "Succeeded":
            result = self._read_output(task_root)
            node.outputs = dict(result.get("parameterValues") or {})
            declared = (node.component.get("outputDefinitions") or {}).get("artifacts") or {}
            node.artifacts = {k: [{**a, "type": declared.get(k, {}).get("artifactType", {})} for a in v.get("artifacts") or []]
                              for k, v in (result.get("artifacts") or {}).items()}
            return SUCCEEDED
        if ex.halted(node):
            self._task_error(ex, "the task's pod was stopped: the run was terminated")
            return CANCELED
        self._task_error(ex, f"task {task_name} failed: {failure}")
        return FAILED

    def _run_driver(self, ex: Execution, node: dict) -> str:
        """A driver node's pod, run to its end (ArgoRecord's `run_driver`): the driver template's
        container with its inputs resolved, as Argo makes the pod. "" when it succeeded, else
        Argo's message for it."""
        if ex.deleted.is_set() or ex.broken():
            return "Step exceeded its deadline"
        template = ex.record.templates[node["templateName"]]
        c = template["container"]
        values = {f"inputs.parameters.{p['name']}": p.get("value", p.get("default", ""))
                  for p in (node.get("inputs") or {}).get("parameters", [])}
        values["workflow.name"] = ex.workflow
        for p in (template.get("outputs") or {}).get("parameters", []):
            values[f"outputs.parameters.{p['name']}.path"] = (p.get("valueFrom") or {}).get("path", "")

        def resolve(text: str) -> str:
            return re.sub(r"\{\{([^{}]+)\}\}", lambda m: str(values.get(m.group(1).strip(), m.group(0))), text)

        name = argo_status.pod_name(ex.workflow, node["name"], node["templateName"])
        spec = self._pod_spec(ex, {"image": c.get("image", ""), "command": [sys.executable, "-I", "-S", str(DRIVER)],
                                   "args": [resolve(a) for a in c.get("args") or []],
                                   "env": [{"name": e["name"], "value": resolve(e.get("value", ""))} for e in c.get("env") or []],
                                   **({"resources": c["resources"]} if c.get("resources") else {})})
        meta = self._pod_meta(ex, name, node["name"], {})
        pod, refused = self._create_refusable(ex, None, node["name"],
                                              lambda: self.pods.create({"apiVersion": "v1", "kind": "Pod",
                                                                        "metadata": meta, "spec": spec}))
        if pod is None:
            return refused
        with self.lock:
            ex.pods.add(name)
        phase, ended = self._wait_pod(ex, name)
        if phase == "Succeeded":
            return ""
        return "Step exceeded its deadline" if ex.canceling.is_set() or ex.deleted.is_set() else self._pod_failure(name, ended)

    @staticmethod
    def _pod_spec(ex: Execution, container: dict) -> dict:
        """A pod of the run as Argo makes it: one `main` container, the run's service account,
        never restarted (a retry is a new pod), Argo's termination grace."""
        return {"serviceAccountName": ex.run.get("service_account") or RUNNER_ACCOUNT, "restartPolicy": "Never",
                "terminationGracePeriodSeconds": DEFAULT_GRACE_S, "containers": [{"name": "main", **container}]}

    def _pod_meta(self, ex: Execution, name: str, node_name: str, meta: dict) -> dict:
        """A pod of the run as Argo makes it: its labels and node annotations, the Workflow as owner."""
        labels = {**(meta.get("labels") or {}), "pipeline/runid": ex.run["run_id"],
                  "workflows.argoproj.io/workflow": ex.workflow}
        annotations = {**(meta.get("annotations") or {}), "workflows.argoproj.io/node-name": node_name,
                       "workflows.argoproj.io/node-id": ex.record.node_id(node_name)}
        return {"name": name, "namespace": self.namespace, "labels": labels, "annotations": annotations,
                # Argo's pods are the Workflow's: deleting it deletes them
                "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": ex.workflow,
                                     "uid": ex.uid, "controller": True, "blockOwnerDeletion": True}]}

    def _create_pod(self, ex: Execution, node: Node, task_name: str, container: dict, config: dict, driven: _Driven,
                    argo_pod: str) -> tuple[dict | None, str]:
        return self._create_refusable(ex, node, ex.record.pod_node(argo_pod),
                                      lambda: self._pod(ex, node, task_name, container, config, driven, argo_pod))

    def _create_refusable(self, ex: Execution, node: Node | None, node_name: str, create) -> tuple[dict | None, str]:
        """Create the task's pod as Argo's controller does (operator.go requeueIfTransientErr):
        a pod the namespace's ResourceQuota refuses ("exceeded quota") leaves its node Pending
        with the refusal and is tried again until it fits, the run is stopped, or the task
        times out; any other refusal (a LimitRange's max, a quota's "must specify") fails it.
        Returns (the pod, "") or (None, why)."""
        wait, deadline = QUOTA_RETRY_S[0], time.monotonic() + POD_TIMEOUT_S
        while True:
            try:
                return create(), ""
            except Exception as exc:  # noqa: BLE001 - the API server's refusal, worded as it words it
                why = getattr(exc, "message", str(exc))
                if "exceeded quota" not in why or time.monotonic() > deadline:
                    return None, why
                ex.record.pending(node_name, why)
            ex.deleted.wait(wait)  # (a terminate is seen within one wait: an exit task still waits for room)
            if ex.halted(node):
                return None, "Step exceeded its deadline"
            wait = min(wait * 1.5, QUOTA_RETRY_S[1])

    def _pod(self, ex: Execution, node: Node, task_name: str, container: dict, config: dict, driven: _Driven,
             argo_name: str) -> dict:
        launch, argv, command = driven.launch, driven.argv, driven.command
        env = component_env(container) + dag.secret_env(config, node.parent_inputs)
        # The command with its placeholders resolved, which the real launcher resolves in the pod
        # and execs: one string per element, as its exec has them (the kernel's limit is per string).
        env += [{"name": f"{RESOLVED_ARG_ENV}{i}", "value": a} for i, a in enumerate(command)]
        env += [{"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "KFP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "KFP_LAUNCHER_SPEC", "value": json.dumps(launch)},
                {"name": "KFP_LAUNCHER_S3_ENDPOINT", "value": self.s3_endpoint},
                {"name": "KFP_LAUNCHER_S3_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": STORAGE_SECRET, "key": "accesskey"}}},
                {"name": "KFP_LAUNCHER_S3_SECRET_KEY", "valueFrom": {"secretKeyRef": {"name": STORAGE_SECRET, "key": "secretkey"}}}]
        given = config.get("podMetadata") or {}
        meta = self._pod_meta(ex, argo_name, ex.record.pod_node(argo_name),
                              {**given, "labels": {**(given.get("labels") or {}), "pipelines.kubeflow.org/v2_component": "true"}})
        spec = self._pod_spec(ex, {"image": container.get("image", ""), "command": [sys.executable, "-I", str(LAUNCHER), *argv],
                                   "args": component_command(container), "resources": component_resources(container),
                                   "env": env})
        if config.get("tolerations"):
            spec["tolerations"] = [{k: v for k, v in t.items() if k in ("key", "operator", "value", "effect", "tolerationSeconds")}
                                   for t in config["tolerations"]]
        if (config.get("nodeSelector") or {}).get("labels"):
            spec["nodeSelector"] = dict(config["nodeSelector"]["labels"])
        return self.pods.create({"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": meta})

    def _wait_pod(self, ex: Execution, name: str) -> tuple[str, dict | None]:
        """Wait for the pod to end (polls back off to 1 s): its phase ("" if it is gone) and the
        pod as last read."""
        deadline = time.monotonic() + POD_TIMEOUT_S
        wait = 0.05
        while time.monotonic() < deadline:
            pod = self.pods.get(name)
            phase = ((pod or {}).get("status") or {}).get("phase", "")
            if pod is None or phase in ("Succeeded", "Failed"):
                return phase, pod
            time.sleep(wait)
            wait = min(wait * 1.5, 1.0)
        self.pods.delete(name)
        return "Failed", None

    @staticmethod
    def _pod_failure(name: str, pod: dict | None) -> str:
        """Why the ended pod failed, as Argo words its node's message (operator.go
        inferFailedReason: "<reason> (exit code <n>): <message>")."""
        for c in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
            t = (c.get("state") or {}).get("terminated") or {}
            if not t:
                continue
            message = t.get("message", "")
            if "argument list too long" in message:
                # on Argo the main container's first program is argoexec's emissary, whose exec the
                # kernel refuses (argoproj/argo-workflows#15471)
                message = ('runc create failed: unable to start container process: exec: '
                           '"/var/run/argo/argoexec": argument list too long')
            why = f"{t.get('reason', '')} (exit code {t.get('exitCode')})"
            return f"{why}: {message}" if message else why
        return f"pod {name} failed"

    def _read_output(self, task_root: str) -> dict:
        bucket, _, key = task_root.split("://", 1)[1].partition("/")
        body = self.s3.get_object(Bucket=bucket, Key=f"{key}/executor_output.json")["Body"].read()
        return json.loads(body)

    def _stop_pods(self, ex: Execution) -> None:
        with self.lock:
            names = list(ex.pods)
        for name in names:
            self.pods.delete(name)  # a pod already gone is not an error (PodApi.delete)

    # --- what the API shows --------------------------------------------------------------
    def _set_state(self, ex: Execution, state: str) -> None:
        with self.store.lock:
            if ex.run["state"] == state:
                return
            ex.run["state"] = state
            ex.run["state_history"] = [*(ex.run.get("state_history") or []), {"update_time": now(), "state": state}]

    def _reported(self, ex: Execution, stored: dict) -> dict:
        """The persistence agent's report of the stored Workflow: the run's task details."""
        with self.store.lock:
            task_report.report(ex.run, stored, ex.tasks)
        return stored

    def _task_error(self, ex: Execution, message: str) -> None:
        with self.store.lock:
            ex.errors.append(message)

    def _first_error(self, ex: Execution) -> str | None:
        with self.store.lock:
            return ex.errors[0] if ex.errors else None
