"""Go's JSON, as KFP 2.14.3's Argo compiler writes the strings a Workflow carries (compiler.py).

- `go_json`: encoding/json (keys sorted, float64 formatting, `<` `>` `&` escaped as \\u003c
  \\u003e \\u0026): the bytes Go's client sends, so the sizes here are a real Workflow's;
- `_proto` / `stably_marshal_json`: protojson of a pipeline-spec message (backend/src/v2/
  compiler/argocompiler/proto.go: proto3 defaults dropped, int64 as strings, enums by name,
  durations as "3600s"), re-encoded by encoding/json;
- `_container_struct_json`: encoding/json of the Go PipelineContainerSpec struct (snake_case keys
  in field order, empty fields left out), whose sha256 is hashComponentContainer's.
The schema is api/v2alpha1/pipeline_spec.proto's, for the messages the compiler marshals.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any


class _CompileError(ValueError):
    """A Go `error` of the compiler; its text is Go's."""


def _q(s: str) -> str:
    # Go's %q; the names quoted here are plain.
    return json.dumps(s, ensure_ascii=False)


class _Wrap:
    """Go's `fmt.Errorf("<prefix>: %w", err)` around a block."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if isinstance(err, _CompileError):
            raise _CompileError(f"{self.prefix}: {err}") from err
        return False


# ---------------------------------------------------------------------------------------------
# Go's encoding/json, as stablyMarshalJSON and hashValue use it.

def _go_float(x: float) -> str:
    """encoding/json's float64: shortest digits, 'f' form unless <1e-6 or >=1e21."""
    if math.isnan(x) or math.isinf(x):
        raise _CompileError(f"json: unsupported value: {x}")
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign = "-" if x < 0 else ""
    digits, exp = _shortest_digits(abs(x))
    if 1e-6 <= abs(x) < 1e21:
        return sign + _fixed(digits, exp)
    e = exp + len(digits) - 1
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    # Go writes e-07 then trims it to e-7; large exponents have two digits already.
    return f"{sign}{mant}e{'-' if e < 0 else '+'}{abs(e):02d}" if e >= 0 else f"{sign}{mant}e-{abs(e)}"


def _go_fmt_v_float(x: float) -> str:
    """fmt's %v of a float64 (Argo's AnyStringPtr): %g, shortest, exponent from 1e+06 on."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign = "-" if x < 0 else ""
    digits, exp = _shortest_digits(abs(x))
    e = exp + len(digits) - 1
    if e < -4 or e >= 6:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    return sign + _fixed(digits, exp)


def _shortest_digits(a: float) -> tuple[str, int]:
    # repr() is the shortest round-trip form, as Go's strconv with precision -1.
    _, dig, exp = Decimal(repr(a)).normalize().as_tuple()
    return "".join(map(str, dig)), int(exp)


def _fixed(digits: str, exp: int) -> str:
    if exp >= 0:
        return digits + "0" * exp
    point = len(digits) + exp
    if point > 0:
        return digits[:point] + "." + digits[point:]
    return "0." + "0" * (-point) + digits


def _go_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    # encoding/json's HTML-safe escaping, and the two JS line separators.
    if any(c in s for c in "<>&\u2028\u2029"):
        out = (out.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
               .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    return out


def go_json(value: Any) -> str:
    """encoding/json.Marshal of a decoded JSON value (map keys sorted, numbers as float64)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _go_str(value)
    if isinstance(value, (int, float)):
        return _go_float(float(value))
    if isinstance(value, Mapping):
        return "{" + ",".join(_go_str(k) + ":" + go_json(value[k]) for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    raise _CompileError(f"json: unsupported type: {type(value).__name__}")


# ---------------------------------------------------------------------------------------------
# protojson: the proto schema of what the compiler marshals (api/v2alpha1/pipeline_spec.proto).
# A field is (json name, label, kind, type, oneof); label "" | "rep" | "map"; kind str, bool,
# int32, int64, double, enum (type: the enum), msg (type: the message), struct, value, list,
# duration. Oneof members and message fields keep their presence; other scalars drop defaults.

def _f(name: str, kind: str, typ: str | None = None, *, label: str = "", oneof: str | None = None,
       proto: str | None = None) -> tuple:
    return (name, proto or re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name), label, kind, typ, oneof)


