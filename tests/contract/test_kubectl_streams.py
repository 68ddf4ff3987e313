"""Contract tests: streaming subresources through the real kubectl (1.37) and the kubernetes
python client's `stream` helpers: `logs -f`, exec (WebSocket v5 / v4), port-forward, and
`kubectl top` from metrics.k8s.io.

A command pod (a plain container, no Ray) serves the fast tests: it prints a line, waits for a
file the test creates, prints another and ends, so that an order is decided by the test, never
by a sleep. The Ray-backed tests share the module's one small RayCluster (`ray_cluster`).
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from kubernetes.stream import portforward, stream

from kfp_ray_sandbox.reaper import pid_alive
from tests.contract.kubectl_cli import RUNNER, finish
from tests.helpers import eventually

NS = "sandbox"


@pytest.fixture
def core(sbx):
    return client.CoreV1Api(sbx.api_client())


def _command_pod(core, name: str, script: str) -> None:
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.access.redhat.com/ubi9/ubi-minimal:latest",
             "command": ["sh", "-c", script]}]}})
    eventually(lambda: core.read_namespaced_pod(name, NS).status.phase != "Pending", 60, 0.1,
               what=f"pod {name} to start")


class Gate:
    """What lets a gated pod go on: a file `go` in the pod's own temp dir ($TMPDIR), which the
    test creates from this machine (the sandbox's kubelet keeps a pod's temp dir there; the pod
    sees none of the machine's other files, as a container would not)."""

    def __init__(self, box, name: str):
        self.box, self.name = box, name

    def touch(self) -> None:
        rt = next(r for r in list(self.box.kubelet.pods.values()) if r.name == self.name and r.node is not None)
        (rt.node.temp_dir / "tmp" / "go").touch()


@pytest.fixture
def gated_pod(core, box, request):
    """A pod that prints 'first', waits for $TMPDIR/go (Gate), prints 'second' and exits 0."""
    name = f"stream-{request.node.name.split('[')[0].replace('_', '-')[5:40].strip('-')}"
    _command_pod(core, name, 'echo first; while [ ! -e "$TMPDIR/go" ]; do sleep 0.05; done; echo second')
    gate = Gate(box, name)
    yield name, gate
    try:
        gate.touch()
    except (StopIteration, OSError):  # the pod is over already
        pass
    try:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    except ApiException:
        pass


def _lines(proc) -> queue.Queue:
    """kubectl's stdout, line by line, read in a thread (a test waits on the queue, bounded)."""
    out: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            out.put(line)
        out.put(None)
    threading.Thread(target=read, daemon=True).start()
    return out


# --- logs -f -----------------------------------------------------------------------
def test_logs_follow_streams_as_the_container_writes_and_ends_with_it(kubectl, gated_pod):
    name, gate = gated_pod
    proc = kubectl.start("logs", "-f", name)
    lines = _lines(proc)
    try:
        assert lines.get(timeout=60) == "first\n"
        assert proc.poll() is None  # still following
        gate.touch()
        assert lines.get(timeout=60) == "second\n"
        code, _, err = finish(proc)  # the container ended: so does the follow
        assert code == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_logs_follow_through_the_python_client(core, gated_pod):
    name, gate = gated_pod
    resp = core.read_namespaced_pod_log(name, NS, follow=True, _preload_content=False, _request_timeout=60)
    try:
        chunks = resp.stream(1)
        first = next(chunks)
        assert first == b"f"
        gate.touch()
        rest = b"".join(chunks)
        assert (first + rest).decode() == "first\nsecond\n"
    finally:
        resp.release_conn()


# --- exec --------------------------------------------------------------------------
def test_exec_runs_in_the_pods_environment_with_its_streams_and_exit_code(kubectl, gated_pod):
    name, _ = gated_pod
    done = kubectl("exec", name, "--", "sh", "-c", 'echo "out $HOME"; echo err >&2; exit 3')
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("out /tmp/kc-")  # the container's HOME
    assert "err\n" in done.stderr and "command terminated with exit code 3" in done.stderr
    assert kubectl.ok("exec", "-i", name, "--", "cat", stdin="via stdin\n") == "via stdin\n"
    assert kubectl.ok("exec", name, "--", "true") == ""
    # in the pod's own mounts: its service account volume (empty on the machine)
    assert kubectl.ok("exec", name, "--", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace") == NS


def test_exec_refusals_are_the_apiservers(kubectl, gated_pod, sbx):
    name, _ = gated_pod
    done = kubectl("exec", name, "-c", "nope", "--", "true")
    assert done.returncode == 1
    assert f"container nope is not valid for pod {name}" in done.stderr
    done = kubectl("exec", "no-such-pod", "--", "true")
    assert 'pods "no-such-pod" not found' in done.stderr
    # the DSPA's Role grants pods/exec (data-science-pipelines-operator's role_pipeline-runner)
    assert kubectl.ok("exec", name, "--", "echo", "hi", runner=True) == "hi\n"
    # an account that may read pods but not exec: refused as the apiserver refuses it
    # (kubectl's WebSocket GET needs get on pods/exec, its SPDY fallback POST create)
    api = sbx.api_client()
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    core.create_namespaced_service_account(NS, {"metadata": {"name": "pod-reader"}})
    rbac.create_namespaced_role(NS, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
    rbac.create_namespaced_role_binding(NS, {
        "metadata": {"name": "pod-reader"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                       "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "pod-reader", "namespace": NS}]})
    try:
        token = core.create_namespaced_service_account_token("pod-reader", NS, {"spec": {}}).status.token
        done = kubectl("--token", token, "exec", name, "--", "true")
        assert done.returncode == 1
        assert (f'pods "{name}" is forbidden: User "system:serviceaccount:sandbox:pod-reader" cannot create resource '
                '"pods/exec" in API group "" in the namespace "sandbox"') in done.stderr, done.stderr
        audit = [e for e in sbx.audit() if e["path"].endswith(f"/{name}/exec") and e["code"] == 403]
        assert [e["verb"] for e in audit][-2:] == ["get", "create"]
    finally:
        rbac.delete_namespaced_role_binding("pod-reader", NS)
        rbac.delete_namespaced_role("pod-reader", NS)
        core.delete_namespaced_service_account("pod-reader", NS)


def test_exec_through_the_python_client(sbx, core, gated_pod):
    name, _ = gated_pod
    out = stream(core.connect_get_namespaced_pod_exec, name, NS, command=["sh", "-c", "echo hello; echo oops >&2"],
                 stderr=True, stdout=True, stdin=False, tty=False)
    assert "hello" in out and "oops" in out
    ws = stream(core.connect_get_namespaced_pod_exec, name, NS, command=["sh", "-c", "read x; echo got $x; exit 5"],
                stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    ws.write_stdin("it\n")
    ws.run_forever(timeout=60)
    assert ws.read_stdout() == "got it\n"
    assert ws.returncode == 5
    with pytest.raises(ApiException) as denied:
        stream(core.connect_get_namespaced_pod_exec, name, NS, command=["true"], container="nope",
               stderr=True, stdout=True)
    assert "Handshake status 400" in denied.value.reason  # the client words a refused upgrade so



def test_exec_ends_with_its_client_and_with_its_container(core, gated_pod):
    """Nothing an exec started outlives its session: a client that leaves kills the command; a
    container that ends takes the commands exec'd in it (137, SIGKILL)."""
    import psutil

    name, gate = gated_pod
    ws = stream(core.connect_get_namespaced_pod_exec, name, NS, command=["sh", "-c", "echo $$; exec sleep 600"],
                stderr=True, stdout=True, _preload_content=False)
    pid = int(eventually(lambda: (ws.update(timeout=1), ws.peek_stdout())[1], 60, what="the command's pid").strip())
    assert psutil.pid_exists(pid)
    ws.close()
    eventually(lambda: not pid_alive(pid), 60, what="the command to be killed")  # gone or a zombie, in one read
    ws = stream(core.connect_get_namespaced_pod_exec, name, NS, command=["sh", "-c", "echo started; exec sleep 600"],
                stderr=True, stdout=True, _preload_content=False)
    eventually(lambda: (ws.update(timeout=1), ws.peek_stdout())[1], 60, what="the command to start")
    gate.touch()  # the container ends
    ws.run_forever(timeout=120)
    assert ws.returncode == 137

# --- metrics.k8s.io: kubectl top ---------------------------------------------------
def test_top_pods_and_nodes_from_the_processes(kubectl, gated_pod):
    name, _ = gated_pod
    rows = {_columns(line)[0]: _columns(line) for line in kubectl.ok("top", "pods").splitlines()[1:]}
    assert name in rows, rows
    cpu, memory = rows[name][1:3]
    assert re.fullmatch(r"\d+m", cpu) and re.fullmatch(r"\d+Mi", memory), rows[name]
    node = kubectl.ok("top", "nodes").splitlines()
    assert node[0].split()[:3] == ["NAME", "CPU(cores)", "CPU(%)"], node
    nodes = {_columns(line)[0]: _columns(line) for line in node[1:]}
    assert sorted(nodes) == ["gpu-worker-0", "master-0", "master-1", "master-2", "worker-0", "worker-1"], node
    where = kubectl.ok("get", "pod", name, "-o", "jsonpath={.spec.nodeName}").strip()
    assert int(nodes[where][3].rstrip("Mi")) > 0, node  # a node's usage is its pods'
    assert nodes["master-0"][1:4:2] == ["0m", "0Mi"], node  # no workload runs on a control-plane node
    # the DSPA's Role has no metrics.k8s.io
    denied = kubectl("top", "pods", runner=True)
    assert (f'pods.metrics.k8s.io is forbidden: User "{RUNNER}" cannot list resource "pods" in API group '
            '"metrics.k8s.io" in the namespace "sandbox"') in denied.stderr, denied.stderr
    missing = kubectl("top", "pod", "no-such-pod")
    assert 'pods.metrics.k8s.io "sandbox/no-such-pod" not found' in missing.stderr, missing.stderr


def _columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


# --- on a real Ray head -------------------------------------------------------------
@pytest.fixture(scope="module")
def head(ray_cluster, box):
    from kfp_ray_sandbox.client import SandboxClient
    core = client.CoreV1Api(SandboxClient(box.info).api_client())
    pods = core.list_namespaced_pod(NS, label_selector="ray.io/cluster=shared-ray,ray.io/node-type=head").items
    assert pods, "shared-ray has no head pod"
    return pods[0]


def test_exec_ray_status_in_the_head_pod(kubectl, head):
    def status():
        out = kubectl.ok("exec", head.metadata.name, "--", "ray", "status", timeout=180)
        # a head just ready may not have reported yet ("No cluster status"): asked again, as a user would
        return out if "Node status" in out else None
    out = eventually(status, 180, 2, what="`ray status` in the head pod to report its node")
    assert re.search(r"\b2\.0 CPU\b|/2\.0 CPU", out), out


def test_pods_logs_and_wait_on_a_real_cluster(kubectl, ray_cluster):
    head = kubectl.ok("get", "pods", "-l", "ray.io/cluster=shared-ray,ray.io/node-type=head",
                      "-o", "jsonpath={.items[0].metadata.name}").strip()
    assert head
    assert "condition met" in kubectl.ok("wait", "--for=condition=Ready", f"pod/{head}", "--timeout=60s")
    assert kubectl.ok("get", "pod", head, "-o", "jsonpath={.status.phase}") == "Running"
    describe = kubectl.ok("describe", "pod", head)
    assert re.search(r"^Status:\s+Running$", describe, re.M) and "Events:" in describe
    for runner in (False, True):  # pipeline-runner may read pods/log
        logs = kubectl.ok("logs", head, runner=runner)
        assert logs.strip(), "the head pod's log is empty"
    assert re.search(r"^Name:\s+shared-ray$", kubectl.ok("describe", "raycluster", "shared-ray"), re.M)
    assert "shared-ray" in kubectl.ok("get", "workloads")


def test_port_forward_through_the_python_client(core, head):
    pf = portforward(core.connect_get_namespaced_pod_portforward, head.metadata.name, NS, ports="8265")
    sock = pf.socket(8265)
    try:
        sock.setblocking(True)
        sock.settimeout(60)
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    head_, _, body = data.partition(b"\r\n\r\n")
    assert head_.startswith(b"HTTP/1.1 200"), data[:300]
    assert json.loads(body)["ray_version"], body
    assert pf.error(8265) is None


def test_kubectl_port_forward_to_the_head_service_then_ray_job_submit(kubectl, head, sbx, tmp_path):
    """The issue's recipe: `kubectl port-forward svc/<name>-head-svc 8265` (SPDY tunneled through a
    WebSocket), then `ray job submit --address http://localhost:<port>` through it, logs included."""
    proc = kubectl.start("port-forward", "svc/shared-ray-head-svc", ":8265")
    try:
        line = _lines(proc).get(timeout=60)
        assert line and line.startswith("Forwarding from 127.0.0.1:"), line
        port = int(line.split(":")[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=60) as resp:
            assert json.loads(resp.read())["ray_version"]
        ray = Path(sys.executable).parent / "ray"
        done = subprocess.run([str(ray), "job", "submit", "--address", f"http://127.0.0.1:{port}", "--",
                               "python", "-c", "print('hello from the job')"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "hello from the job" in done.stdout and "succeeded" in done.stdout, done.stdout
        assert proc.poll() is None  # still forwarding
        # one WebSocket upgrade (GET, authorized as get), no SPDY fallback
        upgrades = [e for e in sbx.audit() if e["path"].endswith(f"/pods/{head.metadata.name}/portforward")]
        assert upgrades and {(e["method"], e["verb"], e["code"]) for e in upgrades} == {("GET", "get", 101)}
    finally:
        proc.terminate()
        finish(proc)
    # the DSPA's Role has no pods/portforward
    denied = kubectl("port-forward", f"pod/{head.metadata.name}", ":8265", runner=True)
    assert denied.returncode == 1
    assert (f'pods "{head.metadata.name}" is forbidden: User "{RUNNER}" cannot create resource "pods/portforward" '
            'in API group "" in the namespace "sandbox"') in denied.stderr, denied.stderr


# --- SPDY, as kubectl falls back to it (or is told to use it) -----------------------
SPDY_ONLY = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}


def _spdy_kubectl(kubectl, *args, stdin=None):
    return subprocess.run(kubectl.argv(args, False), capture_output=True, text=True, timeout=120, input=stdin,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(kubectl.cache), **SPDY_ONLY})


def test_exec_over_spdy(kubectl, gated_pod, sbx):
    name, _ = gated_pod
    done = _spdy_kubectl(kubectl, "exec", name, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert done.returncode == 3 and done.stdout == "out\n", done.stderr
    assert "err\n" in done.stderr and "command terminated with exit code 3" in done.stderr
    done = _spdy_kubectl(kubectl, "exec", "-i", name, "--", "cat", stdin="through SPDY\n")
    assert done.returncode == 0 and done.stdout == "through SPDY\n", done.stderr
    upgrades = [e for e in sbx.audit() if e["path"].endswith(f"/pods/{name}/exec") and e["method"] == "POST"
                and e["user"] == "kube:admin"]
    assert upgrades and {(e["verb"], e["code"]) for e in upgrades} == {("create", 101)}


def test_kubectl_port_forward_over_spdy(kubectl, head, sbx):
    proc = subprocess.Popen(kubectl.argv(("port-forward", f"pod/{head.metadata.name}", ":8265"), False),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(kubectl.cache), **SPDY_ONLY})
    try:
        line = _lines(proc).get(timeout=60)
        assert line and line.startswith("Forwarding from 127.0.0.1:"), line
        port = int(line.split(":")[1].split()[0])
        for _ in range(2):  # a connection each
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=60) as resp:
                assert json.loads(resp.read())["ray_version"]
        upgrades = [e for e in sbx.audit() if e["path"].endswith(f"/pods/{head.metadata.name}/portforward")
                    and e["method"] == "POST" and e["user"] == "kube:admin"]
        assert upgrades and {(e["verb"], e["code"]) for e in upgrades} == {("create", 101)}
    finally:
        proc.terminate()
        finish(proc)
