"""The pipelines and components kfp-ray ships: name -> (import path, compiled file)."""

from __future__ import annotations

import importlib
from pathlib import Path

from kfp_ray.components import NAMES

ROOT = Path(__file__).resolve().parent.parent
COMPILED = ROOT / "compiled"
PIPELINES = {
    "ray_training": "kfp_ray.pipelines.ray_training.pipeline:ray_training",
    "fashion_mnist": "kfp_ray.pipelines.fashion_mnist.pipeline:fashion_mnist",
    "xgboost_tune": "kfp_ray.pipelines.xgboost_tune.pipeline:xgboost_tune",
    "interactive_train": "kfp_ray.pipelines.interactive_train.pipeline:interactive_train",
    "kfp_ray_gc": "kfp_ray.pipelines.kfp_ray_gc.pipeline:kfp_ray_gc",
}


def load(name: str):
    module, attr = PIPELINES[name].split(":")
    return getattr(importlib.import_module(module), attr)


def description(name: str) -> str:
    """The pipeline's description (its docstring, as the UI shows it): read from compiled/,
    which `compile --check` keeps fresh, rather than by building the pipeline (kfp's DSL
    costs seconds of CPU per pipeline); built where compiled/ is absent."""
    path = compiled_path(name)
    if path.is_file():
        from .package import read  # package imports this module

        return read(path, "compiled/")["pipelineInfo"].get("description", "")
    return load(name).pipeline_spec.pipeline_info.description


def compiled_path(name: str) -> Path:
    return COMPILED / f"{name}.yaml"


# Each component also compiled alone (compiled/components/<name>.yaml), for
# kfp.components.load_component_from_file and Elyra's component catalog: every folder of
# components/ with a component.py, whose component function is named after the folder.
COMPONENTS = NAMES


def load_component(name: str):
    import kfp_ray.components

    return getattr(kfp_ray.components, name)  # its __getattr__ builds it


def compiled_component_path(name: str) -> Path:
    return COMPILED / "components" / f"{name}.yaml"