_ENUMS: dict[str, tuple[str, ...]] = {
    "PrimitiveTypeEnum": ("PRIMITIVE_TYPE_UNSPECIFIED", "INT", "DOUBLE", "STRING"),
    "ParameterTypeEnum": ("PARAMETER_TYPE_ENUM_UNSPECIFIED", "NUMBER_DOUBLE", "NUMBER_INTEGER", "STRING",
                          "BOOLEAN", "LIST", "STRUCT", "TASK_FINAL_STATUS", "TASK_CONFIG"),
    "TaskConfigPassthroughTypeEnum": ("NONE", "RESOURCES", "ENV", "KUBERNETES_AFFINITY",
                                      "KUBERNETES_TOLERATIONS", "KUBERNETES_NODE_SELECTOR", "KUBERNETES_VOLUMES"),
    "TriggerStrategy": ("TRIGGER_STRATEGY_UNSPECIFIED", "ALL_UPSTREAM_TASKS_SUCCEEDED", "ALL_UPSTREAM_TASKS_COMPLETED"),
}

_VORP = "ValueOrRuntimeParameter"
_SCHEMA: dict[str, tuple[tuple, ...]] = {
    "PipelineSpec": (
        _f("pipelineInfo", "msg", "PipelineInfo"), _f("deploymentSpec", "struct"), _f("sdkVersion", "str"),
        _f("schemaVersion", "str"), _f("components", "msg", "ComponentSpec", label="map"),
        _f("root", "msg", "ComponentSpec"), _f("defaultPipelineRoot", "str")),
    "PipelineInfo": (_f("name", "str"), _f("displayName", "str"), _f("description", "str")),
    "ComponentSpec": (
        _f("inputDefinitions", "msg", "ComponentInputsSpec"), _f("outputDefinitions", "msg", "ComponentOutputsSpec"),
        _f("dag", "msg", "DagSpec", oneof="implementation"), _f("executorLabel", "str", oneof="implementation"),
        _f("singlePlatformSpecs", "msg", "SinglePlatformSpec", label="rep"),
        _f("taskConfigPassthroughs", "msg", "TaskConfigPassthrough", label="rep")),
    "DagSpec": (_f("tasks", "msg", "PipelineTaskSpec", label="map"), _f("outputs", "msg", "DagOutputsSpec")),
    "DagOutputsSpec": (_f("artifacts", "msg", "DagOutputArtifactSpec", label="map"),
                       _f("parameters", "msg", "DagOutputParameterSpec", label="map")),
    "DagOutputArtifactSpec": (_f("artifactSelectors", "msg", "ArtifactSelectorSpec", label="rep"),),
    "ArtifactSelectorSpec": (_f("producerSubtask", "str"), _f("outputArtifactKey", "str")),
    "DagOutputParameterSpec": (_f("valueFromParameter", "msg", "ParameterSelectorSpec", oneof="kind"),
                               _f("valueFromOneof", "msg", "ParameterSelectorsSpec", oneof="kind")),
    "ParameterSelectorSpec": (_f("producerSubtask", "str"), _f("outputParameterKey", "str")),
    "ParameterSelectorsSpec": (_f("parameterSelectors", "msg", "ParameterSelectorSpec", label="rep"),),
    "ComponentInputsSpec": (_f("artifacts", "msg", "InputsArtifactSpec", label="map"),
                            _f("parameters", "msg", "InputsParameterSpec", label="map")),
    "InputsArtifactSpec": (_f("artifactType", "msg", "ArtifactTypeSchema"), _f("isArtifactList", "bool"),
                           _f("isOptional", "bool"), _f("description", "str")),
    "InputsParameterSpec": (_f("type", "enum", "PrimitiveTypeEnum"), _f("parameterType", "enum", "ParameterTypeEnum"),
                            _f("defaultValue", "value"), _f("isOptional", "bool"), _f("description", "str")),
    "ComponentOutputsSpec": (_f("artifacts", "msg", "OutputsArtifactSpec", label="map"),
                             _f("parameters", "msg", "OutputsParameterSpec", label="map")),
    "OutputsArtifactSpec": (_f("artifactType", "msg", "ArtifactTypeSchema"), _f("properties", "msg", _VORP, label="map"),
                            _f("customProperties", "msg", _VORP, label="map"), _f("metadata", "struct"),
                            _f("isArtifactList", "bool"), _f("description", "str")),
    "OutputsParameterSpec": (_f("type", "enum", "PrimitiveTypeEnum"), _f("parameterType", "enum", "ParameterTypeEnum"),
                             _f("description", "str")),
    "TaskInputsSpec": (_f("parameters", "msg", "InputParameterSpec", label="map"),
                       _f("artifacts", "msg", "InputArtifactSpec", label="map")),
    "InputArtifactSpec": (_f("taskOutputArtifact", "msg", "TaskOutputArtifactSpec", oneof="kind"),
                          _f("componentInputArtifact", "str", oneof="kind")),
    "TaskOutputArtifactSpec": (_f("producerTask", "str"), _f("outputArtifactKey", "str")),
    "InputParameterSpec": (_f("taskOutputParameter", "msg", "TaskOutputParameterSpec", oneof="kind"),
                           _f("runtimeValue", "msg", _VORP, oneof="kind"),
                           _f("componentInputParameter", "str", oneof="kind"),
                           _f("taskFinalStatus", "msg", "TaskFinalStatus", oneof="kind"),
                           _f("parameterExpressionSelector", "str")),
    "TaskOutputParameterSpec": (_f("producerTask", "str"), _f("outputParameterKey", "str")),
    "TaskFinalStatus": (_f("producerTask", "str"),),
    "TaskConfigPassthrough": (_f("field", "enum", "TaskConfigPassthroughTypeEnum"), _f("applyToTask", "bool")),
    "PipelineTaskSpec": (
        _f("taskInfo", "msg", "PipelineTaskInfo"), _f("inputs", "msg", "TaskInputsSpec"),
        _f("dependentTasks", "str", label="rep"), _f("cachingOptions", "msg", "CachingOptions"),
        _f("componentRef", "msg", "ComponentRef"), _f("triggerPolicy", "msg", "TriggerPolicy"),
        _f("artifactIterator", "msg", "ArtifactIteratorSpec", oneof="iterator"),
        _f("parameterIterator", "msg", "ParameterIteratorSpec", oneof="iterator"),
        _f("retryPolicy", "msg", "RetryPolicy"), _f("iteratorPolicy", "msg", "IteratorPolicy")),
    "CachingOptions": (_f("enableCache", "bool"), _f("cacheKey", "str")),
    "TriggerPolicy": (_f("condition", "str"), _f("strategy", "enum", "TriggerStrategy")),
    "RetryPolicy": (_f("maxRetryCount", "int32"), _f("backoffDuration", "duration"), _f("backoffFactor", "double"),
                    _f("backoffMaxDuration", "duration")),
    "IteratorPolicy": (_f("parallelismLimit", "int32"),),
    "ArtifactIteratorSpec": (_f("items", "msg", "ArtifactItemsSpec"), _f("itemInput", "str")),
    "ArtifactItemsSpec": (_f("inputArtifact", "str"),),
    "ParameterIteratorSpec": (_f("items", "msg", "ParameterItemsSpec"), _f("itemInput", "str")),
    "ParameterItemsSpec": (_f("raw", "str", oneof="kind"), _f("inputParameter", "str", oneof="kind")),
    "ComponentRef": (_f("name", "str"),),
    "PipelineTaskInfo": (_f("name", "str"),),
    "ArtifactTypeSchema": (_f("schemaTitle", "str", oneof="kind"), _f("schemaUri", "str", oneof="kind"),
                           _f("instanceSchema", "str", oneof="kind"), _f("schemaVersion", "str")),
    _VORP: (_f("constantValue", "msg", "Value", oneof="value"), _f("runtimeParameter", "str", oneof="value"),
            _f("constant", "value", oneof="value")),
    "Value": (_f("intValue", "int64", oneof="value"), _f("doubleValue", "double", oneof="value"),
              _f("stringValue", "str", oneof="value")),
    "SinglePlatformSpec": (_f("deploymentSpec", "msg", "PlatformDeploymentConfig"), _f("platform", "str"),
                           _f("config", "struct"), _f("pipelineConfig", "msg", "PipelineConfig", proto="pipelineConfig")),
    "PlatformDeploymentConfig": (_f("executors", "struct", label="map"),),
    "PipelineConfig": (_f("semaphoreKey", "str"), _f("mutexName", "str"), _f("resourceTtl", "int32"),
                       _f("workspace", "msg", "WorkspaceConfig")),
    "WorkspaceConfig": (_f("size", "str"), _f("kubernetes", "msg", "KubernetesWorkspaceConfig")),
    "KubernetesWorkspaceConfig": (_f("pvcSpecPatch", "struct"),),
    "PipelineDeploymentConfig": (_f("executors", "msg", "ExecutorSpec", label="map"),),
    "ExecutorSpec": (_f("container", "msg", "PipelineContainerSpec", oneof="spec"),
                     _f("importer", "msg", "ImporterSpec", oneof="spec"),
                     _f("resolver", "msg", "ResolverSpec", oneof="spec"),
                     _f("customJob", "msg", "AIPlatformCustomJobSpec", oneof="spec")),
    "PipelineContainerSpec": (_f("image", "str"), _f("command", "str", label="rep"), _f("args", "str", label="rep"),
                              _f("lifecycle", "msg", "Lifecycle"), _f("resources", "msg", "ResourceSpec"),
                              _f("env", "msg", "EnvVar", label="rep")),
    "Lifecycle": (_f("preCacheCheck", "msg", "LifecycleExec"),),
    "LifecycleExec": (_f("command", "str", label="rep"), _f("args", "str", label="rep")),
    "ResourceSpec": (_f("cpuLimit", "double"), _f("memoryLimit", "double"), _f("cpuRequest", "double"),
                     _f("memoryRequest", "double"), _f("resourceCpuLimit", "str"), _f("resourceMemoryLimit", "str"),
                     _f("resourceCpuRequest", "str"), _f("resourceMemoryRequest", "str"),
                     _f("accelerator", "msg", "AcceleratorConfig")),
    "AcceleratorConfig": (_f("type", "str"), _f("count", "int64"), _f("resourceType", "str"), _f("resourceCount", "str")),
    "EnvVar": (_f("name", "str"), _f("value", "str")),
    "ImporterSpec": (_f("artifactUri", "msg", _VORP), _f("typeSchema", "msg", "ArtifactTypeSchema"),
                     _f("properties", "msg", _VORP, label="map"), _f("customProperties", "msg", _VORP, label="map"),
                     _f("metadata", "struct"), _f("reimport", "bool")),
    "ResolverSpec": (_f("outputArtifactQueries", "msg", "ArtifactQuerySpec", label="map"),),
    "ArtifactQuerySpec": (_f("filter", "str"), _f("limit", "int32")),
    "AIPlatformCustomJobSpec": (_f("customJob", "struct"),),
    "RuntimeConfig": (_f("parameters", "msg", "Value", label="map"), _f("gcsOutputDirectory", "str"),
                      _f("parameterValues", "value", label="map")),
}
_FIELDS: dict[str, dict[str, tuple]] = {
    msg: {**{f[0]: f for f in fields}, **{f[1]: f for f in fields}} for msg, fields in _SCHEMA.items()
}
# KubernetesExecutorConfig's fields (kubernetes_platform/proto/kubernetes_executor_config.proto).
_K8S_EXEC_FIELDS = frozenset(
    n for f in ("secret_as_volume", "secret_as_env", "pvc_mount", "node_selector", "pod_metadata",
                "image_pull_secret", "image_pull_policy", "config_map_as_volume", "config_map_as_env",
                "active_deadline_seconds", "field_path_as_env", "tolerations", "generic_ephemeral_volume",
                "node_affinity", "pod_affinity", "enabled_shared_memory", "empty_dir_mounts")
    for n in (f, re.sub(r"_([a-z])", lambda m: m.group(1).upper(), f)))


