"""`kfp-ray run NAME --local` as a user runs it, and what its summary says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(name, *params, keep=None, platform=None):
    args = [sys.executable, "-m", "kfp_ray.pipelines", "run", name, "--local"]
    if platform:
        args += ["--platform", platform]
    for p in params:
        args += ["--param", p]
    if keep:
        args += ["--keep-outputs", str(keep)]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def summary_metrics(out: str) -> dict:
    line = next(li for li in out.splitlines() if li.startswith("metrics: "))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.e+-]+)", line)}
