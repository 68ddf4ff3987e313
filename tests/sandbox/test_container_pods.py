"""Pods that are not Ray nodes (a pipeline task's): the kubelet runs their command once, as a
process with the pod's env (secrets included), its service account at the in-cluster path, its
own /s3, and the sandbox's API as KUBERNETES_SERVICE_HOST; the pod ends with the exit code, its
log is the container's, and deleting it mid-run sends SIGTERM, then SIGKILL after the grace."""

from __future__ import annotations

import json
import time

from kfp_ray_sandbox.client import SandboxClient

NS = "sandbox"

PROBE = r"""
import os, sys, json, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(f"{sa}/token").read()
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
url = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/api/v1/namespaces/{open(f'{sa}/namespace').read()}/pods"
req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
pods = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))
os.makedirs("/s3/bucket", exist_ok=True)
open("/s3/bucket/x", "w").write("mine")
print("pods", len(pods["items"]), "secret", os.environ["KEY"] == os.environ["EXPECTED"], "s3", os.listdir("/s3"))
# none of the machine's files: the checkout, a host temp file, /tmp's other entries (an image has none of them)
print("host", json.dumps({"seen": [p for p in os.environ["HOST_PATHS"].split(":") if os.path.exists(p)],
                          "tmp": sorted(os.listdir("/tmp"))}))
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def pod(name: str, code: str, env: dict, sa: str = "pipeline-runner-dspa") -> dict:
    import sys

    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"app": "probe"}},
            "spec": {"serviceAccountName": sa, "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "registry.access.redhat.com/ubi9/python-311",
                                     "command": [sys.executable, "-c", code],
                                     "env": [{"name": k, "valueFrom": v} if isinstance(v, dict) else {"name": k, "value": v}
                                             for k, v in env.items()]}]}}


class Pods:
    """The pods API through the real kubernetes client, as admin."""

    def __init__(self, box):
        from kubernetes import client

        self.v1 = client.CoreV1Api(SandboxClient(box.info).api_client())

    def create(self, body):
        self.v1.create_namespaced_pod(NS, body)

    def get(self, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.v1.api_client.sanitize_for_serialization(self.v1.read_namespaced_pod(name, NS))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def log(self, name):
        return self.v1.read_namespaced_pod_log(name, NS)

    def delete(self, name):
        self.v1.delete_namespaced_pod(name, NS)

    def wait_phase(self, name, phases, timeout=60):
        deadline, p = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            p = self.get(name)
            if p and (p.get("status") or {}).get("phase") in phases:
                return p
            time.sleep(0.2)
        raise AssertionError(f"pod {name} never reached {phases}: {p.get('status') if p else None}")


def test_a_task_pod_runs_as_its_service_account_with_its_secrets(box, tmp_path):
    from pathlib import Path

    pods = Pods(box)
    secret = {"secretKeyRef": {"name": box.info["data_connection"], "key": "AWS_S3_BUCKET"}}
    checkout = Path(__file__).resolve().parents[2]
    (tmp_path / "host-file").write_text("the machine's")
    host = ":".join(map(str, (checkout / "README.md", checkout / "pipelines" / "jobs", tmp_path / "host-file")))
    pods.create(pod("probe-ok", PROBE, {"KEY": secret, "EXPECTED": box.info["s3_bucket"], "HOST_PATHS": host}))
    done = pods.wait_phase("probe-ok", ("Succeeded", "Failed"))
    log = pods.log("probe-ok")
    assert done["status"]["phase"] == "Succeeded", log
    assert "secret True" in log and "s3 ['bucket']" in log and "pods " in log
    # its /tmp: the KFP launcher's two paths, its own temp dir (TMPDIR, HOME) and, for a checkout
    # under /tmp, the way to the image (the venv) only
    from kfp_ray_sandbox.container import kept_paths

    seen = json.loads(next(line for line in log.splitlines() if line.startswith("host ")).split(" ", 1)[1])
    assert seen["seen"] == [], log
    tmp = set(seen["tmp"])
    image = {Path(k).relative_to("/tmp").parts[0] for k in kept_paths() if Path(k).is_relative_to("/tmp")}
    assert {"kfp", "kfp_outputs"} <= tmp and {t for t in tmp - image if not t.startswith("kc-")} == {"kfp", "kfp_outputs"}
    assert len([t for t in tmp if t.startswith("kc-")]) == 1, tmp
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    import os

    assert not os.path.exists("/s3/bucket/x")  # the pod's /s3 was its own
    pods.delete("probe-ok")


def test_a_failing_command_fails_the_pod_with_its_exit_code(box):
    pods = Pods(box)
    pods.create(pod("probe-fail", "import sys; print('bye'); sys.exit(3)", {}))
    done = pods.wait_phase("probe-fail", ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Failed"
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    # the kubelet writes a terminated state once: a later sync keeps its times (run reports draw them)
    ended = done["status"]["containerStatuses"][0]["state"]["terminated"]
    time.sleep(1.1)  # a second later, so that a rewritten finishedAt would differ (RFC 3339 seconds)
    rt = next(r for r in list(box.kubelet.pods.values()) if r.name == "probe-fail")
    box.kubelet._refresh(rt)
    again = pods.get("probe-fail")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (again["startedAt"], again["finishedAt"]) == (ended["startedAt"], ended["finishedAt"])
    pods.delete("probe-fail")


def test_a_finished_pod_keeps_its_ip_in_status_and_gives_the_address_back(box):
    """As OVN-Kubernetes frees a completed pod's IP: a sandbox that has run a few hundred task
    pods (one /24 per sandbox) still has addresses, and deleting the finished pod later does not
    free the address again once it is another pod's."""
    pods, network = Pods(box), box.kubelet.network
    pods.create(pod("probe-ip", "print('done')", {}))
    done = pods.wait_phase("probe-ip", ("Succeeded", "Failed"))
    ip = done["status"]["podIP"]
    assert done["status"]["phase"] == "Succeeded" and network.owns(ip) and done["status"]["podIPs"] == [{"ip": ip}]
    assert not network.in_use(ip)
    taken = []  # the next pods' addresses, up to the freed one (round robin), unless another pod took it
    try:
        while not network.in_use(ip):
            taken.append(network.allocate())
        pods.delete("probe-ip")
        deadline = time.monotonic() + 30
        while pods.get("probe-ip") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pods.get("probe-ip") is None
        assert network.in_use(ip)  # still the newer holder's
    finally:
        for t in taken:
            network.release(t)


def test_deleting_a_running_pod_sends_sigterm_then_it_is_gone(box):
    pods = Pods(box)
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True), sys.exit(143)))\n"
            "print('up', flush=True)\n"
            "time.sleep(600)\n")
    pods.create(pod("probe-term", code, {}))
    pods.wait_phase("probe-term", ("Running",))
    deadline = time.monotonic() + 30
    while "up" not in pods.log("probe-term") and time.monotonic() < deadline:
        time.sleep(0.2)
    pods.delete("probe-term")
    deadline = time.monotonic() + 30
    while pods.get("probe-term") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pods.get("probe-term")
    assert not [p for p in box.kubelet.processes() if p["pod"] == "probe-term"]
