"""KubeRay v1.4 and the CodeFlare operator v1.16.0, driven pass by pass (no Ray processes):
the operator's webhook and finalizer, the head Service while suspended, states and
condition reasons, ReplicaFailure on refused pod creates, and the kubelet's view of the
oauth-proxy sidecar with a stand-in for the Ray process."""

from __future__ import annotations

import hashlib
import re
import threading
import time

import pytest

from kfp_ray_sandbox.apiserver.errors import ApiError
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers import kubelet as kubelet_mod
from kfp_ray_sandbox.controllers.codeflare import CERT_GENERATOR_IMAGE, OAUTH_PROXY_IMAGE, CodeFlareOperator
from kfp_ray_sandbox.controllers.kubelet import Kubelet
from kfp_ray_sandbox.controllers.kuberay import KubeRayController
from kfp_ray_sandbox.controllers.node import NodeController
from kfp_ray_sandbox.core import install_builtin_admission, wait_until
from kfp_ray_sandbox.faults import Faults
from kfp_ray_sandbox.network import Network
from tests.helpers import raycluster

NS = "sandbox"


def unique(s: str) -> str:
    """The operator's RCCUniqueName, computed independently."""
    return f"{s}-{hashlib.sha256(('codeflare-raycluster-controller' + s).encode()).hexdigest()[:8]}"


class Env:
    def __init__(self, head_cluster_ip: bool = True):
        self.reg, self.store, self.faults, self.net = Registry(), Store(), Faults(), Network()
        install_builtin_admission(self.store, self.reg, self.net, self.faults)
        self.store.create(self.reg.get("", "namespaces"), {"metadata": {"name": NS}})
        self.codeflare = CodeFlareOperator(self.store, self.reg, self.faults)
        self.kuberay = KubeRayController(self.store, self.reg, self.codeflare, head_cluster_ip=head_cluster_ip)
        self.t = {k: self.reg.get(*k) for k in [("ray.io", "rayclusters"), ("", "pods"), ("", "services"),
                                                  ("", "secrets"), ("", "serviceaccounts"), ("", "events"),
                                                  ("route.openshift.io", "routes")]}

    def create(self, body: dict, suspend: bool = True) -> dict:
        """As the apiserver does: mutating webhooks (Kueue's suspend, CodeFlare's), then store."""
        body["metadata"]["namespace"] = NS
        body["spec"]["suspend"] = suspend
        self.codeflare.admission("CREATE", self.t["ray.io", "rayclusters"], body, None)
        return self.store.create(self.t["ray.io", "rayclusters"], body)

    def rc(self, name: str) -> dict | None:
        return self.store.find(self.t["ray.io", "rayclusters"], NS, name)

    def status(self, name: str) -> dict:
        return (self.rc(name) or {}).get("status") or {}

    def cond(self, name: str, type_: str) -> dict | None:
        return next((c for c in self.status(name).get("conditions") or [] if c["type"] == type_), None)

    def pods(self, name: str) -> list[dict]:
        return [p for p in self.store.list(self.t["", "pods"], NS)[0] if p["metadata"]["labels"].get("ray.io/cluster") == name]

    def events(self, reason: str) -> list[dict]:
        return [e for e in self.store.list(self.t["", "events"], NS)[0] if e["reason"] == reason]

    def set_spec(self, name: str, **spec) -> None:
        self.store.mutate(self.t["ray.io", "rayclusters"], NS, name, lambda o: o["spec"].update(spec))

    def run_pods(self, name: str, ready: bool = True, reason: str = "", message: str = "") -> None:
        """Stand in for the kubelet: every pod Running, Ready or not."""
        for p in self.pods(name):
            cond = {"type": "Ready", "status": "True" if ready else "False"}
            if not ready:
                cond.update(reason=reason, message=message)
            self.store.mutate(self.t["", "pods"], NS, p["metadata"]["name"], lambda o, c=cond: o.update(
                status={"phase": "Running", "podIP": "127.0.0.50", "conditions": [c]}), subresource="status")

    def settle(self, passes: int = 4) -> None:
        for _ in range(passes):
            self.kuberay.reconcile()


@pytest.fixture
def env():
    return Env()


