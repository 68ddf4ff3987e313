"""Running pipelines with kfp.local on this machine, isolated from the project's env.

kfp.local's SubprocessRunner(use_venv=False) runs tasks with the interpreter that runs
kfp.local and pip-installs each task's packages into it. So kfp.local runs in its own
virtualenv (.venv-kfp-local) that sees the project's packages through a .pth file: the
pinned packages are found installed (nothing is downloaded), and anything a task would
install lands there, never in the project's environment.
"""

from __future__ import annotations

import codecs
import json
import os
import selectors
import signal
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from kfp_ray.components import PREINSTALLED_ENV
from kfp_ray_sandbox.reaper import SIGNAL_SLICE_S, session_tree, signal_pid, wait_gone

ROOT = Path(__file__).resolve().parent.parent
CHECKOUT = (ROOT / "pyproject.toml").exists()  # an editable install of this repository, not a wheel
# next to the checkout's .venv; installed from a wheel, in the user's cache
OVERLAY = (ROOT / ".venv-kfp-local" if CHECKOUT
           else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kfp-ray" / "venv-kfp-local")


def isolated_python() -> str:
    """The isolated env's interpreter, made on first use. Runs started together on a fresh
    checkout make it once: under a lock, and only a finished env (its .pth written last) counts,
    so none wipes (`clear=True`) an env another run is already using or still building."""
    import fcntl

    python = OVERLAY / "bin" / "python"
    OVERLAY.parent.mkdir(parents=True, exist_ok=True)
    with open(OVERLAY.with_name(OVERLAY.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        return _finish_overlay(python)


def _finish_overlay(python: Path) -> str:
    pth_name = "kfp_ray_project.pth"
    if not python.exists() or not list(OVERLAY.glob(f"lib/python*/site-packages/{pth_name}")):
        venv.create(OVERLAY, with_pip=True, clear=True)
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    project_site = sysconfig.get_paths()["purelib"]
    pth = site / pth_name
    want = f"import site; site.addsitedir({project_site!r})\n"
    if not pth.exists() or pth.read_text() != want:
        pth.write_text(want)
    return str(python)


STOP_GRACE = 3.0  # a cancelled run: how long its tasks get to stop their Ray jobs before SIGKILL


def run(target: str, arguments: dict, env: dict | None = None, pipeline_root: str | None = None,
        timeout: float = 1800, output=None, on_start=None, watchdog=None) -> dict:
    """Run pipeline `module:attr` (or a compiled YAML file) with kfp.local in the isolated
    env. Streams the run's log to `output` (default stdout); returns the runner's result
    (status, outputs, error). With the sandbox's `watchdog`, the runner, its tasks and the
    run's temp dir die with the sandbox's owner, however it dies.

    A `module:attr` pipeline is built without its tasks' pip installs (the isolated env has
    every package; components._build.PREINSTALLED_ENV); a compiled YAML file runs its tasks'
    commands as compiled, pip installs included."""
    import shutil
    import tempfile

    tmp = watchdog.mkdtemp(prefix="kfp-local-") if watchdog is not None else Path(tempfile.mkdtemp(prefix="kfp-local-"))
    try:
        result_file = tmp / "result.json"
        spec = {"target": target, "arguments": arguments, "pipeline_root": pipeline_root or str(tmp / "root"),
                "result": str(result_file)}
        tag = watchdog.env() if watchdog is not None else {}
        if not target.endswith((".yaml", ".yml")):
            tag = {**tag, PREINSTALLED_ENV: "1"}
        # kfp.local and its tasks make temp dirs they never remove (each task's `mktemp -d`
        # program dir, the workspace): inside the run's temp dir, they go with it.
        (tmp / "tmp").mkdir()
        proc = subprocess.Popen([isolated_python(), "-m", "kfp_ray.pipelines._local_runner", json.dumps(spec)], cwd=ROOT if CHECKOUT else None,
                                env={**os.environ, **(env or {}), **tag, "TMPDIR": str(tmp / "tmp"), "PYTHONUNBUFFERED": "1"},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if on_start is not None:
                on_start(proc)
            _stream(proc.stdout, output or sys.stdout)
            proc.wait(timeout=timeout)
        except BaseException:
            stop(proc)
            raise
        finally:
            proc.stdout.close()
        if result_file.exists():
            return json.loads(result_file.read_text())
        return {"status": "FAILURE", "error": f"the local runner exited with {proc.returncode} before reporting"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _stream(pipe, out) -> None:
    """Copy the runner's output to `out` until it ends, waiting in slices: the main thread must
    get back to the interpreter to run a SIGTERM/SIGINT handler (see reaper.wait_interruptibly)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = pipe.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            if not sel.select(SIGNAL_SLICE_S):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out.write(decoder.decode(chunk))
    out.write(decoder.decode(b"", final=True))


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """Stop a runner and every task process under it: SIGTERM (a task stops its Ray job, as
    on a cancelled KFP run), then SIGKILL whatever is left after `grace`."""
    def tree() -> set[int]:
        # the runner's session (it and its tasks) and any descendant that left it; the pid itself
        # only while it is our unreaped child (afterwards it could be someone else's)
        return session_tree(proc.pid, include_leader=proc.poll() is None)

    for pid in tree():
        signal_pid(pid, signal.SIGTERM)
    if not wait_gone(tree(), grace):
        for pid in tree():
            signal_pid(pid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
