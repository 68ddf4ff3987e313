"""A task's runtime code in a process of its own, as in a KFP task container: as RHOAI's
pipeline-runner against the session sandbox, its output read line by line with the time
each line came, and a real SIGTERM to cancel it (what Argo sends a cancelled run's pods)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class TaskProcess:
    def __init__(self, box, code: str, env: dict | None = None):
        full_env = {**os.environ, "KUBECONFIG": box.info["kubeconfig_pipeline_runner"],
                    "PYTHONPATH": f"{ROOT / 'runtime'}{os.pathsep}{ROOT}", "PYTHONUNBUFFERED": "1",
                    **box.watchdog.env(), **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[tuple[float, str]] = []  # (time.time(), line)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.signalled_at: float | None = None
        self.exited_at: float | None = None

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append((time.time(), line.rstrip("\n")))

    def saw(self, text: str) -> float | None:
        """When the first line containing text came (time.time()), or None."""
        with self._lock:
            return next((t for t, line in self.lines if text in line), None)

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(line for _, line in self.lines)

    def sigterm(self) -> float:
        self.signalled_at = time.time()
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.signalled_at

    def wait(self, timeout: float) -> int:
        """The exit code; fails the test (and kills the process) if it runs past timeout."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the task did not exit within {timeout}s; its output:\n{self.output}") from None
        self.exited_at = time.time()
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