def test_codeflare_webhook_mutates_the_cluster_as_the_operator_writes_it(env):
    rc = env.create(raycluster("mut", workers=1))
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]
    sa = unique("mut-oauth-proxy")
    assert rc["metadata"]["annotations"]["ray.openshift.ai/version"] == "v1.16.0"
    assert [c["name"] for c in head["containers"]] == ["ray-head", "oauth-proxy"]
    proxy = head["containers"][1]
    assert proxy["image"] == OAUTH_PROXY_IMAGE and proxy["ports"] == [{"containerPort": 8443, "name": "oauth-proxy"}]
    assert proxy["args"][:4] == ["--https-address=:8443", "--provider=openshift", f"--openshift-service-account={sa}",
                                 "--upstream=http://localhost:8265"]
    assert proxy["args"][-1] == '--openshift-delegate-urls={"/":{"resource":"pods","namespace":"sandbox","verb":"get"}}'
    assert proxy["env"][0]["valueFrom"]["secretKeyRef"] == {"name": unique("mut-oauth-config"), "key": "cookie_secret"}
    assert head["serviceAccountName"] == sa
    worker = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    for spec in (head, worker):
        env_names = [e["name"] for e in spec["containers"][0]["env"]]
        assert env_names == ["MY_POD_IP", "RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT"]
        assert [(c["name"], c["image"]) for c in spec["initContainers"]] == [("create-cert", CERT_GENERATOR_IMAGE)]
        assert {"ca-vol", "server-cert"} <= {v["name"] for v in spec["volumes"]}
        assert [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]] == ["/home/ray/workspace/ca", "/home/ray/workspace/tls"]
    assert {v["name"]: v for v in head["volumes"]}["ca-vol"]["secret"]["secretName"] == unique("mut-ca-secret")
    assert "DNS.6 = mut-head-svc.sandbox.svc" in head["initContainers"][0]["command"][2]
    again = {**rc, "spec": dict(rc["spec"])}
    env.codeflare.admission("UPDATE", env.t["ray.io", "rayclusters"], again, rc)  # upserts: idempotent
    assert again["spec"] == rc["spec"]
    bad = raycluster("ingress")
    bad["spec"]["headGroupSpec"]["enableIngress"] = True
    with pytest.raises(ApiError) as exc:
        env.create(bad)
    assert exc.value.code == 403 and exc.value.message == (
        'admission webhook "vraycluster.ray.openshift.ai" denied the request: spec.headGroupSpec.enableIngress: '
        "Invalid value: true: RayCluster with enableIngress set to true is not allowed")


