"""Task start: from a task's process start to its first network request, per component.

Each component's command is taken from the compiled YAML and run as its pod runs it (the
program after the pip step: `sh -ec` writes the component's code, `python3 -m
kfp.dsl.executor_main` imports and calls it), with an executor input built as KFP's driver
builds it, against the sandbox. A `sitecustomize` on PYTHONPATH notes the first TCP connect
(any protocol: the Kubernetes API, S3, the Ray dashboard); the process is stopped there.

Baseline, in the same run: a component that does nothing but connect, compiled by the same
KFP: the floor every task pays (a Python process, the KFP executor). The pip step is timed
on its own (`pip install` of what is already installed, as in the sandbox's task image and
a `compile --image` image); what it downloads on a bare image is pip_path.py's number."""


import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import harness

SITECUSTOMIZE = '''
import os, socket, time
_path = os.environ.get("BENCH_FIRST_CONNECT")
if _path:
    _connect = socket.socket.connect
    def connect(self, address, _connect=_connect):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not os.path.exists(_path):
            with open(_path, "w") as fh:
                fh.write(repr(time.time()))
        return _connect(self, address)
    socket.socket.connect = connect
'''
CLOSED = "http://127.0.0.1:9"  # discard: nothing listens; a connect attempt is what is timed


def inputs(box) -> dict[str, dict]:
    """Arguments that take each component past its input checks to its first request."""
    bucket = box.info["s3_bucket"]
    return {
        "stage_dataset": {"dataset": "breast_cancer", "run_id": "bench-ts"},
        "provision_ray_cluster": {"run_id": "bench-ts", "local_queue": "local-queue-test", "num_workers": 0,
                                  "task_name": "provision", "task_id": "1"},
        "submit_ray_job": {"dashboard_url": CLOSED, "entrypoint": "python -c pass", "run_id": "bench-ts"},
        "follow_ray_job": {"dashboard_url": CLOSED, "job_id": "raysubmit_bench"},
        "publish_training_results": {"output_uri": f"s3://{bucket}/bench/ts", "run_id": "bench-ts"},
        "teardown_ray_cluster": {"run_id": "bench-ts"},
        "sweep_ray_clusters": {},
        "run_ray_driver": {"dashboard_url": CLOSED, "cluster_name": "bench-ts", "namespace": "sandbox",
                           "driver": "code/interactive_train.py", "function": "train"},
        "noop": {"url": CLOSED},
    }


def executors() -> dict[str, tuple[dict, dict]]:
    """component name -> (its ComponentSpec, its executor's container), from compiled/."""
    import yaml

    out = {}
    for path in sorted((harness.ROOT / "compiled").glob("*.yaml")):
        spec = next(yaml.safe_load_all(path.read_text()))
        for comp in spec["components"].values():
            label = comp.get("executorLabel")
            if not label:
                continue
            container = spec["deploymentSpec"]["executors"][label]["container"]
            name = container["args"][-1]
            out.setdefault(name, (comp, container))
    return out


def noop_executor(tmp: Path) -> tuple[dict, dict]:
    """The floor: a component that only connects, compiled by the same KFP."""
    import yaml
    from kfp import compiler, dsl

    @dsl.component(base_image="registry.access.redhat.com/ubi9/python-311:9.6-1756977307")
    def noop(url: str):
        import socket
        from urllib.parse import urlparse

        u = urlparse(url)
        try:
            socket.create_connection((u.hostname, u.port), timeout=2).close()
        except OSError:
            pass

    path = tmp / "noop.yaml"
    compiler.Compiler().compile(noop, str(path))
    spec = yaml.safe_load(path.read_text())
    comp = next(iter(spec["components"].values()))
    return comp, next(iter(spec["deploymentSpec"]["executors"].values()))["container"]


def executor_input(comp: dict, args: dict, root: Path) -> dict:
    from google.protobuf import json_format
    from kfp.local import executor_input_utils
    from kfp.pipeline_spec import pipeline_spec_pb2

    component = json_format.ParseDict({k: v for k, v in comp.items() if k != "dag"}, pipeline_spec_pb2.ComponentSpec())
    message = executor_input_utils.construct_executor_input(component, args, str(root), block_input_artifact=False)
    ei = executor_input_utils.executor_input_to_dict(message, component)
    for name, p in (ei.get("outputs", {}).get("parameters") or {}).items():
        p["outputFile"] = str(root / "outputs" / name)
    ei.setdefault("outputs", {})["outputFile"] = str(root / "output_metadata.json")
    return ei


def first_request(container: dict, ei: dict, env: dict, tmp: Path, timeout: float = 60) -> float | None:
    """Seconds from the program's start to its first connect (None: it made none)."""
    marker = tmp / f"connect-{time.monotonic_ns()}"
    argv = list(container["command"][3:]) + [json.dumps(ei) if a == "{{$}}" else a for a in container["args"]]
    started = time.time()
    proc = subprocess.Popen(argv, env={**env, "BENCH_FIRST_CONNECT": str(marker)}, cwd=tmp, process_group=0,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if marker.exists():
            time.sleep(0.01)  # written in one go; let it land
            return float(marker.read_text()) - started
        return None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def pip_step(container: dict, env: dict) -> float:
    """The pip step alone, its packages already installed (the sandbox's image, an --image image)."""
    script = container["command"][2].replace('&& "$0" "$@"', "")
    started = time.monotonic()
    subprocess.run(["sh", "-c", script], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def run(rounds: int = 3) -> dict:
    from kfp_ray_sandbox.client import SandboxClient

    with harness.sandbox() as box, tempfile.TemporaryDirectory(prefix="bench-ts-") as t:
        tmp = Path(t)
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        sbx = SandboxClient(box.info)
        venv_bin = str(Path(sys.executable).parent)
        env = {**os.environ, **sbx.data_connection(), "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
               "PYTHONPATH": str(tmp / "site"), "KUBECONFIG": box.info["kubeconfig"], "KFP_RAY_NAMESPACE": "sandbox"}
        found = executors()
        found["noop"] = noop_executor(tmp)
        args = inputs(box)
        times: dict[str, list] = {name: [] for name in found}
        pip: dict[str, float] = {}
        for i in range(rounds):
            for name, (comp, container) in (found.items() if i % 2 == 0 else reversed(list(found.items()))):
                root = tmp / f"{name}-{i}"
                root.mkdir()
                times[name].append(first_request(container, executor_input(comp, args.get(name, {}), root), env, root))
                if i == 0 and name != "noop":
                    pip[name] = pip_step(container, env)
        floor = harness.median(times["noop"])
        rows, result = [], {"floor_s": round(floor, 3), "rounds": rounds, "components": {}}
        for name in sorted(found, key=lambda n: (n == "noop", n)):
            med = harness.median(times[name])
            result["components"][name] = {"first_request_s": [None if v is None else round(v, 3) for v in times[name]],
                                          "median_s": round(med, 3), "pip_step_s": round(pip.get(name, 0.0), 2)}
            rows.append([name, med, med - floor, pip.get(name, 0.0), "yes" if med <= 1.5 else "NO"])
        text = table(rows, floor)
        return {"result": result, "table": text}


def table(rows, floor: float) -> str:
    return ("## Task start: process start to first request, per component\n\n"
            f"Median over rounds; the floor (a KFP component that only connects) is {floor:.2f} s. Target: ≤ 1.5 s.\n\n"
            + harness.table(["component", "start → first request s", "over the floor s", "pip step (installed) s",
                             "≤ 1.5 s"], rows))


if __name__ == "__main__":
    out = run(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    print(out["table"])
    print(json.dumps(out["result"]))
