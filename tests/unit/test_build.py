"""Components embed the runtime library they need reproducibly: same source, same bytes."""

from __future__ import annotations

import os

import pytest
import yaml
from kfp import compiler

from kfp_ray.components._build import runtime_dir

COMPONENTS = [
    ("kfp_ray.components.provision_ray_cluster.component", "provision_ray_cluster"),
    ("kfp_ray.components.submit_ray_job.component", "submit_ray_job"),
    ("kfp_ray.components.follow_ray_job.component", "follow_ray_job"),
    ("kfp_ray.components.teardown_ray_cluster.component", "teardown_ray_cluster"),
]


def compile_to_text(module, attr, path):
    import importlib

    compiler.Compiler().compile(getattr(importlib.import_module(module), attr), str(path))
    return path.read_bytes()


@pytest.mark.parametrize("module,attr", COMPONENTS, ids=[c[1] for c in COMPONENTS])
def test_compiling_twice_gives_identical_bytes_with_the_runtime_inside(module, attr, tmp_path):
    import importlib
    import sys

    first = compile_to_text(module, attr, tmp_path / "a.yaml")
    # Touch the runtime (new mtimes, a stray cache) and rebuild the component from scratch.
    for f in runtime_dir().glob("*.py"):
        os.utime(f)
    sys.modules.pop(module, None)
    importlib.import_module(module)
    second = compile_to_text(module, attr, tmp_path / "b.yaml")
    assert first == second
    from kfp_ray.components import _slim

    program = yaml.safe_load(first)["deploymentSpec"]["executors"].popitem()[1]["container"]["command"][-1]
    names = _slim.unpack(_slim.payload_of(program))
    assert "kfp_ray/__init__.py" in names and "kfp_ray/tasks.py" in names and "kfp_ray/errors.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith(("kfp_ray/components", "kfp_ray/pipelines"))]


def test_preinstalled_components_run_no_pip_and_the_default_installs_the_pinned_packages(tmp_path, monkeypatch):
    """kfp.local runs of Python pipelines build components with PREINSTALLED_ENV=1: the task's
    command has no pip install (the isolated env has every package); without it, the task
    installs the KFP SDK and its pinned packages, as on a cluster."""
    import importlib
    import sys

    import yaml

    from kfp_ray.components import PREINSTALLED_ENV

    module, attr = COMPONENTS[0]

    def command(env_value):
        if env_value is None:
            monkeypatch.delenv(PREINSTALLED_ENV, raising=False)
        else:
            monkeypatch.setenv(PREINSTALLED_ENV, env_value)
        sys.modules.pop(module, None)
        text = compile_to_text(module, attr, tmp_path / f"{env_value}.yaml")
        spec = yaml.safe_load(text)
        (executor,) = spec["deploymentSpec"]["executors"].values()
        return " ".join(executor["container"]["command"])

    try:
        assert "pip install" not in command("1")
        default = command(None)
        assert "'kfp==2.17.0'" in default and "'codeflare-sdk==0.34.0'" in default
    finally:
        monkeypatch.delenv(PREINSTALLED_ENV, raising=False)
        sys.modules.pop(module, None)
        importlib.import_module(module)