def _proto(msg: str, value: Any, *, discard_unknown: bool = False) -> dict:
    """protojson.Unmarshal then Marshal: the canonical protojson object of `value` as `msg`."""
    if not isinstance(value, Mapping):
        raise _CompileError(f"proto: invalid value for {msg}: {value!r}")
    fields = _FIELDS[msg]
    out: dict[str, Any] = {}
    oneofs: dict[str, str] = {}
    for key, raw in value.items():
        field = fields.get(key)
        if field is None:
            if discard_unknown:
                continue
            raise _CompileError(f"proto: unknown field {_q(str(key))} in ml_pipelines.{msg}")
        name, _, label, kind, typ, oneof = field
        if name in out:
            raise _CompileError(f"proto: duplicate field {_q(name)}")
        if raw is None and not (kind == "value" and not label):
            continue  # null leaves a field unset, except for google.protobuf.Value
        if oneof:
            if oneof in oneofs:
                raise _CompileError(f"proto: error parsing {_q(name)}, oneof ml_pipelines.{msg}.{oneof} is already set")
            oneofs[oneof] = name
        converted = _field(label, kind, typ, raw, name, discard_unknown)
        if converted is _UNSET and not oneof:
            continue
        out[name] = _scalar(kind, typ, raw, name) if converted is _UNSET else converted
    return out


