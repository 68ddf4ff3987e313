"""How every kfp-ray component is built: base image, packages, and the runtime library
embedded reproducibly (same source, same bytes; components/_slim.py)."""

from __future__ import annotations

import importlib.util
import itertools
import os
from pathlib import Path

from kfp import dsl

from kfp_ray.components import IMAGE_ENV, PIP_INDEX_URL_ENV, PIP_TRUSTED_HOST_ENV, PREINSTALLED_ENV, _slim

# The one place the base image is named (the Containerfile's ARG must agree: a test checks).
# A fixed tag, so the same YAML runs the same code. To bump: pick a newer tag (`skopeo
# list-tags docker://registry.access.redhat.com/ubi9/python-311`), set it here and in the
# Containerfile, run `kfp-ray compile`, and commit compiled/ with it.
BASE_IMAGE = "registry.access.redhat.com/ubi9/python-311:9.6-1756977307"
# What each kind of task installs on the pip path (pinned like pyproject.toml): only what its
# runtime code imports (benchmarks/pip_path.py measures each). Provision builds the manifest
# with the CodeFlare SDK, whose import alone loads ray, pyarrow and pandas: no cut there.
KUBE = ["kubernetes==30.1.0"]
CODEFLARE = ["codeflare-sdk==0.34.0", "kubernetes==30.1.0"]
SUBMIT = ["requests>=2.31,<3", "boto3>=1.34,<2"]  # the dashboard's job API; s3:// working_dir
# the job API; delete and lease the cluster; boto3 for an s3:// working_dir, as follow may submit
FOLLOW = ["requests>=2.31,<3", "kubernetes==30.1.0", "boto3>=1.34,<2"]
# A Ray client must have the cluster's Ray (and Python minor) version: the Ray image's, 2.52.1
# on Python 3.11 (quay.io/modh/ray:2.52.1-py311-cu121), as BASE_IMAGE is. `train`: a driver
# that runs Ray Train (pyarrow for storage_path); cryptography for the mTLS certificate.
DRIVER = ["ray[client,train]==2.52.1", "kubernetes==30.1.0", "requests>=2.31,<3", "boto3>=1.34,<2",
          "cryptography>=42"]
# run_ray_job builds the RayJob's cluster with the CodeFlare SDK, follows the job through the
# dashboard, and may fetch an s3:// working_dir
RAYJOB = CODEFLARE + ["requests>=2.31,<3", "boto3>=1.34,<2"]
S3 = ["boto3>=1.34,<2"]
DATA = ["boto3>=1.34,<2", "numpy>=1.26", "scikit-learn==1.9.1"]
KINDS = {"KUBE": KUBE, "CODEFLARE": CODEFLARE, "SUBMIT": SUBMIT, "FOLLOW": FOLLOW, "DRIVER": DRIVER, "S3": S3, "DATA": DATA,
         "RAYJOB": RAYJOB}


def build_options(packages: list[str]) -> dict:
    """`dsl.component` options for a component that needs `packages`, as the environment asks
    (see components/__init__.py): the pip path by default, from a mirror if one is given; no
    pip installs with an image that has everything, or where everything is installed."""
    image = os.environ.get(IMAGE_ENV, "")
    if image or os.environ.get(PREINSTALLED_ENV) == "1":
        return {"base_image": image or BASE_IMAGE, "packages_to_install": [], "install_kfp_package": False}
    options = {"base_image": BASE_IMAGE, "packages_to_install": list(packages)}
    index = os.environ.get(PIP_INDEX_URL_ENV, "")
    if index:
        # only the host asked for is trusted (kfp would otherwise trust the whole index URL)
        host = os.environ.get(PIP_TRUSTED_HOST_ENV, "")
        options |= {"pip_index_urls": [index], "pip_trusted_hosts": [host] if host else []}
    return options


def ray_component(packages: list[str], code_dir: str | Path | None = None, code_files=None, strip_code: bool = False):
    """`@dsl.component` for kfp-ray: caching is set per task in pipelines (off for tasks
    with side effects). The task carries the runtime library its function needs
    (components/_slim.py), and `code_dir`, if given, beside it as `code/` (only `code_files`,
    paths relative to it, when given: a pipeline carries its own job, not its siblings'; with
    `strip_code`, its Python without comments and docstrings, _slim.strip_job). Built with an
    image (IMAGE_ENV), it carries no runtime: kfp_ray is the image's (Containerfile)."""

    def wrap(func):
        component = dsl.component(func, **build_options(packages))
        runtime = {} if os.environ.get(IMAGE_ENV) else _slim.runtime_files(func, runtime_dir())
        if runtime or code_dir is not None:
            _embed(component, func, _slim.pack(runtime, code_dir, code_files, strip_code))
        return component

    return wrap


def runtime_dir() -> Path:
    """The folder of the runtime library (the kfp_ray package), found without importing it."""
    spec = importlib.util.find_spec("kfp_ray")
    return Path(next(iter(spec.submodule_search_locations)))


def _embed(component, func, payload: str) -> None:
    """Put the loader of `payload` in the task's program, just before the function (kfp's
    lightweight command: [..., 'sh', '-ec', <script>, <program>]), whose docstring and
    comments go (the component's description keeps the docstring), indented by one space
    and compacted (_slim.compact)."""
    command = component.component_spec.implementation.container.command
    program = command[-1]
    lines = _slim.function_source(func).split("\n")
    func_source = "\n".join(itertools.dropwhile(lambda line: not line.startswith("def"), lines))  # as kfp has it
    if program.count(func_source) != 1:
        raise RuntimeError(f"{func.__name__}: kfp's command no longer ends with the function's source; "
                           "components/_build.py must learn the new layout")
    # compact: kfp's preamble and the loader come first, so the program's line numbers are
    # not the source file's anyway
    body = _slim.compact(_slim.reindent(_slim.strip(func_source, minify=False)))
    command[-1] = program.replace(func_source, _slim.loader(payload) + "\n\n" + body)
