"""kfp_ray.kube: every request has connect/read timeouts (a server that accepts and never
answers cannot hang a task), retries stay bounded, and 401/403 fail at once with a message
that names who may not do what, and the fix. The client is built by kube.api_client() from a
kubeconfig, as in a task."""

from __future__ import annotations

import functools
import json
import socket
import threading
import time

import pytest

from kfp_ray import kube, wait
from kfp_ray.errors import AccessDenied
from tests.helpers import eventually
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


HANG_S = 60.0  # a bound on a hang (a request without a timeout waits forever), never a measurement


def gives_up(fn) -> BaseException:
    """What fn raised; fails if it still waits after HANG_S (it has no timeout) or returns."""
    out: list = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"still waiting after {HANG_S:.0f}s on a server that never answers: no timeout"
    assert out[0] is not None, "the call to a server that never answers returned"
    return out[0]


def timed_out(exc: BaseException) -> bool:
    return "timed out" in str(exc).lower() or "timeout" in type(exc).__name__.lower()


@pytest.mark.parametrize("scheme", ["https", "http"], ids=["tls-handshake-never-answered", "request-never-answered"])
def test_a_call_to_a_server_that_never_answers_gives_up_on_its_timeout(use, silent_server, monkeypatch, scheme):
    """What ends the call is its timeout (a timeout error; without one it waits forever), one
    connection per try; no wall-clock figure is asserted (a busy machine only makes it slower)."""
    port, held = silent_server
    use(f"{scheme}://127.0.0.1:{port}")
    monkeypatch.setattr(kube, "TIMEOUTS", (0.3, 0.6))
    sleeps: list[float] = []
    monkeypatch.setattr(kube, "retry", functools.partial(wait.retry, sleep=sleeps.append))
    exc = gives_up(lambda: kube.call(kube.core().list_namespaced_pod, NS, what="list pods", attempts=1))
    assert timed_out(exc), exc
    eventually(lambda: len(held) == 1, what="one connection (one try)")  # the server accepts in a thread
    assert sleeps == [], sleeps

    # Retries are bounded: 3 tries, each ended by its timeout, with growing backoff in between.
    exc = gives_up(lambda: kube.call(kube.core().list_namespaced_pod, NS, what="list pods", attempts=3))
    assert timed_out(exc), exc
    eventually(lambda: len(held) == 1 + 3, what="three more connections (three tries)")
    assert len(sleeps) == 2 and sleeps[0] < sleeps[1], sleeps


def test_calls_outside_kube_call_get_the_timeouts_too(use, silent_server, monkeypatch):
    """The CodeFlare SDK and the Kueue hints call the shared client directly."""
    port, held = silent_server
    monkeypatch.setattr(kube, "TIMEOUTS", (0.3, 0.6))
    use(f"http://127.0.0.1:{port}")
    exc = gives_up(lambda: kube.core().list_namespaced_pod(NS))
    assert timed_out(exc), exc
    eventually(lambda: held, what="the connection")


def test_a_deadline_caps_the_request_timeout_and_the_retries(use, silent_server):
    """With the default TIMEOUTS (5 s, 30 s) and 6 tries, a deadline 1 s away: every request's
    timeout is capped by it, and no retry starts past it (not 6 tries of 30 s)."""
    port, held = silent_server
    use(f"http://127.0.0.1:{port}")
    api, asked = kube.core(), []

    def list_namespaced_pod(*args, **kwargs):  # the real call; what timeout kube.call gave it is recorded
        asked.append(kwargs["_request_timeout"])
        return api.list_namespaced_pod(*args, **kwargs)

    deadline = time.monotonic() + 1.0  # kube.call's clock: what is left of it only shrinks
    exc = gives_up(lambda: kube.call(list_namespaced_pod, NS, what="list pods", deadline=deadline))
    assert timed_out(exc), exc
    assert asked and len(asked) < 6, asked
    assert all(max(timeout) <= 1.0 for timeout in asked), asked  # at most what was left of the deadline
    eventually(lambda: len(held) == len(asked), what="one connection per try")


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
