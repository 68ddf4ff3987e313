"""kfp-ray KFP components: one folder each, thin typed wrappers over the runtime library
(runtime/kfp_ray), which travels inside every compiled component.

    from kfp_ray.components import provision_ray_cluster, submit_ray_job

Each name is the component (built when first asked for, with the build options below), the
function of its folder's component.py.
"""

import importlib
import sys
import types
from pathlib import Path

NAMES = tuple(sorted(p.parent.name for p in Path(__file__).resolve().parent.glob("*/component.py")))
__all__ = list(NAMES)


def _component(name: str):
    """The component `name` of its folder's component.py (imported, so built, on first use)."""
    return getattr(importlib.import_module(f"{__name__}.{name}.component"), name)


def __getattr__(name: str):
    if name in NAMES:
        return _component(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Components(types.ModuleType):
    """Importing NAME.component binds the folder's package to NAME here (the import system
    sets a parent's attribute to its subpackage); the name still gives the component."""

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if name in NAMES and isinstance(value, types.ModuleType):
            return _component(name)
        return value


sys.modules[__name__].__class__ = _Components


# How the components are built, read from the environment when a component module is imported
# (components._build). `kfp-ray compile` sets them from its options.
# 1: every task runs where the components' packages and the KFP SDK are installed (kfp.local runs
# of Python pipelines, pipelines/local.py): no pip installs, which there would only check.
PREINSTALLED_ENV = "KFP_RAY_PREINSTALLED"
# An image with them (built from Containerfile): every task runs in it, with no pip installs.
IMAGE_ENV = "KFP_RAY_COMPONENT_IMAGE"
# The pip path from this index instead of PyPI (a disconnected cluster's mirror), and the one
# host pip may reach without TLS verification.
PIP_INDEX_URL_ENV = "KFP_RAY_PIP_INDEX_URL"
PIP_TRUSTED_HOST_ENV = "KFP_RAY_PIP_TRUSTED_HOST"