def test_suspended_cluster_has_its_finalizer_ca_secret_and_head_service_but_no_pods(env):
    env.create(raycluster("held", workers=1))
    env.settle()
    rc = env.rc("held")
    assert rc["metadata"]["finalizers"] == ["ray.openshift.ai/oauth-finalizer"]
    ca = env.store.get(env.t["", "secrets"], NS, unique("held-ca-secret"))
    assert ca["metadata"]["labels"] == {"ray.openshift.ai/cluster-name": "held"} and set(ca["data"]) == {"ca.crt", "ca.key"}
    svc = env.store.get(env.t["", "services"], NS, "held-head-svc")
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [
        ("client", 10001), ("dashboard", 8265), ("gcs-server", 6379), ("metrics", 8080), ("serve", 8000)]
    assert env.net.owns(svc["spec"]["clusterIP"]) and svc["spec"]["selector"]["ray.io/node-type"] == "head"
    assert svc["metadata"]["ownerReferences"][0]["uid"] == rc["metadata"]["uid"]
    assert env.pods("held") == []
    assert env.store.find(env.t["", "serviceaccounts"], NS, unique("held-oauth-proxy")) is None  # only once unsuspended
    assert env.store.find(env.t["route.openshift.io", "routes"], NS, "ray-dashboard-held") is None
    status = env.status("held")
    assert status["state"] == "suspended" and set(status["stateTransitionTimes"]) == {"suspended"}
    assert {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]} == {
        "HeadPodReady": ("False", "HeadPodNotFound", "Head Pod not found"),
        "RayClusterProvisioned": ("False", "RayClusterPodsProvisioning", "RayCluster has been suspended"),
        "RayClusterSuspended": ("True", "RayClusterSuspended", ""),
        "RayClusterSuspending": ("False", "RayClusterSuspending", ""),
    }
    assert status["endpoints"] == {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080", "serve": "8000"}
    assert status["head"] == {"serviceIP": svc["spec"]["clusterIP"], "serviceName": "held-head-svc"}


def test_admitted_cluster_gets_pods_route_and_oauth_account_then_ready_then_suspends_again(env):
    env.create(raycluster("life", workers=2))
    env.settle()
    env.set_spec("life", suspend=False)  # Kueue admits
    env.settle()
    sa = env.store.get(env.t["", "serviceaccounts"], NS, unique("life-oauth-proxy"))
    assert sa["metadata"]["annotations"]["serviceaccounts.openshift.io/oauth-redirectreference.first"].endswith(
        '"reference":{"kind":"Route","name":"ray-dashboard-life"}}')
    assert env.store.find(env.t["", "secrets"], NS, unique("life-oauth-config")) is not None
    svc = env.store.get(env.t["", "services"], NS, "life-head-svc")
    route = env.store.get(env.t["route.openshift.io", "routes"], NS, "ray-dashboard-life")
    assert route["spec"]["host"] == f"{svc['spec']['clusterIP']}:8265" and route["spec"]["to"]["name"] == "life-head-svc"
    pods = env.pods("life")
    head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    assert re.fullmatch(r"life-head-[a-z0-9]{5}", head["metadata"]["name"])
    assert head["spec"]["serviceAccountName"] == unique("life-oauth-proxy")
    assert [c["name"] for c in head["spec"]["containers"]] == ["ray-head", "oauth-proxy"]
    assert "ray start --head " in head["spec"]["containers"][0]["args"][0]
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert len(workers) == 2 and all(w["metadata"]["name"].startswith("life-small-group-worker-") for w in workers)
    assert "--address=life-head-svc.sandbox.svc.cluster.local:6379" in workers[0]["spec"]["containers"][0]["args"][0]
    assert "state" in env.status("life") and env.status("life")["state"] == "suspended"  # kept until all pods are ready
    assert env.cond("life", "RayClusterSuspended")["status"] == "False"

    env.run_pods("life")
    env.settle()
    status = env.status("life")
    assert status["state"] == "ready" and set(status["stateTransitionTimes"]) == {"suspended", "ready"}
    assert (status["readyWorkerReplicas"], status["availableWorkerReplicas"], status["desiredWorkerReplicas"]) == (2, 2, 2)
    assert (env.cond("life", "HeadPodReady")["status"], env.cond("life", "HeadPodReady")["reason"]) == ("True", "HeadPodRunningAndReady")
    assert env.cond("life", "RayClusterProvisioned")["reason"] == "AllPodRunningAndReadyFirstTime"
    assert status["head"]["podName"] == head["metadata"]["name"] and status["head"]["podIP"] == "127.0.0.50"

    env.run_pods("life", ready=False, reason="ContainersNotReady", message="containers with unready status: [oauth-proxy]")
    env.settle()
    assert env.status("life")["state"] == "ready"  # KubeRay never takes `ready` back
    head_ready = env.cond("life", "HeadPodReady")
    assert (head_ready["status"], head_ready["reason"], head_ready["message"]) == (
        "False", "ContainersNotReady", "containers with unready status: [oauth-proxy]")
    assert env.cond("life", "RayClusterProvisioned")["status"] == "True"  # set once, kept

    env.set_spec("life", suspend=True)  # Kueue evicts
    env.kuberay.reconcile()
    assert env.cond("life", "RayClusterSuspending")["status"] == "True"
    env.settle()
    assert env.pods("life") == []  # never scheduled here, so deleted at once
    assert env.status("life")["state"] == "suspended" and env.cond("life", "RayClusterSuspended")["status"] == "True"


def test_exceed_quota_fault_sets_replica_failure_with_kuberays_event_then_recovers(env):
    env.faults.set({"clusters": {"quota": {"exceed_quota": True}}})
    env.create(raycluster("quota", workers=1), suspend=False)
    wait_until(lambda: env.kuberay.reconcile() or env.cond("quota", "ReplicaFailure"), 10, "ReplicaFailure")
    failure = env.cond("quota", "ReplicaFailure")
    assert failure["status"] == "True" and failure["reason"] == "FailedCreateHeadPod"
    assert re.fullmatch(r'FailedCreateHeadPod\npods "quota-head-[a-z0-9]{5}" is forbidden: exceeded quota: '
                        r"compute-resources, requested: pods=1, used: pods=0, limited: pods=0", failure["message"])
    event = env.events("FailedToCreateHeadPod")[0]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "quota"
    assert event["message"].startswith('Failed to create head Pod sandbox/, pods "quota-head-')
    assert event["source"]["component"] == "raycluster-controller"
    assert env.pods("quota") == [] and "state" not in env.status("quota")
    env.faults.clear()
    wait_until(lambda: env.kuberay.reconcile() or (env.pods("quota") and not env.cond("quota", "ReplicaFailure")), 30,
               "KubeRay to retry after its backoff and create the pods")
    assert len(env.pods("quota")) == 2


def test_a_refused_worker_create_is_failed_create_worker_pod(env):
    body = raycluster("wk", workers=1)
    body["spec"]["workerGroupSpecs"][0]["template"]["spec"]["serviceAccountName"] = "missing-sa"
    env.create(body, suspend=False)
    wait_until(lambda: env.kuberay.reconcile() or env.cond("wk", "ReplicaFailure"), 10, "ReplicaFailure")
    failure = env.cond("wk", "ReplicaFailure")
    assert failure["reason"] == "FailedCreateWorkerPod"
    assert failure["message"] == ('FailedCreateWorkerPod\npods "wk-small-group-worker-" is forbidden: error looking up '
                                  'service account sandbox/missing-sa: serviceaccount "missing-sa" not found')
    assert env.events("FailedToCreateWorkerPod")[0]["message"].startswith(
        'Failed to create worker Pod for the cluster sandbox/wk, pods "wk-small-group-worker-" is forbidden')
    assert [p["metadata"]["labels"]["ray.io/node-type"] for p in env.pods("wk")] == ["head"]


def test_deletion_waits_for_the_codeflare_finalizer_then_everything_goes(env):
    env.faults.set({"platform": {"finalizer_delay_s": 0.5}})
    env.create(raycluster("bye", workers=1))
    env.settle()
    env.set_spec("bye", suspend=False)
    env.settle()
    assert len(env.pods("bye")) == 2
    deleted = env.store.delete(env.t["ray.io", "rayclusters"], NS, "bye")
    started = time.monotonic()
    assert deleted["metadata"]["deletionTimestamp"] and deleted["metadata"]["finalizers"] == ["ray.openshift.ai/oauth-finalizer"]
    env.kuberay.reconcile()
    assert env.rc("bye") is not None  # held by the operator's finalizer
    wait_until(lambda: env.kuberay.reconcile() or env.rc("bye") is None, 10, "the finalizer to be removed")
    assert time.monotonic() - started >= 0.5
    assert env.pods("bye") == []
    for kind in (("", "services"), ("", "secrets"), ("", "serviceaccounts"), ("route.openshift.io", "routes")):
        assert [o["metadata"]["name"] for o in env.store.list(env.t[kind], NS)[0]] == [], kind


def test_headless_head_service_as_kuberay_makes_it_on_rhoai():
    env = Env(head_cluster_ip=False)
    env.create(raycluster("hl", workers=0), suspend=False)
    env.settle()
    svc = env.store.get(env.t["", "services"], NS, "hl-head-svc")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    env.run_pods("hl")
    env.settle()
    assert env.status("hl")["head"]["serviceIP"] == "127.0.0.50"  # the head pod's address


# --- the kubelet, with a stand-in for the Ray process ------------------------------------
class FakeNode:
    """Stands in for RayNode: a 'process' that is ready at once and obeys SIGTERM unless told."""

    def __init__(self, name, ip, *, head, ignore_sigterm=False, extra_args=None, **kw):
        self.name, self.ip, self.head = name, ip, head
        self.temp_dir = f"/tmp/fake-{name}"
        self._alive, self.ignore_sigterm, self.signals = False, ignore_sigterm, []
        self.fails = bool(extra_args)  # the kubelet's crash_loop arguments: `ray start` exits with 2

    def start(self):
        self._alive = not self.fails

    def alive(self):
        return self._alive

    def ready(self):
        return self._alive

    def terminate(self):
        self.signals.append("TERM")
        if not self.ignore_sigterm:
            self._alive = False

    def stop(self, grace=10.0, remove=True):
        if self._alive:
            self.signals.append("KILL")
        self._alive = False

    def crash(self):
        self._alive = False

    def exit_code(self):
        return None if self._alive else (2 if self.fails else 137 if "KILL" in self.signals else 1)

    def pids(self):
        return [1] if self._alive else []

    def log_tail(self, lines=200):
        return ""

    def log_size(self):
        return 0


@pytest.fixture
def node(env, monkeypatch, tmp_path):
    made: list[FakeNode] = []
    ignore = threading.Event()

    def factory(*args, **kw):
        n = FakeNode(*args, ignore_sigterm=ignore.is_set(), **{k: v for k, v in kw.items() if k in ("head", "extra_args")})
        made.append(n)
        return n

    monkeypatch.setattr(kubelet_mod, "RayNode", factory)
    NodeController(env.store, env.reg, tmp_path).reconcile()  # the pool the scheduler places pods on
    kl = Kubelet(env.store, env.reg, env.net, env.faults, tmp_path)
    yield kl, made, ignore
    kl.shutdown()


def started_cluster(env, kl, name, platform=None, **faults):
    if faults:
        env.faults.set({"clusters": {name: faults}, "platform": platform or {}})
    env.create(raycluster(name, workers=0), suspend=False)
    env.settle()
    wait_until(lambda: kl.reconcile() or env.pods(name) and env.pods(name)[0]["spec"].get("nodeName"), 10, "the head to be bound")


def head_status(env, name):
    return env.pods(name)[0]["status"]


def test_sidecar_image_pull_leaves_the_ray_container_running_and_the_head_not_ready(env, node):
    kl, made, _ = node
    started_cluster(env, kl, "side", image_pull="oauth-proxy", platform={"kubelet_backoff_s": 0.05})

    def reported():
        kl.reconcile()
        st = {c["name"]: c for c in head_status(env, "side").get("containerStatuses") or []}
        ray = st.get("ray-head") or {}
        # running comes first, ready once Ray answers (the kubelet's next status): wait for both
        return "running" in ray.get("state", {}) and ray.get("ready") is True and st
    statuses = wait_until(reported, 10, "the Ray container to run, and be ready, beside the failing sidecar")
    assert made and made[0].alive()
    assert statuses["oauth-proxy"]["state"]["waiting"]["reason"] in ("ErrImagePull", "ImagePullBackOff")
    status = head_status(env, "side")
    assert status["phase"] == "Running"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False", "ContainersNotReady", "containers with unready status: [oauth-proxy]")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert any(e["message"].startswith(f'Failed to pull image "{OAUTH_PROXY_IMAGE}": rpc error')
               for e in env.events("Failed"))
    wait_until(lambda: kl.reconcile() or env.events("BackOff"), 10, "the image's back-off")
    assert env.events("BackOff")[0]["message"] == f'Back-off pulling image "{OAUTH_PROXY_IMAGE}"'
    env.settle()
    assert env.cond("side", "HeadPodReady")["message"] == "containers with unready status: [oauth-proxy]"


