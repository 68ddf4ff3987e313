"""What the sandbox's shared runtime_env pip environments (sandbox/raypip.py) save.

N Ray nodes of one cluster set up the same job's requirements at once, each through Ray's own
pip plugin in the sandbox's Ray image (as the nodes' runtime-env agents do), three ways:
  per node   each node builds its own virtualenv (Ray's behaviour, RHOAI's pods),
  shared     the nodes share one build (the first builds it, the others wait and link it),
  warm       a later cluster of the same sandbox: the build is there already.
Printed: wall seconds per way and round, and the ratios against "per node" in the same round.
Like every owner of processes here, it runs under a watchdog (harness.watched): Ctrl-C,
SIGTERM or SIGKILL leaves no node process and no temp dir behind.

    .venv/bin/python benchmarks/sandbox_pip.py [--nodes 2] [--rounds 1] [--requirements torch==2.13.0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import harness  # noqa: E402 - after the path
from kfp_ray_sandbox import rayimage  # noqa: E402
from kfp_ray_sandbox.raynode import ray_env  # noqa: E402

NODE = r"""
import asyncio, logging, os, sys
from ray._private.runtime_env.context import RuntimeEnvContext
from ray._private.runtime_env.pip import PipPlugin
from ray.runtime_env import RuntimeEnv
env = RuntimeEnv(pip={"packages": sys.argv[1:]})
plugin = PipPlugin(os.environ["NODE_RESOURCES"])
asyncio.run(plugin.create(plugin.get_uris(env)[0], env, RuntimeEnvContext(), logging.getLogger("node")))
"""


def cluster(tmp: Path, nodes: int, requirements: list[str], shared: Path | None, watchdog) -> float:
    """Wall seconds for `nodes` agents setting up `requirements` at once (processes that die
    with this one: the watchdog's)."""
    started = time.monotonic()
    procs = []
    for i in range(nodes):
        cache = shared if shared is not None else tmp / f"own-{i}"
        env = harness.child_env(watchdog, ray_env({"KFP_RAY_SANDBOX_PIP_ENVS": str(cache),
                                                   "NODE_RESOURCES": str(tmp / f"node-{i}")}))
        procs.append(subprocess.Popen([rayimage.python(), "-c", NODE, *requirements], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"a node failed to install {requirements}:\n{err[-2000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--requirements", nargs="+", default=["torch==2.13.0"])
    args = parser.parse_args()
    rayimage.python()  # built outside the timings
    rows = []
    try:
        with harness.watched() as wd:
            for round_ in range(args.rounds):
                tmp = Path(tempfile.mkdtemp(prefix="kfp-ray-bench-pip-"))  # in the watched temp dir
                try:
                    ways = ("per node", "shared") if round_ % 2 == 0 else ("shared", "per node")  # alternate the order
                    seconds = {}
                    for way in ways:
                        sub = tmp / way.replace(" ", "-")
                        seconds[way] = cluster(sub, args.nodes, args.requirements, sub / "shared" if way == "shared" else None, wd)
                    seconds["warm"] = cluster(tmp / "warm", args.nodes, args.requirements, tmp / "shared" / "shared", wd)
                    rows.append(seconds)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    except KeyboardInterrupt:
        print("interrupted: its node processes and temp dirs are gone", file=sys.stderr)
        return 130
    print(f"{args.nodes} nodes, {' '.join(args.requirements)}")
    print(f"{'round':>5} {'per node s':>11} {'shared s':>9} {'warm s':>7} {'shared/per node':>16} {'warm/per node':>14}")
    for i, r in enumerate(rows):
        print(f"{i:>5} {r['per node']:>11.1f} {r['shared']:>9.1f} {r['warm']:>7.1f} "
              f"{r['shared'] / r['per node']:>16.2f} {r['warm'] / r['per node']:>14.2f}")
    print(json.dumps({"benchmark": "sandbox_pip", "nodes": args.nodes, "requirements": args.requirements, "rounds": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
