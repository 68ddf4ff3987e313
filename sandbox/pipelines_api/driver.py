"""The sandbox's KFP driver pod program: what runs in each driver pod of a run (Argo's
`system-container-driver` and `system-dag-driver` templates, KFP 2.14.3's backend/src/v2/cmd/driver).

The run engine (workflow.py) does the driver's work: the executor input, the pod spec patch,
the cache decision, the DAG's execution and iteration count. What this pod gives a run is a
driver pod's cost and limits: the pod is made, scheduled and started like any other, and its
command line is the template's, resolved (`--component`, `--task`, `--container` and
`--kubernetes_config` each one argument), so a task whose JSON is over the kernel's 131072
bytes fails the driver's exec here as there. It reads its flags, checks that the JSON ones
parse, as the real driver's first step does, and exits. Standard library only, `python -I -S`:
a Go binary's start, not a Python environment's."""

import json
import sys

JSON_FLAGS = ("component", "task", "container", "kubernetes_config", "runtime_config")


def main(argv: list[str]) -> int:
    flags, i = {}, 0
    while i < len(argv):
        name = argv[i].lstrip("-")
        value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
        flags[name], i = value, i + (2 if value or (i + 1 < len(argv) and argv[i + 1] == "") else 1)
    for name in JSON_FLAGS:
        if flags.get(name):
            try:
                json.loads(flags[name])
            except ValueError as exc:
                print(f"failed to unmarshal --{name}: {exc}", file=sys.stderr)
                return 1
    print(f"driver {flags.get('type', '')} {flags.get('task_name', '')}: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
