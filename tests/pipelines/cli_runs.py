"""`kfp-ray run NAME --local` as a user runs it, and what its summary says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from kfp_ray_sandbox.faults import PLATFORM_ENV

ROOT = Path(__file__).resolve().parents[2]


def run_cli(name, *params, keep=None, platform=None, timings=None):
    """`kfp-ray run NAME --local` in a subprocess; `timings`: the platform timings its sandbox
    starts with (kfp_ray_sandbox.faults.PLATFORM_ENV), e.g. a short task retry backoff."""
    args = [sys.executable, "-m", "kfp_ray.pipelines", "run", name, "--local"]
    if platform:
        args += ["--platform", platform]
    for p in params:
        args += ["--param", p]
    if keep:
        args += ["--keep-outputs", str(keep)]
    env = {**os.environ, PLATFORM_ENV: json.dumps(timings)} if timings else None
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def summary_metrics(out: str) -> dict:
    line = next(li for li in out.splitlines() if li.startswith("metrics: "))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.e+-]+)", line)}
