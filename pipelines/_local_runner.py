"""Child process of pipelines.local.run: runs one pipeline with kfp.local and writes a
JSON result. Not for direct use."""

from __future__ import annotations

import importlib
import json
import signal
import sys
import traceback


def _artifact(a):
    return {"uri": getattr(a, "uri", None), "path": getattr(a, "path", None), "metadata": dict(getattr(a, "metadata", {}) or {}),
            "type": type(a).__name__}


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return _artifact(value)


def task_outputs(root: str) -> dict:
    """Each task's executor output (parameters and artifacts), by task name."""
    from pathlib import Path

    out = {}
    for f in sorted(Path(root).glob("**/executor_output.json")):
        try:
            out[f.parent.name] = json.loads(f.read_text())
        except ValueError:
            continue
    return out


def _interrupt(signum, frame):
    """A cancelled local run: unwind, so kfp.local stops its running task."""
    raise KeyboardInterrupt


def main() -> int:
    spec = json.loads(sys.argv[1])
    signal.signal(signal.SIGTERM, _interrupt)
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=spec["pipeline_root"],
               raise_on_error=True)
    target = spec["target"]
    if target.endswith((".yaml", ".yml")):
        from kfp import components

        pipeline = components.load_component_from_file(target)
    else:
        module, attr = target.split(":")
        pipeline = getattr(importlib.import_module(module), attr)
    result = {"status": "FAILURE"}
    try:
        task = pipeline(**spec["arguments"])
        outputs = getattr(task, "outputs", {}) or {}
        result = {"status": "SUCCESS", "outputs": _plain(dict(outputs))}
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        result = {"status": "FAILURE", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    result["tasks"] = task_outputs(spec["pipeline_root"])
    with open(spec["result"], "w") as fh:
        json.dump(result, fh)
    return 0 if result["status"] == "SUCCESS" else 1


if __name__ == "__main__":
    sys.exit(main())