_UNSET = object()


def _field(label: str, kind: str, typ: str | None, raw: Any, name: str, discard: bool) -> Any:
    if label == "rep":
        if not isinstance(raw, list):
            raise _CompileError(f"proto: invalid value for repeated field {_q(name)}: {raw!r}")
        items = [_single(kind, typ, v, name, discard) for v in raw]
        return items or _UNSET
    if label == "map":
        if not isinstance(raw, Mapping):
            raise _CompileError(f"proto: invalid value for map field {_q(name)}: {raw!r}")
        entries = {_map_key(k): (None if v is None and kind == "value" else _single(kind, typ, v, name, discard))
                   for k, v in raw.items()}
        return entries or _UNSET
    single = _single(kind, typ, raw, name, discard)
    if kind in ("msg", "struct", "value", "list", "duration"):
        return single
    return _UNSET if single == _default(kind, typ) else single


def _single(kind: str, typ: str | None, raw: Any, name: str, discard: bool) -> Any:
    if kind == "msg":
        return _proto(typ, raw, discard_unknown=discard)
    if kind == "struct":
        if not isinstance(raw, Mapping):
            raise _CompileError(f"proto: invalid value for google.protobuf.Struct field {_q(name)}: {raw!r}")
        return _json_value(raw)
    if kind == "value":
        return _json_value(raw)
    return _scalar(kind, typ, raw, name)


