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


def assert_usage_ledger(out: str, outputs: Path, cpu: float, memory_gib: float) -> dict:
    """The run's usage ledger (publish's metrics, its report, usage.json's place): its hours are
    the known shape x the seconds the quota was held, and those span at least the phases the
    tasks measured (starting, job, teardown) plus at most a minute of hand-offs between them."""
    import pytest

    m = summary_metrics(out)
    held = m["quota_held_seconds"]
    assert m["cpu_hours"] == pytest.approx(cpu * held / 3600, rel=0.02)
    assert m["memory_gib_hours"] == pytest.approx(memory_gib * held / 3600, rel=0.02)
    phases = m["starting_seconds"] + m["running_seconds"]
    assert phases - 1 <= held <= phases + 60, (held, phases)
    html = next(outputs.glob("**/publish-training-results/*/html_report")).read_text()
    assert 'id="usage"' in html and f"{cpu:g} CPU, {memory_gib:g} GiB" in html
    assert re.search(r"usage ledger</th><td><code>s3://kfp-ray/\S+/usage.json</code>", html)
    return m