def test_ray_container_image_pull_never_starts_ray(env, node):
    kl, made, _ = node
    started_cluster(env, kl, "pull", image_pull=True, platform={"kubelet_backoff_s": 0.05})
    kl.reconcile()
    kl.reconcile()
    status = head_status(env, "pull")
    ray, sidecar = status["containerStatuses"]
    image = "quay.io/modh/ray:2.52.1-py311-cu121"
    assert ray["state"]["waiting"] == {"reason": "ErrImagePull", "message": (
        f"rpc error: code = Unknown desc = initializing source docker://{image}: reading manifest 2.52.1-py311-cu121 "
        "in quay.io/modh/ray: manifest unknown")} and status["phase"] == "Pending"

    def backing_off():
        kl.reconcile()
        return head_status(env, "pull")["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    wait_until(backing_off, 10, "the image's back-off")
    assert head_status(env, "pull")["containerStatuses"][0]["state"]["waiting"]["message"] == f'Back-off pulling image "{image}"'
    assert made == []


def test_image_pulls_that_fail_for_a_while_then_succeed_start_ray(env, node):
    """A registry outage (image_pull_failures): failed pulls, then the pull works and Ray starts."""
    kl, made, _ = node
    started_cluster(env, kl, "flaky", image_pull_failures=2, platform={"kubelet_backoff_s": 0.05})
    kl.reconcile()
    ray = head_status(env, "flaky")["containerStatuses"][0]
    assert ray["state"]["waiting"]["reason"] == "ErrImagePull" and "i/o timeout" in ray["state"]["waiting"]["message"]
    wait_until(lambda: kl.reconcile() or "running" in head_status(env, "flaky")["containerStatuses"][0]["state"], 10,
               "the pull to succeed and Ray to start")
    assert len(made) == 1 and len([e for e in env.events("Failed") if e["message"].startswith("Failed to pull")]) >= 1
    assert any(e["message"].startswith('Successfully pulled image "quay.io/modh/ray') for e in env.events("Pulled"))


def test_a_container_that_keeps_exiting_is_restarted_with_the_kubelets_back_off(env, node):
    """kuberuntime doBackOff (v1.31): restarted at once after its first exit, then waiting in
    CrashLoopBackOff for base x 2^(n-1) (base 10 s there, 0.05 s here)."""
    kl, made, _ = node
    started_cluster(env, kl, "loop", crash_loop=True, platform={"kubelet_backoff_s": 0.05})
    seen = {}

    def looping():
        kl.reconcile()
        ray = head_status(env, "loop")["containerStatuses"][0]
        waiting = ray["state"].get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff":
            seen[ray["restartCount"]] = (waiting["message"], ray["lastState"]["terminated"])
        return len(seen) >= 2 and max(seen) >= 3
    wait_until(looping, 20, "CrashLoopBackOff after three restarts")
    pod = env.pods("loop")[0]
    who = f"{pod['metadata']['name']}_sandbox({pod['metadata']['uid']})"
    n = max(seen)
    message, terminated = seen[n]
    assert message == f"back-off {int(50 * 2 ** (n - 1))}ms restarting failed container=ray-head pod={who}"
    assert terminated["exitCode"] == 2 and terminated["reason"] == "Error" and terminated["finishedAt"]
    assert len(made) >= n and not any(m.alive() for m in made)
    assert any(e["message"] == f"Back-off restarting failed container ray-head in pod {who}" for e in env.events("BackOff"))
    env.faults.set({"platform": {"kubelet_backoff_s": 0.05}})  # the fault is gone: the next start works

    def running():
        kl.reconcile()
        ray = head_status(env, "loop")["containerStatuses"][0]
        return "running" in ray["state"] and ray["ready"] and ray
    ray = wait_until(running, 20, "the container to run again")
    assert ray["restartCount"] >= n + 1 and ray["lastState"]["terminated"]["exitCode"] == 2


def test_kubelet_terminates_gracefully_then_deletes_the_pod(env, node):
    kl, made, ignore = node
    started_cluster(env, kl, "term")
    wait_until(lambda: kl.reconcile() or (made and made[0].alive()), 10, "the stand-in Ray node to start")
    pod = env.pods("term")[0]
    env.store.delete(env.t["", "pods"], NS, pod["metadata"]["name"], grace_period_seconds=20)
    wait_until(lambda: kl.reconcile() or not env.pods("term"), 10, "the pod to be deleted by the kubelet")
    assert made[0].signals == ["TERM"]  # it stopped on SIGTERM: no SIGKILL needed
    assert [e["message"] for e in env.events("Killing")] == ["Stopping container ray-head"]


def test_kubelet_kills_what_ignores_sigterm_when_the_grace_period_ends(env, node):
    kl, made, ignore = node
    ignore.set()
    started_cluster(env, kl, "stubborn")
    wait_until(lambda: kl.reconcile() or (made and made[0].alive()), 10, "the stand-in Ray node to start")
    name = env.pods("stubborn")[0]["metadata"]["name"]
    started = time.monotonic()
    env.store.delete(env.t["", "pods"], NS, name, grace_period_seconds=3)
    kl.reconcile()
    assert env.store.get(env.t["", "pods"], NS, name)["metadata"]["deletionGracePeriodSeconds"] == 3
    wait_until(lambda: kl.reconcile() or env.store.find(env.t["", "pods"], NS, name) is None, 15, "SIGKILL and removal")
    assert made[0].signals == ["TERM", "KILL"] and time.monotonic() - started >= 3


def test_kubelet_leaves_a_steady_pods_status_alone_and_still_writes_a_crash(env, node):
    """Passes over a steady pod write nothing (its status, once written, is its own fixed point:
    what lets Kubelet._refresh skip a sync while neither the pod nor its container changed), and
    that skip never hides a container's crash."""
    kl, made, _ = node
    started_cluster(env, kl, "steady")

    def ready():
        kl.reconcile()
        ray = (head_status(env, "steady").get("containerStatuses") or [{}])[0]
        return ray.get("ready") is True
    wait_until(ready, 10, "the stand-in Ray node to be ready")
    rv = env.pods("steady")[0]["metadata"]["resourceVersion"]
    for _ in range(5):
        kl.reconcile()
    assert env.pods("steady")[0]["metadata"]["resourceVersion"] == rv  # nothing new: nothing written
    made[0].crash()

    def restarted():
        kl.reconcile()
        return head_status(env, "steady")["containerStatuses"][0]["restartCount"] >= 1
    wait_until(restarted, 10, "the crash to be written as a restart")
    assert env.pods("steady")[0]["metadata"]["resourceVersion"] != rv