def _scalar(kind: str, typ: str | None, raw: Any, name: str) -> Any:
    bad = _CompileError(f"proto: invalid value for {kind} field {_q(name)}: {raw!r}")
    if kind == "str":
        if not isinstance(raw, str):
            raise bad
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise bad
        return raw
    if kind in ("int32", "int64"):
        number = _integer(raw, bad)
        return str(number) if kind == "int64" else number
    if kind == "double":
        if isinstance(raw, bool):
            raise bad
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise bad from None
    if kind == "enum":
        names = _ENUMS[typ]
        if isinstance(raw, str) and raw in names:
            return raw
        if isinstance(raw, int) and not isinstance(raw, bool):
            return names[raw] if 0 <= raw < len(names) else raw
        raise bad
    if kind == "duration":
        return _duration(raw, bad)
    raise bad


def _default(kind: str, typ: str | None) -> Any:
    return {"str": "", "bool": False, "int32": 0, "int64": "0", "double": 0.0}.get(kind, _ENUMS.get(typ or "", ("",))[0])


def _integer(raw: Any, bad: Exception) -> int:
    if isinstance(raw, bool):
        raise bad
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, str):
        try:
            return int(raw)
        except ValueError:
            pass
    raise bad


def _duration(raw: Any, bad: Exception) -> str:
    """google.protobuf.Duration as protojson writes it: "3600s", "1.500s"."""
    m = re.fullmatch(r"(-?)(\d+)(?:\.(\d{1,9}))?s", raw) if isinstance(raw, str) else None
    if not m:
        raise bad
    nanos = int((m.group(3) or "").ljust(9, "0"))
    text = m.group(2).lstrip("0") or "0"
    if nanos:
        frac = f"{nanos:09d}"
        while frac.endswith("000"):
            frac = frac[:-3]
        text += "." + frac
    negative = m.group(1) and (int(m.group(2)) or nanos)
    return ("-" if negative else "") + text + "s"


