"""The sandbox's KFP launcher: what runs first in every pipeline task's pod, as KFP's
launcher-v2 does on Argo (backend/src/v2/component/launcher_v2.go, KFP 2.17), then the
task's own command.

The engine (workflow.py, the driver's part) resolves the executor input and the command's
placeholders. The pod's command line is the real launcher's (`--executor_input <JSON>
--component_spec <JSON> ... -- <the component's command and args as compiled>`), so each of
those strings meets the kernel's per-argument limit here as there; the resolved command comes
in the environment, one element per variable. This process, inside the pod, then:
1. gives the pod its image: a fresh writable layer (a venv) over the image's packages, so the
   command's `pip install` lands in this pod alone, as in a container's own filesystem. A
   plain Python base image is clean: the interpreter and pip, whose only index is the
   sandbox's (wheelhouse.py), so the task has only what its `pip install` brings. The first
   pod of an install script that succeeds leaves its install for the next ones (keep_installs),
   whose pip then finds it satisfied;
2. downloads the input artifacts from the pipeline root to /s3/<bucket>/<key> (KFP's local
   path for s3:// URIs);
3. runs the command, passing SIGTERM on to its process group (a terminated or deleted run),
   with its stdout and stderr as the pod's log;
4. on success, uploads the output artifacts and the executor output (the output parameter
   files of /tmp/kfp/outputs merged into /tmp/kfp_outputs/output_metadata.json, as the real
   launcher collects them) to the pipeline root: executor_output.json there stands in for
   MLMD, where the real launcher records them.

It is the sandbox's program (the real launcher is a Go binary copied into the pod), so it
runs with the sandbox's Python and its boto3, not the task image's. Its object-store keys come
from the DSPA's storage secret (env KFP_LAUNCHER_S3_*), and the task's command never sees them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

S3_KEYS = ("KFP_LAUNCHER_S3_ACCESS_KEY", "KFP_LAUNCHER_S3_SECRET_KEY", "KFP_LAUNCHER_S3_ENDPOINT")
RESOLVED_ARG_ENV = "KFP_LAUNCHER_ARG_"  # workflow.py's: the resolved command, one element each
OUTPUT_METADATA = "/tmp/kfp_outputs/output_metadata.json"


def local_path(uri: str) -> Path:
    """KFP's container path for an artifact URI (kfp dsl/types/artifact_types.py)."""
    for scheme, root in (("s3://", "/s3/"), ("minio://", "/minio/"), ("gs://", "/gcs/")):
        if uri.startswith(scheme):
            return Path(root + uri[len(scheme):])
    raise ValueError(f"unsupported artifact URI {uri!r}: the sandbox's pipeline root is s3://")


def split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


IMAGE_PTH = "kfp_ray_sandbox_task_image.pth"


@dataclass
class Layer:
    """The container's writable layer: a venv of the image's interpreter whose site-packages
    sees the image's packages. `env`: what the image's configuration adds to the command's."""
    root: Path
    site: Path
    env: dict
    cached: Path | None = None  # the clean install this layer starts from (install_cache)
    key: str = ""

    @property
    def bin(self) -> str:
        return str(self.root / "bin")

    def environ(self, base: dict) -> dict:
        """`base` (the pod's environment) with what the image adds, its bin first on PATH."""
        return {**base, **self.env, "PATH": self.bin + os.pathsep + base.get("PATH", "")}


def make_layer(image: dict, command: list[str], into: Path | None = None) -> Layer:
    """The pod's writable layer, in its TMPDIR (or `into`)."""
    layer = (into or Path(os.environ.get("TMPDIR", "/tmp"))) / "image-layer"
    subprocess.run([image["python"], "-m", "venv", "--without-pip", str(layer)], check=True)
    site = next((layer / "lib").glob("python*/site-packages"))
    paths, env, cached, key = [image["packages"]], {}, None, ""
    if image.get("pip_index"):
        # a clean image: pip reads only the image's configuration, which names the sandbox's index
        conf = layer / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {image['pip_index']}\nextra-index-url =\nfind-links =\n"
                        "constraint =\nno-cache-dir = true\n")
        env["PIP_CONFIG_FILE"] = str(conf)
        key = install_key(image, command)
        if key and (Path(image["installs"]) / key).is_dir():
            cached = Path(image["installs"]) / key
            paths.append(str(cached))
    (site / IMAGE_PTH).write_text("".join(f"{p}\n" for p in paths))
    pip = layer / "bin" / "pip"  # the image has pip as a module: the command's `command -v pip` finds it
    pip.write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n')
    pip.chmod(0o755)
    return Layer(layer, site, env, cached, key)


def install_key(image: dict, command: list[str]) -> str:
    """What a clean layer's installs depend on: the index's content and the command's install
    script (KFP's `sh -c` preamble, up to the program it then runs); "" when it installs nothing."""
    if command[:2] != ["sh", "-c"] or len(command) < 3 or "pip install" not in command[2]:
        return ""
    script = command[2].split('"$0" "$@"', 1)[0]
    return hashlib.sha256(f"{image['wheelhouse']}\n{image['python']}\n{script}".encode()).hexdigest()[:24]


def keep_installs(image: dict, layer: Layer) -> None:
    """After a task whose install ran (no cached install): keep what pip put in the layer, so
    the next pod with the same install script starts from it and its pip finds it satisfied
    (a node's image cache, for the install a clean pod pays). Renamed into place: a pod that
    finished first with the same key wins."""
    if not layer.key or layer.cached is not None:
        return
    (layer.site / IMAGE_PTH).unlink(missing_ok=True)
    if not any(layer.site.glob("*.dist-info")):
        return
    installs = Path(image["installs"])
    installs.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(layer.site, installs / layer.key)
    except OSError:  # another pod kept it first (or another filesystem: then it is left)
        pass


