"""Running pipelines with kfp.local on this machine, isolated from the project's env.

kfp.local's SubprocessRunner(use_venv=False) runs tasks with the interpreter that runs
kfp.local and pip-installs each task's packages into it. So kfp.local runs in its own
virtualenv (.venv-kfp-local) that sees the project's packages through a .pth file: the
pinned packages are found installed (nothing is downloaded), and anything a task would
install lands there, never in the project's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OVERLAY = ROOT / ".venv-kfp-local"


def isolated_python() -> str:
    python = OVERLAY / "bin" / "python"
    if not python.exists():
        venv.create(OVERLAY, with_pip=True, clear=True)
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    project_site = sysconfig.get_paths()["purelib"]
    pth = site / "kfp_ray_project.pth"
    want = f"import site; site.addsitedir({project_site!r})\n{ROOT}\n{ROOT / 'runtime'}\n"
    if not pth.exists() or pth.read_text() != want:
        pth.write_text(want)
    return str(python)


def run(target: str, arguments: dict, env: dict | None = None, pipeline_root: str | None = None,
        timeout: float = 1800, output=None, on_start=None) -> dict:
    """Run pipeline `module:attr` (or a compiled YAML file) with kfp.local in the isolated
    env. Streams the run's log to `output` (default stdout); returns the runner's result
    (status, outputs, error)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kfp-local-") as tmp:
        result_file = Path(tmp) / "result.json"
        spec = {"target": target, "arguments": arguments, "pipeline_root": pipeline_root or str(Path(tmp) / "root"),
                "result": str(result_file)}
        proc = subprocess.Popen([isolated_python(), "-m", "pipelines._local_runner", json.dumps(spec)], cwd=ROOT,
                                env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        out = output or sys.stdout
        if on_start is not None:
            on_start(proc)
        try:
            for line in proc.stdout:
                out.write(line)
            proc.wait(timeout=timeout)
        except BaseException:
            proc.terminate()
            proc.wait(timeout=60)
            raise
        if result_file.exists():
            return json.loads(result_file.read_text())
        return {"status": "FAILURE", "error": f"the local runner exited with {proc.returncode} before reporting"}
