"""kfp_ray.kube: every request has connect/read timeouts (a server that accepts and never
answers cannot hang a task), retries stay bounded, and 401/403 fail at once with a message
that names who may not do what, and the fix. The client is built by kube.api_client() from a
kubeconfig, as in a task."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from kfp_ray import kube
from kfp_ray.errors import AccessDenied
from tests.unit.apiserver_kit import NS


def kubeconfig(path, server: str, token: str, ca: str | None = None) -> str:
    cluster = {"server": server, **({"certificate-authority": ca} if ca else {})}
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}]}))
    return str(path)


@pytest.fixture
def use(monkeypatch, tmp_path):
    """Point kfp_ray.kube at a kubeconfig (server, token), as KUBECONFIG does in a task."""
    def point(server: str, token: str = "t", ca: str | None = None):
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kubeconfig", server, token, ca))
        kube.api_client.cache_clear()

    yield point
    kube.api_client.cache_clear()


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers (a half-open peer)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held, stop = [], threading.Event()

    def accept():
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield sock.getsockname()[1], held
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    sock.close()


@pytest.mark.parametrize("scheme", ["https", "http"], ids=["tls-handshake-never-answered", "request-never-answered"])
def test_a_call_to_a_server_that_never_answers_gives_up_within_its_timeout(use, silent_server, monkeypatch, scheme):
    port, held = silent_server
    use(f"{scheme}://127.0.0.1:{port}")
    monkeypatch.setattr(kube, "TIMEOUTS", (0.3, 0.6))
    started = time.monotonic()
    with pytest.raises(Exception) as exc:  # noqa: B017,PT011 - urllib3's own timeout class, checked below
        kube.call(kube.core().list_namespaced_pod, NS, what="list pods", attempts=1)
    took = time.monotonic() - started
    assert held, "the server never saw the connection"
    assert took < 0.6 + 1.5, took  # one try: within connect + read, plus slack
    assert "timed out" in str(exc.value).lower() or "timeout" in type(exc.value).__name__.lower(), exc.value

    # Retries are bounded: 3 tries, each within the timeout, with backoff in between.
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017,PT011
        kube.call(kube.core().list_namespaced_pod, NS, what="list pods", attempts=3)
    assert time.monotonic() - started < 3 * 0.6 + 0.35 + 0.7 + 2.0


def test_calls_outside_kube_call_get_the_timeouts_too(use, silent_server, monkeypatch):
    """The CodeFlare SDK and the Kueue hints call the shared client directly."""
    port, _ = silent_server
    monkeypatch.setattr(kube, "TIMEOUTS", (0.3, 0.6))
    use(f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017,PT011
        kube.core().list_namespaced_pod(NS)
    assert time.monotonic() - started < 2.5


def test_a_deadline_caps_the_request_timeout_and_the_retries(use, silent_server):
    port, _ = silent_server
    use(f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017,PT011
        kube.call(kube.core().list_namespaced_pod, NS, what="list pods", deadline=time.monotonic() + 1.0)
    assert time.monotonic() - started < 2.5  # not 6 tries of 30 s


@pytest.mark.parametrize("who,call,args,status,says", [
    ("runner", "custom.list_namespaced_custom_object", ("kueue.x-k8s.io", "v1beta1", NS, "workloads"), 403,
     ["pipeline-runner-dspa may not list workloads.kueue.x-k8s.io in namespace sandbox (list Workloads)",
      'cannot list resource "workloads" in API group "kueue.x-k8s.io"',
      "Fix: grant pipeline-runner-dspa `list` on workloads.kueue.x-k8s.io in namespace sandbox"]),
    ("runner", "core.list_namespaced_event", (NS,), 403,
     ["pipeline-runner-dspa may not list events in namespace sandbox", "Fix: grant pipeline-runner-dspa `list` on events"]),
    ("runner", "custom.patch_namespaced_custom_object", ("kueue.x-k8s.io", "v1beta1", NS, "localqueues", "q", {}), 403,
     ["pipeline-runner-dspa may not patch localqueues.kueue.x-k8s.io in namespace sandbox"]),
    ("nobody", "core.list_namespaced_pod", (NS,), 401,
     ["refused this task's credentials (401 Unauthorized) to list pods in namespace sandbox",
      "token is missing, expired or revoked"]),
], ids=["403-list-workloads", "403-list-events", "403-patch-localqueue", "401-bad-token"])
def test_401_and_403_fail_at_once_naming_verb_resource_and_fix(api, use, who, call, args, status, says):
    token = api.auth.pipeline_runner.token if who == "runner" else "not-a-token"
    use(api.url, token, api.ca_file)
    api_name, method = call.split(".")
    fn = getattr(getattr(kube, api_name)(), method)
    audit = api.audit._path
    before = _count(audit)
    with pytest.raises(AccessDenied) as exc:
        kube.call(fn, *args, what=dict(list_namespaced_custom_object="list Workloads").get(method, method))
    assert exc.value.status == status and kube.forbidden(exc.value) == (status == 403)
    for text in says:
        assert text in str(exc.value), str(exc.value)
    assert "HTTP response headers" not in str(exc.value)  # not the client's raw dump
    assert _count(audit) == before + 1  # no retry


def _count(audit) -> int:
    with open(audit) as fh:
        return sum(1 for _ in fh)
