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
