"""Installs a job's runtime_env pip requirements once per sandbox Ray image, not once per node,
where the sandbox's owner opts into that (SHARED_ENV=1: the test suite does); else each node
installs its own, as on RHOAI.

Ray's pip plugin (ray 2.52.1, ray/_private/runtime_env/pip.py) builds one virtualenv per
pip spec per node, under the node's session dir (`runtime_resources/pip/<hash>`), keeps it
while the node lives (its URI cache), and passes pip `--no-cache-dir`. On RHOAI every pod is a
node, so every Ray pod of every cluster installs a job's requirements again. Here every sandbox
node is a process on one 2-core machine: installing torch on each node of each test's cluster
costs minutes, so the sandbox shares the result the way Ray's cache would if all nodes were one.

This module is copied into the sandbox's Ray image (rayimage.py) and imported from a .pth there,
so it runs in each node's runtime-env agent. When Ray imports its pip plugin, PipProcessor._run
is wrapped: under a file lock per spec hash, the first node to need a spec builds the
virtualenv with Ray's own code (its virtualenv clone, its `pip install -r`, its checks) in a
directory of the image (`pip-envs/<hash>`), marks it complete, and every node, that one too,
points its own `runtime_resources/pip/<hash>` at it with a symlink. A spec that failed to
install is not kept (Ray removes it) and fails on every node as it would there. A job that
forgets a requirement still fails: nothing is installed that its runtime_env does not ask for.

Self-contained (the image has neither kfp_ray nor kfp_ray_sandbox on its path).
"""

from __future__ import annotations

import fcntl
import importlib.abc
import importlib.util
import os
import shutil
import sys
from pathlib import Path

TARGET = "ray._private.runtime_env.pip"
COMPLETE = ".kfp-ray-sandbox-complete"
CACHE_ENV = "KFP_RAY_SANDBOX_PIP_ENVS"  # another folder for the shared environments (tests)
# "1" in a Ray node's environment: it shares the environments; else it installs its own (RHOAI's cost)
SHARED_ENV = "KFP_RAY_SANDBOX_SHARED_PIP"


def install(cache_dir: str) -> None:
    """Wrap Ray's pip plugin when (if ever) this process imports it."""
    if not any(isinstance(f, _PostImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImport(cache_dir))


class _PostImport(importlib.abc.MetaPathFinder):
    def __init__(self, cache_dir: str):
        self.cache_dir = cache_dir

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # find the real module, then patch it once it has run
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            _patch(module, self.cache_dir)

        spec.loader.exec_module = exec_module
        return spec


def _patch(pip_module, cache_dir: str) -> None:
    processor = getattr(pip_module, "PipProcessor", None)
    original = getattr(processor, "_run", None)
    if original is None or getattr(original, "kfp_ray_sandbox", False):
        return  # a Ray whose plugin differs from 2.52's: leave it as it is

    async def _run(self):
        import asyncio

        if os.environ.get(SHARED_ENV) != "1":
            return await original(self)  # each node its own install, as on RHOAI
        target = Path(self._target_dir)
        shared = Path(os.environ.get(CACHE_ENV) or cache_dir) / target.name
        loop = asyncio.get_running_loop()
        lock = await loop.run_in_executor(None, _lock, shared)  # another node may be building it
        try:
            if (shared / COMPLETE).exists():
                self._logger.info("kfp-ray sandbox: %s was installed by an earlier Ray node; reusing it", shared)
            else:
                shutil.rmtree(shared, ignore_errors=True)  # a build that was killed half-way
                self._target_dir = str(shared)
                try:
                    await original(self)  # Ray's own install; on failure it removes `shared` and raises
                finally:
                    self._target_dir = str(target)
                (shared / COMPLETE).touch()
            if target.is_symlink():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(shared, target_is_directory=True)
        finally:
            os.close(lock)

    _run.kfp_ray_sandbox = True
    processor._run = _run


def _lock(shared: Path) -> int:
    """An exclusive lock on the spec's build; the kernel drops it if its holder dies."""
    shared.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{shared}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd
