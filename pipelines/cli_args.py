"""What every command checks of its arguments before it sends anything: the pipeline's name,
its --param values against the compiled pipeline's inputs, a recurring run's cron."""

from __future__ import annotations

import json

from . import registry


class UsageError(Exception):
    """Bad arguments: said in one line (exit code 2) before anything is sent."""


def pipeline_inputs(name: str) -> dict[str, dict]:
    """The shipped pipeline's parameters (package.Package.inputs()), read from compiled/NAME.yaml:
    what `run --local` sends (building the pipeline in Python would take seconds)."""
    from .package import Package, read

    need_pipeline(name)
    path = registry.compiled_path(name)
    return Package(name, path, read(path, "compiled/")).inputs()


def parse_params(name: str, pairs: list[str], inputs: dict[str, dict] | None = None) -> dict:
    """--param values typed by the pipeline's parameters: `inputs` (package.Package.inputs(),
    the file to be sent), else those of the shipped pipeline `name`."""
    inputs = pipeline_inputs(name) if inputs is None else inputs
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--param {pair!r}: write it as key=value")
        key, value = pair.split("=", 1)
        if key not in inputs:
            raise UsageError(f"--param {key}: {name} has no such parameter; it has: {', '.join(sorted(inputs))}")
        kind = inputs[key]["kind"]
        try:
            if kind == "int":
                out[key] = int(value)
            elif kind == "float":
                out[key] = float(value)
            elif kind == "bool":
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1", "yes")
            elif kind in ("list", "dict"):
                out[key] = json.loads(value)
                if not isinstance(out[key], list if kind == "list" else dict):
                    raise ValueError(value)
            else:
                out[key] = value
        except ValueError:
            raise UsageError(f"--param {key}={value!r}: expected {kind}"
                             + (" as JSON" if kind in ("list", "dict") else "")) from None
    missing = [k for k, v in inputs.items() if "default" not in v and k not in out]
    if missing:
        raise UsageError(f"{name} needs --param for: {', '.join(missing)}")
    return out


def need_pipeline(name: str) -> None:
    if name not in registry.PIPELINES:
        raise UsageError(f"unknown pipeline {name!r}; known: {', '.join(registry.PIPELINES)}")


def cron_fields(cron: str) -> str:
    """KFP recurring runs take 6 cron fields (seconds first); a 5-field cron is misread."""
    fields = cron.split()
    if len(fields) != 6:
        raise UsageError(f"--cron {cron!r} has {len(fields)} fields; KFP needs 6, seconds first "
                         f"(e.g. '0 {' '.join(fields)}' for the 5-field '{cron}')")
    return cron