def _map_key(key: Any) -> str:
    # YAML may give non-string keys; Go's yaml-to-JSON writes them as text.
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _json_value(raw: Any) -> Any:
    """A google.protobuf.Value/Struct: any JSON, copied."""
    if raw is None or isinstance(raw, (str, bool)):
        return raw
    if isinstance(raw, (int, float)):
        if isinstance(raw, float) and (math.isnan(raw) or math.isinf(raw)):
            raise _CompileError(f"proto: invalid google.protobuf.Value: {raw}")
        return raw
    if isinstance(raw, Mapping):
        return {_map_key(k): _json_value(v) for k, v in raw.items()}
    if isinstance(raw, (list, tuple)):
        return [_json_value(v) for v in raw]
    raise _CompileError(f"proto: invalid google.protobuf.Value: {raw!r}")


def stably_marshal_json(message: Mapping) -> str:
    """proto.go stablyMarshalJSON of a message already in canonical protojson form."""
    return go_json(message)


# ---------------------------------------------------------------------------------------------
# hashComponentContainer: sha256 of encoding/json of the Go PipelineContainerSpec struct.

def _go_struct(fields: list[tuple[str, str | None]]) -> str:
    return "{" + ",".join(f"{_go_str(k)}:{v}" for k, v in fields if v is not None) + "}"


def _strs(values: list | None) -> str | None:
    return "[" + ",".join(_go_str(v) for v in values) + "]" if values else None


def _nonzero(value: Any, encode) -> str | None:
    return encode(value) if value else None


def _container_struct_json(c: Mapping) -> str:
    lifecycle = None
    if "lifecycle" in c:
        pre = c["lifecycle"].get("preCacheCheck")
        lifecycle = _go_struct([("pre_cache_check", None if pre is None else _go_struct(
            [("command", _strs(pre.get("command"))), ("args", _strs(pre.get("args")))]))])
    resources = None
    if "resources" in c:
        r = c["resources"]
        acc = r.get("accelerator")
        resources = _go_struct(
            [(snake, _nonzero(r.get(camel), _go_float)) for snake, camel in
             (("cpu_limit", "cpuLimit"), ("memory_limit", "memoryLimit"), ("cpu_request", "cpuRequest"),
              ("memory_request", "memoryRequest"))]
            + [(snake, _nonzero(r.get(camel), _go_str)) for snake, camel in
               (("resource_cpu_limit", "resourceCpuLimit"), ("resource_memory_limit", "resourceMemoryLimit"),
                ("resource_cpu_request", "resourceCpuRequest"), ("resource_memory_request", "resourceMemoryRequest"))]
            + [("accelerator", None if acc is None else _go_struct([
                ("type", _nonzero(acc.get("type"), _go_str)),
                ("count", _nonzero(int(acc.get("count", "0")), str)),
                ("resource_type", _nonzero(acc.get("resourceType"), _go_str)),
                ("resource_count", _nonzero(acc.get("resourceCount"), _go_str))]))])
    env = None
    if c.get("env"):
        env = "[" + ",".join(_go_struct([("name", _nonzero(e.get("name"), _go_str)),
                                         ("value", _nonzero(e.get("value"), _go_str))]) for e in c["env"]) + "]"
    return _go_struct([("image", _nonzero(c.get("image"), _go_str)), ("command", _strs(c.get("command"))),
                       ("args", _strs(c.get("args"))), ("lifecycle", lifecycle), ("resources", resources), ("env", env)])
