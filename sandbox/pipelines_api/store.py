"""Pipelines, their versions and experiments, kept as KFP's API server keeps them (in memory:
a sandbox lives as long as its owner). Items are dicts of the models' snake_case fields."""

from __future__ import annotations

import threading
import uuid

import yaml

from .wire import ApiError, already_exists, invalid, not_found, now

DEFAULT_EXPERIMENT = "Default"


def parse_package(text: str, filename: str = "") -> dict:
    """A compiled pipeline (YAML: the pipeline spec, then kfp-kubernetes' platform spec if any)
    as the API stores it: the spec, or {"pipeline_spec", "platform_spec"} with one."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d is not None]  # libyaml, as fast as the server's Go
    except yaml.YAMLError as exc:
        raise invalid(f"Failed to create a pipeline due to error parsing pipeline spec {filename}: {exc}") from None
    if not docs or not isinstance(docs[0], dict) or "pipelineInfo" not in docs[0] or "root" not in docs[0]:
        raise invalid(f"Failed to create a pipeline: invalid pipeline spec {filename or ''}: "
                      "expected a compiled KFP v2 pipeline (pipelineInfo, root)".replace("  ", " "))
    if len(docs) == 1:
        return docs[0]
    return {"pipeline_spec": docs[0], "platform_spec": docs[1]}


class PipelineStore:
    def __init__(self, namespace: str, server: str | None = None):
        """`server`: the release whose KFP API server this plays (platform_spec.py), None: no
        release's checks of the kfp-kubernetes settings."""
        self.namespace = namespace
        self.server = server
        self.lock = threading.RLock()
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, dict] = {}
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.recurring_runs: dict[str, dict] = {}
        self.create_experiment({"display_name": DEFAULT_EXPERIMENT, "description": "All runs created without specifying an experiment will be grouped here."})

    # --- pipelines and versions ---------------------------------------------------
    def create_pipeline(self, name: str, display_name: str = "", description: str = "", namespace: str = "") -> dict:
        if not name:
            raise invalid("Failed to create a pipeline: pipeline name is empty. Please specify a valid name")
        with self.lock:
            if any(p["name"] == name for p in self.pipelines.values()):
                raise already_exists("create a pipeline", "Pipeline", name)
            pipeline = {"pipeline_id": str(uuid.uuid4()), "name": name, "display_name": display_name or name,
                        "description": description, "created_at": now(), "namespace": namespace or self.namespace}
            self.pipelines[pipeline["pipeline_id"]] = pipeline
            return pipeline

    def _get(self, table: dict, kind: str, key: str) -> dict:
        with self.lock:
            if key not in table:
                raise not_found(kind, key)
            return table[key]

    def pipeline(self, pipeline_id: str) -> dict:
        return self._get(self.pipelines, "Pipeline", pipeline_id)

    def delete_pipeline(self, pipeline_id: str, cascade: bool = False) -> None:
        with self.lock:
            self.pipeline(pipeline_id)
            versions = [v for v in self.versions.values() if v["pipeline_id"] == pipeline_id]
            if versions and not cascade:
                raise ApiError("FAILED_PRECONDITION", f"Failed to delete pipeline {pipeline_id}: "
                                                      f"it has {len(versions)} pipeline version(s); delete them first")
            for v in versions:
                del self.versions[v["pipeline_version_id"]]
            del self.pipelines[pipeline_id]

    def create_version(self, pipeline_id: str, name: str, spec: dict, display_name: str = "",
                       description: str = "") -> dict:
        with self.lock:
            self.pipeline(pipeline_id)
            if not name:
                raise invalid("Failed to create a pipeline version: name is empty. Please specify a valid name")
            if any(v["name"] == name and v["pipeline_id"] == pipeline_id for v in self.versions.values()):
                raise already_exists("create a pipeline version", "Pipeline version", name)
            self._parse_spec(spec, "Failed to create a pipeline version")
            version = {"pipeline_id": pipeline_id, "pipeline_version_id": str(uuid.uuid4()), "name": name,
                       "display_name": display_name or name, "description": description, "created_at": now(),
                       "pipeline_spec": spec}
            self.versions[version["pipeline_version_id"]] = version
            return version

    def version(self, pipeline_id: str, version_id: str) -> dict:
        with self.lock:
            v = self.versions.get(version_id)
            if v is None or (pipeline_id and v["pipeline_id"] != pipeline_id):
                raise not_found("PipelineVersion", version_id)
            return v

    def delete_version(self, pipeline_id: str, version_id: str) -> None:
        with self.lock:
            self.version(pipeline_id, version_id)
            del self.versions[version_id]

    # --- experiments ---------------------------------------------------------------
    def create_experiment(self, body: dict) -> dict:
        name = body.get("display_name") or ""
        if not name:
            raise invalid("Invalid input error: Experiment name is empty. Please specify a valid experiment name")
        with self.lock:
            if any(e["display_name"] == name for e in self.experiments.values()):
                raise already_exists("create a new experiment", "Experiment", name)
            experiment = {"experiment_id": str(uuid.uuid4()), "display_name": name,
                          "description": body.get("description") or "", "created_at": now(),
                          "namespace": body.get("namespace") or self.namespace, "storage_state": "AVAILABLE"}
            self.experiments[experiment["experiment_id"]] = experiment
            return experiment

    def experiment(self, experiment_id: str) -> dict:
        return self._get(self.experiments, "Experiment", experiment_id)

    def default_experiment(self) -> dict:
        with self.lock:
            return next(e for e in self.experiments.values() if e["display_name"] == DEFAULT_EXPERIMENT)

    # --- runs --------------------------------------------------------------------------
    def create_run(self, body: dict) -> dict:
        """A run as KFP 2.17's CreateRun stores it (validation as run_server.go): a display
        name; the spec from the pipeline version reference if given, else inline; the default
        experiment when none is named. It starts PENDING; the executor takes it from there."""
        name = body.get("display_name") or ""
        if not name:
            raise invalid("Invalid input error: The run name is empty. Please specify a valid name")
        with self.lock:
            ref, spec, experiment = self._source(body, "Failed to create a run due to empty pipeline spec manifest")
            if not ref.get("pipeline_version_id"):
                self._parse_spec(spec, "Failed to create a run")
            self._compile_platform_spec(spec)
            created = now()
            run = {"run_id": str(uuid.uuid4()), "experiment_id": experiment["experiment_id"], "display_name": name,
                   "description": body.get("description") or "", "storage_state": "AVAILABLE",
                   "pipeline_spec": spec if not ref.get("pipeline_version_id") else None,
                   "pipeline_version_reference": ref or None,
                   "runtime_config": body.get("runtime_config") or {"parameters": {}},
                   "service_account": body.get("service_account") or "", "created_at": created,
                   "scheduled_at": created, "state": "PENDING",
                   "state_history": [{"update_time": created, "state": "PENDING"}]}
            self.runs[run["run_id"]] = run
            return run

    def _parse_spec(self, spec: dict, failure: str) -> None:
        """v2_template.go's strict parse of the pipeline and platform specs (both releases)."""
        from .platform_spec import newer_fields

        if not self.server:
            return
        bad = newer_fields(spec, self.server)
        if bad:
            kind, path = bad
            what = "invalid v2 pipeline spec" if kind == "pipeline" else "cannot unmarshal platform specific configs"
            raise invalid(f"{failure}: {what}: proto: unknown field \"{path.rsplit('.', 1)[-1]}\" ({path}; this "
                          "server's KFP does not know it)")

    def _compile_platform_spec(self, spec: dict) -> None:
        """The Argo compiler's strict parse of each executor's kfp-kubernetes settings, on a
        release where an unknown field fails the run's creation (platform_spec.py)."""
        from .platform_spec import STRICT, executors, unknown_fields

        if not self.server or not STRICT[self.server]:
            return
        for label, config in sorted(executors(spec if "pipeline_spec" in spec else {}).items()):
            bad = unknown_fields(config, self.server)
            if bad:
                raise ApiError("INTERNAL", "Failed to create a run: InternalServerError: Failed to compile the pipeline "
                                           f"for executor {label}: failed to unmarshal kubernetes config: proto: unknown "
                                           f"field \"{bad[0].rsplit('.', 1)[-1]}\" ({bad[0]}; this server's KFP does "
                                           "not know it)")

    def _source(self, body: dict, failure: str) -> tuple[dict, dict, dict]:
        """What a run or recurring run executes and where it is filed, as CreateRun and
        CreateRecurringRun read them: (version reference, spec, experiment). The spec comes from
        the referenced version if there is one, else inline; the experiment defaults to Default."""
        ref = body.get("pipeline_version_reference") or {}
        if ref.get("pipeline_version_id"):
            spec = self.version(ref.get("pipeline_id", ""), ref["pipeline_version_id"])["pipeline_spec"]
        elif body.get("pipeline_spec"):
            spec = body["pipeline_spec"]
        else:
            raise invalid(f"Invalid input error: {failure}. Either pipeline_version_reference or pipeline_spec must be set")
        experiment = self.experiment(body["experiment_id"]) if body.get("experiment_id") else self.default_experiment()
        return ref, spec, experiment

    def run(self, run_id: str) -> dict:
        return self._get(self.runs, "Run", run_id)

    def spec_of(self, run: dict) -> dict:
        """The run's compiled pipeline: {"pipeline_spec": ..., "platform_spec": ...} either way."""
        ref = run.get("pipeline_version_reference") or {}
        spec = run["pipeline_spec"] if run.get("pipeline_spec") else self.version(
            ref.get("pipeline_id", ""), ref["pipeline_version_id"])["pipeline_spec"]
        return spec if "pipeline_spec" in spec else {"pipeline_spec": spec, "platform_spec": {}}

    # --- recurring runs --------------------------------------------------------------------
    def create_recurring_run(self, body: dict) -> dict:
        """KFP 2.17 CreateRecurringRun: its checks (schedule.validate), the spec from the
        version reference or inline, the default experiment when none is named."""
        from .schedule import validate

        try:
            schedule = validate(body)
        except ValueError as exc:
            raise invalid(str(exc)) from None
        with self.lock:
            ref, _, experiment = self._source(body, "Failed to create a recurring run")
            created = now()
            enabled = (body.get("mode") or "ENABLE") == "ENABLE"
            rr = {"recurring_run_id": str(uuid.uuid4()), "display_name": body["display_name"],
                  "description": body.get("description") or "", "pipeline_spec": body.get("pipeline_spec"),
                  "pipeline_version_reference": ref or None, "runtime_config": body.get("runtime_config") or {"parameters": {}},
                  "service_account": body.get("service_account") or "", "max_concurrency": str(int(body.get("max_concurrency") or 1)),
                  "trigger": body["trigger"], "mode": "ENABLE" if enabled else "DISABLE", "created_at": created,
                  "updated_at": created, "status": "ENABLED" if enabled else "DISABLED",
                  "no_catchup": bool(body.get("no_catchup")), "namespace": self.namespace,
                  "experiment_id": experiment["experiment_id"], "_schedule": schedule,
                  "_next": schedule.after(schedule.origin)}
            self.recurring_runs[rr["recurring_run_id"]] = rr
            return rr

    def recurring_run(self, recurring_run_id: str) -> dict:
        return self._get(self.recurring_runs, "RecurringRun", recurring_run_id)

    def set_recurring_run_enabled(self, recurring_run_id: str, enabled: bool) -> None:
        from datetime import UTC, datetime

        with self.lock:
            rr = self.recurring_run(recurring_run_id)
            if enabled and rr["status"] != "ENABLED":
                rr["_next"] = rr["_schedule"].after(datetime.now(UTC))  # times missed while disabled are not caught up
            rr["status"], rr["mode"] = ("ENABLED", "ENABLE") if enabled else ("DISABLED", "DISABLE")
            rr["updated_at"] = now()
