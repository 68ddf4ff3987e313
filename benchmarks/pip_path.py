"""What a task installs on the pip path, per task kind: MB and seconds into a clean venv.

A compiled task without --image starts by pip-installing the KFP SDK (`kfp==2.17.0 --no-deps`,
the launcher's) and its kind's packages (components/_build.py) into the base image, with no
pip cache (a fresh pod). This installs each into a clean venv of this machine's Python the
same way (--no-cache-dir: downloads from the index this machine reaches, as a pod would) and
prints the seconds and the MB it added, then checks that what the kind's tasks import loads.

Baseline, measured in the same run: the kind follow_ray_job and submit_ray_job used to share
(RAY_JOBS: requests, boto3, kubernetes), against what each installs now (FOLLOW, SUBMIT).
With --image REF a task installs nothing (0 MB, 0 s): the Containerfile's image has it all.
Like every owner of processes here, it runs under a watchdog (harness.watched): Ctrl-C,
SIGTERM or SIGKILL leaves no pip running and no temp venv behind.

    python benchmarks/pip_path.py [--kinds FOLLOW SUBMIT ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402 - after the path

KFP = ["kfp==2.17.0", "--no-deps"]  # what KFP's launcher command installs in every task
BASELINE = {"RAY_JOBS (before)": ["requests>=2.31,<3", "boto3>=1.34,<2", "kubernetes==30.1.0"]}
# What each kind's runtime code imports (kfp_ray modules load these lazily).
IMPORTS = {"KUBE": "kubernetes", "CODEFLARE": "codeflare_sdk, kubernetes", "SUBMIT": "requests, boto3",
           "FOLLOW": "requests, kubernetes", "S3": "boto3", "DATA": "boto3, numpy, sklearn",
           "DRIVER": "ray, kubernetes, requests, boto3, cryptography",
           "RAYJOB": "codeflare_sdk, kubernetes, requests, boto3",
           "RAY_JOBS (before)": "requests, boto3, kubernetes"}


def size_mb(path: Path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total / 1e6


def measure(name: str, packages: list[str], work: Path, env: dict) -> dict:
    """env: the children's (harness.child_env: they die with this process)."""
    venv = work / name.split()[0].lower()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    py = venv / "bin" / "python"
    site = next((venv / "lib").glob("python*/site-packages"))
    empty = size_mb(site)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check"]
    t0 = time.monotonic()
    for args in (KFP, packages):  # as the task's command runs them: kfp first, then the kind's
        done = subprocess.run(pip + args, capture_output=True, text=True, env=env)
        if done.returncode:
            raise SystemExit(f"pip install {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    seconds = time.monotonic() - t0
    mb = size_mb(site) - empty
    ok = subprocess.run([str(py), "-c", f"import {IMPORTS[name]}"], capture_output=True, text=True, env=env)
    shutil.rmtree(venv, ignore_errors=True)
    return {"kind": name, "packages": " ".join(packages), "mb": mb, "seconds": seconds,
            "imports": "ok" if ok.returncode == 0 else ok.stderr.strip().splitlines()[-1][:60]}


COMPONENTS = {"KUBE": "teardown_ray_cluster, sweep_ray_clusters", "CODEFLARE": "provision_ray_cluster",
              "SUBMIT": "submit_ray_job", "FOLLOW": "follow_ray_job", "DRIVER": "run_ray_driver",
              "S3": "publish_training_results", "DATA": "stage_dataset", "RAYJOB": "run_ray_job",
              "RAY_JOBS (before)": "follow, submit (before)"}


def run(rounds: int = 1) -> dict:
    """For `python -m benchmarks`: every kind once (a download per kind: rounds are not repeated)."""
    from kfp_ray.components import _build

    kinds = {**BASELINE, **_build.KINDS}
    with harness.watched() as wd:  # its temp dir, work's parent, goes on leaving (after its processes)
        work = Path(tempfile.mkdtemp(prefix="kfp-ray-pip-path-"))
        rows = [measure(name, pkgs, work, harness.child_env(wd)) for name, pkgs in kinds.items()]
    for r in rows:
        print(f"  {r['kind']:<18} {r['mb']:8.1f} MB {r['seconds']:7.1f} s  imports {r['imports']}", flush=True)
    table = ("## Pip path: what each task installs without --image\n\n"
             "`kfp==2.17.0 --no-deps` and the kind's packages into a clean venv, no pip cache, as a fresh pod would "
             "(downloads through this machine's network). With `compile --image REF`: 0 MB, 0 s for every task.\n\n"
             + harness.table(["kind", "components", "MB", "s", "imports"],
                             [[r["kind"], COMPONENTS.get(r["kind"], ""), round(r["mb"], 1), round(r["seconds"], 1),
                               r["imports"]] for r in rows]))
    return {"result": {"kinds": rows}, "table": table}


def main() -> int:
    from kfp_ray.components import _build

    kinds = {**BASELINE, **_build.KINDS}
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="*", default=list(kinds), help="kinds to measure (default: all)")
    args = ap.parse_args()
    rows = []
    try:
        with harness.watched() as wd:  # its temp dir, work's parent, goes on leaving (after its processes)
            work = Path(tempfile.mkdtemp(prefix="kfp-ray-pip-path-"))
            for name in args.kinds:
                rows.append(measure(name, kinds[name], work, harness.child_env(wd)))
                r = rows[-1]
                print(f"{r['kind']:<18} {r['mb']:8.1f} MB {r['seconds']:7.1f} s  imports {r['imports']}  ({r['packages']})",
                      flush=True)
    except KeyboardInterrupt:
        print("interrupted: its pip processes and temp venvs are gone", file=sys.stderr)
        return 130
    by = {r["kind"]: r for r in rows}
    base = by.get("RAY_JOBS (before)")
    for kind in ("FOLLOW", "SUBMIT"):
        if base and kind in by:
            print(f"{kind} / RAY_JOBS (before): {by[kind]['mb'] / base['mb']:.2f}x MB, "
                  f"{by[kind]['seconds'] / base['seconds']:.2f}x seconds")
    print("--image REF: 0 MB, 0 s in every kind (the component image has everything)")
    return 0 if all(r["imports"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
