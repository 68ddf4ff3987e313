"""`python -m benchmarks [SUITE ...] [--rounds N]` (or `make bench`): run the benchmark suites,
each against its baseline measured in the same run, print each one's table and one JSON
line, and write benchmarks/results/<suite>.json and .md (with the machine's description).

Suites: overhead, release, queueing, task_start, pip_path (default: all). Never part of
`make test`: numbers, not assertions. Each suite starts its own sandbox and stops it;
Ctrl-C, SIGTERM or SIGKILL of this process leaves nothing behind (the sandbox's watchdog)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

SUITES = {  # name -> default rounds
    "overhead": 2,
    "release": 2,
    "queueing": 1,
    "task_start": 3,
    "pip_path": 1,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("suites", nargs="*", choices=[[], *SUITES], metavar="SUITE",
                    help=f"which to run ({', '.join(SUITES)}; default all)")
    ap.add_argument("--rounds", type=int, help="rounds per suite (default: each suite's own)")
    args = ap.parse_args(argv)
    from . import harness

    print(f"machine: {harness.describe(harness.machine())}", flush=True)
    failed = []
    for name in args.suites or list(SUITES):
        started = time.monotonic()
        print(f"\n==> {name}", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        try:
            out = module.run(args.rounds or SUITES[name])
        except KeyboardInterrupt:
            print("interrupted: the suite's sandbox is stopped", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 - the other suites still run; this one is reported
            print(f"{name} failed: {type(exc).__name__}: {exc}", flush=True)
            failed.append(name)
            continue
        out["result"]["seconds"] = round(time.monotonic() - started, 1)
        path = harness.write_result(name, out["result"], out["table"])
        print(out["table"], flush=True)
        print(json.dumps({"benchmark": name, **out["result"]}, default=str), flush=True)
        print(f"(written to {path.relative_to(harness.ROOT)})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