def download_inputs(s3, executor_input: dict) -> None:
    for group in (executor_input.get("inputs") or {}).get("artifacts", {}).values():
        for art in group.get("artifacts") or []:
            uri = art.get("uri") or ""
            if not uri:
                continue
            bucket, key = split(uri)
            dest = local_path(uri)
            objects = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
                       for o in page.get("Contents", [])]
            for obj in objects:
                if obj == key:
                    target = dest
                elif obj.startswith(key.rstrip("/") + "/"):
                    target = dest / obj[len(key.rstrip("/")) + 1:]
                else:
                    continue  # a sibling that only shares the prefix
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, obj, str(target))


def prepare_outputs(executor_input: dict) -> None:
    outputs = executor_input.get("outputs") or {}
    for p in (outputs.get("parameters") or {}).values():
        Path(p["outputFile"]).parent.mkdir(parents=True, exist_ok=True)
    for group in (outputs.get("artifacts") or {}).values():
        for art in group.get("artifacts") or []:
            local_path(art["uri"]).parent.mkdir(parents=True, exist_ok=True)
    Path(outputs.get("outputFile") or OUTPUT_METADATA).parent.mkdir(parents=True, exist_ok=True)


def parameter_value(text: str, kind: str):
    """An output parameter file's content as its type (launcher_v2 collectOutputParameters)."""
    if kind == "STRING":
        return text
    if kind in ("NUMBER_INTEGER", "NUMBER_DOUBLE"):
        return float(text)
    if kind == "BOOLEAN":
        return text.strip().lower() == "true"
    return json.loads(text)


def collect_outputs(executor_input: dict, types: dict[str, str]) -> dict:
    outputs = executor_input.get("outputs") or {}
    path = Path(outputs.get("outputFile") or OUTPUT_METADATA)
    result = json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}
    values = result.setdefault("parameterValues", {})
    for name, p in (outputs.get("parameters") or {}).items():
        f = Path(p["outputFile"])
        if name not in values and f.exists():
            values[name] = parameter_value(f.read_text(), types.get(name, "STRING"))
    # artifacts: the executor's output metadata if it wrote some, else the input's declaration
    declared = outputs.get("artifacts") or {}
    arts = result.setdefault("artifacts", {})
    for name, group in declared.items():
        if name not in arts:
            arts[name] = group
    return result


def upload_outputs(s3, result: dict) -> None:
    for group in result.get("artifacts", {}).values():
        for art in group.get("artifacts") or []:
            src = local_path(art["uri"])
            bucket, key = split(art["uri"])
            if src.is_file():
                s3.upload_file(str(src), bucket, key)
            elif src.is_dir():
                for f in sorted(p for p in src.rglob("*") if p.is_file()):
                    s3.upload_file(str(f), bucket, f"{key.rstrip('/')}/{f.relative_to(src).as_posix()}")


def _adopt_orphans() -> None:
    """Be the command's subreaper: a process whose parent exits (the executor, once `sh -c`
    is gone) is re-parented here rather than to init, so it stays the container's process,
    which the kubelet's SIGKILL at the end of the grace period reaches."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _wait_orphans() -> None:
    """A container ends when all its processes have: wait for the adopted ones."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _signal_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def parse_argv(argv: list[str]) -> dict[str, str]:
    """The launcher's flags (`--name value`, or `--name` alone) up to `--`; what follows is the
    component's command as compiled, which the engine has resolved (RESOLVED_ARG_ENV)."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        name = argv[i].lstrip("-")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            flags[name], i = argv[i + 1], i + 2
        else:
            flags[name], i = "true", i + 1
    return flags


def resolved_command() -> list[str]:
    out, i = [], 0
    while f"{RESOLVED_ARG_ENV}{i}" in os.environ:
        out.append(os.environ.pop(f"{RESOLVED_ARG_ENV}{i}"))
        i += 1
    return out


def main() -> int:
    flags = parse_argv(sys.argv[1:])
    spec = json.loads(os.environ.pop("KFP_LAUNCHER_SPEC"))
    command = resolved_command()
    creds = {k: os.environ.pop(k, "") for k in S3_KEYS}
    import boto3  # the sandbox's own (the launcher is not the task image's program)
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=creds["KFP_LAUNCHER_S3_ENDPOINT"], aws_access_key_id=creds["KFP_LAUNCHER_S3_ACCESS_KEY"],
                      aws_secret_access_key=creds["KFP_LAUNCHER_S3_SECRET_KEY"], region_name="us-east-1",
                      config=Config(connect_timeout=10, read_timeout=60, retries={"max_attempts": 5, "mode": "standard"}))
    executor_input = json.loads(flags["executor_input"])
    layer = make_layer(spec["image"], command)
    env = layer.environ(dict(os.environ))
    download_inputs(s3, executor_input)
    prepare_outputs(executor_input)
    sys.stdout.flush()
    # its own process group, and SIGTERM to all of it, as Argo's emissary (the real pod's first
    # process) forwards signals: the command's `sh -c` would not pass it on to the executor
    _adopt_orphans()
    child = subprocess.Popen(command, env=env, process_group=0)
    signal.signal(signal.SIGTERM, lambda *_: _signal_group(child.pid))
    code = child.wait()
    _wait_orphans()
    if code != 0:
        return code
    keep_installs(spec["image"], layer)
    result = collect_outputs(executor_input, spec.get("output_parameter_types") or {})
    upload_outputs(s3, result)
    bucket, key = split(spec["task_root"])
    s3.put_object(Bucket=bucket, Key=f"{key.rstrip('/')}/executor_output.json", Body=json.dumps(result).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
