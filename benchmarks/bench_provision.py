"""Provisioning latency: kfp_ray.tasks.provision vs CodeFlare SDK apply()+wait_ready().

Both create the same small RayCluster (head only) in the sandbox and wait until it can take
jobs; rounds alternate A, B, A, B... Prints each run, medians, the ratio and API requests."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
HOLD_S = 3600.0  # --hold: long enough for any test; a signal ends it


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hold", action="store_true",
                    help="after the first cluster is ready, print 'holding' and wait to be stopped (to test its cleanup)")
    args = ap.parse_args()
    from kfp_ray_sandbox import Sandbox, wait_until
    from kfp_ray_sandbox.client import SandboxClient
    from kfp_ray_sandbox.reaper import owned_tempdir, sigterm_as_interrupt, wait_interruptibly

    # The sandbox's own temp dir, and this process's temp files, go if it dies (its watchdog
    # removes them and stops its Ray); SIGTERM unwinds like Ctrl-C.
    try:
        with sigterm_as_interrupt(), Sandbox() as box, owned_tempdir(box.watchdog):
            os.environ["CODEFLARE_TLS_DIR"] = str(box.state_dir / "tls")
            client = SandboxClient(box.info)
            os.environ["KUBECONFIG"] = box.info["kubeconfig"]
            from codeflare_sdk import Cluster, ClusterConfiguration, KubeConfigFileAuthentication

            from kfp_ray import cluster as kcluster
            from kfp_ray import tasks

            KubeConfigFileAuthentication(kube_config_path=box.info["kubeconfig"]).load_kube_config()

            def requests_since(mark):
                return len(client.audit()) - mark

            def sdk(name):
                cfg = ClusterConfiguration(name=name, namespace="sandbox", num_workers=0, local_queue="local-queue-test",
                                           head_cpu_requests=1, head_cpu_limits=1, head_memory_requests=1,
                                           head_memory_limits=1)
                with contextlib.redirect_stdout(io.StringIO()):
                    c = Cluster(cfg)
                    c.apply(timeout=60)
                    c.wait_ready(timeout=300, dashboard_check=False)

            def ours(name):
                with contextlib.redirect_stdout(io.StringIO()):
                    tasks.provision(run_id=f"bench-{name}", cluster_name=name, namespace="sandbox",
                                    local_queue="local-queue-test", num_workers=0, head_cpu="1", head_memory="1G")

            times = {"kfp-ray": [], "codeflare-sdk": []}
            reqs = {"kfp-ray": [], "codeflare-sdk": []}
            for i in range(args.rounds):
                for label, fn in (("kfp-ray", ours), ("codeflare-sdk", sdk)):
                    name = f"bench-{label[:3]}-{i}"
                    mark = len(client.audit())
                    t = time.monotonic()
                    fn(name)
                    times[label].append(time.monotonic() - t)
                    if args.hold:
                        print("holding", flush=True)
                        wait_interruptibly(threading.Event(), HOLD_S)
                    reqs[label].append(requests_since(mark))
                    with contextlib.redirect_stdout(io.StringIO()):
                        kcluster.delete(name, "sandbox")
                    wait_until(lambda: not client.processes(), 120, f"{name}'s Ray processes to stop", interval=0.2)
                    print(f"round {i} {label:14} {times[label][-1]:6.2f} s  {reqs[label][-1]:4d} API requests", flush=True)
            med = {k: statistics.median(v) for k, v in times.items()}
            ratios = [a / b for a, b in zip(times["kfp-ray"], times["codeflare-sdk"], strict=True)]
            print(f"median time to ready: kfp-ray {med['kfp-ray']:.2f} s, codeflare-sdk {med['codeflare-sdk']:.2f} s")
            print(f"ratio kfp-ray/sdk per round: {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")
            print(f"median API requests: kfp-ray {statistics.median(reqs['kfp-ray'])}, "
                  f"codeflare-sdk {statistics.median(reqs['codeflare-sdk'])}")
    except KeyboardInterrupt:
        print("interrupted: the sandbox and its Ray processes are stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
