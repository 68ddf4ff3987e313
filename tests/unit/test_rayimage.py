"""The sandbox's Ray image is RHOAI's in what it lacks: Ray is there, the training libraries
and boto3 are not (jobs get them through runtime_env pip)."""

from __future__ import annotations

import subprocess

from kfp_ray_sandbox import rayimage
from kfp_ray_sandbox.raynode import ray_env


def imports(python: str, module: str) -> bool:
    """Whether `module` imports in the image, with the environment the sandbox's Ray nodes get."""
    done = subprocess.run([python, "-c", f"import {module}"], env=ray_env(), capture_output=True, timeout=120)
    return done.returncode == 0


def test_the_image_has_ray_but_not_what_the_rhoai_image_lacks():
    python = rayimage.python()
    assert imports(python, "ray") and imports(python, "numpy")
    assert [m for m in ("torch", "xgboost", "sklearn", "boto3", "kfp_ray") if imports(python, m)] == []
    assert rayimage.python() == python  # built once, then reused
