"""Compiled YAML for older Data Science Pipelines servers (`compile --rhoai VERSION`).

kfp-kubernetes 2.17 writes `optional` on every secretAsEnv entry. Upstream KFP backends before
2.15 refuse the whole run ('unknown field "optional" in kfp_kubernetes.SecretAsEnv',
kubeflow/pipelines#12495; RHOAI 3.x's 2.14.3 carries the fix, #12216); RHOAI 2.x's 2.5.0 takes
the run but ignores `optional` (its driver discards the field: a data connection without
AWS_DEFAULT_REGION then fails the task's pod) and that executor's pod metadata (its Argo
compiler's parse fails quietly; red-hat-data-services/data-science-pipelines rhoai-2.25,
backend/src/v2/compiler/argocompiler/container.go): as compiled, the YAML needs RHOAI 3.0 or newer. For an older
server this rewrites the compiled YAML: the `optional` keys go (and with them the optional
AWS_DEFAULT_REGION entries: the tasks default to us-east-1), and where the server ignores a
secret name taken from a pipeline parameter (RHOAI 2.19: secretNameParameter is read from
KFP 2.5 / RHOAI 2.20, kubeflow/pipelines#11770), the data connection's name is fixed at
compile time. docs/rhoai-versions.md has the table and its sources.
"""

from __future__ import annotations

import re
from pathlib import Path

# (RHOAI version, what the YAML needs there) - docs/rhoai-versions.md
OLDEST = (2, 19)  # placeholders resolved (#11599) and ExitHandler as an exit hook (#11470)
PARAM_SECRET_NAMES = (2, 20)  # the driver reads secretNameParameter
OPTIONAL_SECRETS = (3, 0)  # SecretAsEnv.optional accepted


def parse_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text or "")
    if not m:
        raise ValueError(f"--rhoai {text!r} is not a version; write e.g. 2.22")
    return int(m.group(1)), int(m.group(2))


def needs(rhoai: tuple[int, int], data_connection: str) -> list[str]:
    """What a server of that RHOAI version needs done, or a ValueError naming the fix."""
    if rhoai < OLDEST:
        raise ValueError(f"RHOAI {rhoai[0]}.{rhoai[1]} runs KFP 2.2: it leaves the run-id placeholders unresolved "
                         "and runs the exit handler as an ordinary task. Upgrade to RHOAI 2.19 or newer")
    todo = []
    if rhoai < OPTIONAL_SECRETS:
        todo.append("strip-optional")
    if rhoai < PARAM_SECRET_NAMES and not data_connection:
        raise ValueError(f"RHOAI {rhoai[0]}.{rhoai[1]} ignores secret names taken from pipeline parameters: "
                         "give --data-connection NAME (the data connection's secret, e.g. aws-connection-minio)")
    if data_connection:
        todo.append("fix-secret-name")
    return todo


def rewrite(text: str, todo: list[str], data_connection: str = "") -> str:
    """The compiled YAML (pipeline spec, then platform spec), rewritten as `todo` says."""
    import yaml

    docs = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    for doc in docs:
        _walk(doc, todo, data_connection)
    if "fix-secret-name" in todo:
        inputs = ((docs[0].get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
        if "data_connection" in inputs:
            inputs["data_connection"]["defaultValue"] = data_connection
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    note = f"# Rewritten for older Data Science Pipelines servers: {', '.join(todo)} (pipelines/compat.py)\n"
    body = "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)
    return header + note + body


def _walk(node, todo, data_connection) -> None:
    if isinstance(node, dict):
        entries = node.get("secretAsEnv")
        if isinstance(entries, list):
            if "strip-optional" in todo:
                entries[:] = [e for e in entries if not e.get("optional")]
                for e in entries:
                    e.pop("optional", None)
            if "fix-secret-name" in todo:
                for e in entries:
                    e["secretName"] = data_connection
                    e["secretNameParameter"] = {"runtimeValue": {"constant": data_connection}}
        for v in node.values():
            _walk(v, todo, data_connection)
    elif isinstance(node, list):
        for v in node:
            _walk(v, todo, data_connection)


def rewrite_dir(out: Path, todo: list[str], data_connection: str) -> list[Path]:
    """Rewrite every compiled YAML under out as `todo` (from needs()) says."""
    # Elyra's catalog entries (v1 component format) hold no platform spec: nothing to rewrite
    paths = sorted(p for p in out.glob("**/*.yaml") if "elyra" not in p.relative_to(out).parts)
    for path in paths if todo else []:
        path.write_text(rewrite(path.read_text(), todo, data_connection))
    return paths
