"""What a release's KFP API server makes of a compiled pipeline's kfp-kubernetes settings
(the platform spec's executors, KubernetesExecutorConfig), field by field
(data/kfp-kubernetes-executor-config.json, read from each release's proto).

When a run is created, the API server's Argo compiler parses every executor's settings strictly
(backend/src/v2/compiler/argocompiler/container.go):
- RHOAI 3.x (KFP 2.14.3 fork, protojson): a field it does not know fails the run's creation,
  "failed to unmarshal kubernetes config: ... unknown field" (e.g. kfp-kubernetes 2.17's
  securityContext or a PVC mount's subPath; `optional` is known: the fork carries #12216);
- RHOAI 2.x (KFP 2.5.0, jsonpb): the error is ignored, and that executor's pod labels and
  annotations are silently not applied.
The driver discards unknown fields on both.

The pipeline spec itself, and the platform spec's PipelineConfig, are parsed strictly (protojson)
by both releases when a pipeline version is uploaded or a run carries its spec
(backend/src/apiserver/template/v2_template.go: "invalid v2 pipeline spec: ...", "cannot
unmarshal platform specific configs: ..."). `newer_fields` names what the kfp 2.17 SDK can
write that neither fork's api/v2alpha1/pipeline_spec.proto knows (the diff of kubeflow/pipelines
2.14.3..2.17.0, less the 3.3 fork's cherry-pick #12185).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "kfp-kubernetes-executor-config.json"
STRICT = {"rhoai-3.3": True, "rhoai-2.25": False}  # whether an unknown field fails the run's creation


@cache
def _fields(server: str) -> dict:
    return json.loads(DATA.read_text())[server]


def _camel(name: str) -> str:
    """protojson accepts a field's proto name (snake_case) as well as its JSON name."""
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


def unknown_fields(config: dict, server: str) -> list[str]:
    """The paths of the fields in one executor's settings that `server` does not know."""
    f = _fields(server)
    out: list[str] = []

    def walk(obj, message: str, path: str) -> None:
        if not isinstance(obj, dict) or message not in f["messages"]:
            return  # a scalar, or a free-form type (google.protobuf.Value, ml_pipelines.Value)
        known = set(f["messages"][message])
        for key, value in obj.items():
            name = _camel(key)
            where = f"{path}.{key}" if path else key
            if name not in known:
                out.append(where)
                continue
            field = f"{message}.{name}"
            if field in f["map_fields"] or field not in f["field_types"]:
                continue
            for item in value if isinstance(value, list) else [value]:
                walk(item, f["field_types"][field], where)

    walk(config, f["root"], "")
    return out


def executors(spec: dict) -> dict:
    """The kfp-kubernetes settings of a compiled pipeline, by executor label."""
    return (((spec.get("platform_spec") or {}).get("platforms") or {}).get("kubernetes") or {}).get(
        "deploymentSpec", {}).get("executors", {}) or {}


# Fields of pipeline_spec.proto newer than each release's fork (kfp 2.17.0 against rhoai-3.3 @ 9f73c31
# and rhoai-2.25 @ 87f75f8): importer(download_to_workspace=...), ParameterSpec.literals,
# PipelineConfig's TTLs and deadline (kfp 2.17 renumbered PipelineConfig; JSON goes by name).
_IMPORTER_NEWER = ("downloadToWorkspace",)
_PARAMETER_NEWER = ("literals",)
_PIPELINE_CONFIG_KNOWN = ("semaphoreKey", "mutexName", "resourceTtl", "workspace")
_COMPONENT_NEWER = {"rhoai-3.3": (), "rhoai-2.25": ("taskConfigPassthroughs",)}  # dsl.TaskConfig: #12185


def newer_fields(spec: dict, server: str) -> tuple[str, str] | None:
    """The first field of a stored spec ({"pipeline_spec", "platform_spec"} or a bare pipeline
    spec) that `server`'s protos do not know: ("pipeline"|"platform", path), else None."""
    pipeline = spec["pipeline_spec"] if "pipeline_spec" in spec else spec
    for label, executor in sorted(((pipeline.get("deploymentSpec") or {}).get("executors") or {}).items()):
        for key in _IMPORTER_NEWER:
            if key in (executor.get("importer") or {}):
                return "pipeline", f"deploymentSpec.executors.{label}.importer.{key}"
    components = {"root": pipeline.get("root") or {}, **{f"components.{k}": v for k, v in
                                                          (pipeline.get("components") or {}).items()}}
    for where, component in sorted(components.items()):
        for key in _COMPONENT_NEWER[server]:
            if key in component:
                return "pipeline", f"{where}.{key}"
        for name, param in sorted(((component.get("inputDefinitions") or {}).get("parameters") or {}).items()):
            for key in _PARAMETER_NEWER:
                if key in (param or {}):
                    return "pipeline", f"{where}.inputDefinitions.parameters.{name}.{key}"
    for platform, single in sorted(((spec.get("platform_spec") or {}).get("platforms") or {}).items()):
        for key in (single.get("pipelineConfig") or {}):
            if key not in _PIPELINE_CONFIG_KNOWN:
                return "platform", f"platforms.{platform}.pipelineConfig.{key}"
    return None
