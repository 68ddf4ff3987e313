"""NetworkPolicies: the ones RHOAI 3.x's KubeRay makes for a RayCluster (sandbox/netpol.py), read
as networking/v1 reads them, and enforced by the sandbox's kube-proxy on the connections whose
source is a pod's address (a pipeline pod of another namespace cannot reach the head's client
port; the namespace's own pods can). No Ray processes."""

from __future__ import annotations

import socket

import pytest
import yaml

from kfp_ray_sandbox import netpol
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.controllers.kuberay_rhoai import RhoaiKubeRay
from kfp_ray_sandbox.controllers.namespaces import prepare_namespace
from kfp_ray_sandbox.faults import Faults
from kfp_ray_sandbox.network import Network
from kfp_ray_sandbox.proxy import KubeProxy
from kfp_ray_sandbox.raynode import free_port
from tests.unit.apiserver_http import KUBECTL, Api
from tests.unit.test_proxy import echo, talk  # noqa: F401 - the echo fixture

NS = "sandbox"
RC = {"metadata": {"name": "c", "namespace": NS, "uid": "u1"}}


def _pod(name: str, ns: str, labels: dict, ip: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "main", "ports": [{"name": "client", "containerPort": 10001}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


def _ns_labels(ns: str) -> dict:
    return {"kubernetes.io/metadata.name": ns}


HEAD = _pod("c-head", NS, {"ray.io/cluster": "c", "ray.io/node-type": "head"})
WORKER = _pod("c-worker", NS, {"ray.io/cluster": "c", "ray.io/node-type": "worker"})


@pytest.mark.parametrize("source,ns,port,ok", [
    (WORKER, NS, 6379, True),  # the cluster's own pods: any port
    (_pod("task", NS, {}), NS, 10001, True),  # the namespace's pods: client and dashboard
    (_pod("task", NS, {}), NS, 8265, True),
    (_pod("task", NS, {}), NS, 6379, False),  # ... not the GCS
    (_pod("task", "other", {}), "other", 10001, False),  # another namespace: not the client port
    (_pod("task", "other", {}), "other", 8443, True),  # anyone: kube-rbac-proxy
    (_pod("op", "redhat-ods-applications", {"app.kubernetes.io/name": "kuberay"}), "redhat-ods-applications", 8265, True),
    (_pod("gw", "openshift-ingress", {}), "openshift-ingress", 8265, True),
    (_pod("gw", "openshift-ingress", {}), "openshift-ingress", 10001, False),
])
def test_kuberays_head_policy_as_networking_v1_reads_it(source, ns, port, ok):
    policies = [{**netpol.head_policy(RC), "metadata": {**netpol.head_policy(RC)["metadata"], "namespace": NS}}]
    assert netpol.allowed(policies, HEAD, port, source, _ns_labels(ns)) is ok


def test_workers_take_only_their_clusters_pods_and_a_rayjobs_submitter_reaches_the_head():
    workers = {**netpol.worker_policy(RC), "metadata": {**netpol.worker_policy(RC)["metadata"], "namespace": NS}}
    assert netpol.allowed([workers], WORKER, 6379, HEAD, _ns_labels(NS))
    assert not netpol.allowed([workers], WORKER, 10001, _pod("task", NS, {}), _ns_labels(NS))
    assert netpol.allowed([workers], HEAD, 6379, _pod("task", NS, {}), _ns_labels(NS))  # not selected: open
    owned = {"metadata": {**RC["metadata"], "ownerReferences": [{"kind": "RayJob", "name": "job"}]}}
    head = {**netpol.head_policy(owned), "metadata": {**netpol.head_policy(owned)["metadata"], "namespace": NS}}
    submitter = _pod("job-abcde", NS, {"batch.kubernetes.io/job-name": "job"})
    assert netpol.allowed([head], HEAD, 6379, submitter, _ns_labels(NS))


def test_rhoai_kuberay_creates_both_policies_owned_by_the_cluster():
    reg, store = Registry(gateway_api=True), Store()
    store.validation.append(prepare_namespace)
    store.create(reg.get("", "namespaces"), {"metadata": {"name": NS}})
    rc = store.create(reg.get("ray.io", "rayclusters"), {"metadata": {"name": "c", "namespace": NS,
                                                                       "annotations": {"odh.ray.io/secure-trusted-network": "true"}},
                                                          "spec": {"headGroupSpec": {"template": {"spec": {"containers": []}}}}})
    RhoaiKubeRay(store, reg, Faults())._ensure_network_policies(rc)
    made = {p["metadata"]["name"]: p for p in store.list(reg.get("networking.k8s.io", "networkpolicies"), NS)[0]}
    assert set(made) == {"c-head", "c-workers"}
    head = made["c-head"]
    assert head["metadata"]["ownerReferences"][0]["uid"] == rc["metadata"]["uid"]
    assert head["metadata"]["labels"] == {"ray.io/cluster": "c", "app.kubernetes.io/name": "kuberay",
                                          "app.kubernetes.io/created-by": "kuberay-operator"}
    assert head["spec"]["podSelector"] == {"matchLabels": {"ray.io/cluster": "c", "ray.io/node-type": "head"}}
    assert head["spec"]["ingress"][-1] == {"ports": [{"protocol": "TCP", "port": 8443}]}


def test_the_kube_proxy_drops_another_namespaces_pod_and_relays_the_namespaces_own(echo):  # noqa: F811
    reg, store, net = Registry(), Store(), Network()
    store.validation += [prepare_namespace, net.allocate_service_ip]
    for ns in (NS, "other"):
        store.create(reg.get("", "namespaces"), {"metadata": {"name": ns}})
    pod_t = reg.get("", "pods")
    head_ip, mine_ip, theirs_ip = net.allocate(), net.allocate(), net.allocate()
    store.create(pod_t, {**HEAD, "status": {**HEAD["status"], "podIP": head_ip}})
    store.create(pod_t, _pod("task", NS, {}, mine_ip))
    store.create(pod_t, _pod("task", "other", {}, theirs_ip))
    port = free_port()
    svc = store.create(reg.get("", "services"), {"metadata": {"name": "c-head-svc", "namespace": NS},
                                                 "spec": {"selector": {"ray.io/cluster": "c", "ray.io/node-type": "head"},
                                                          "ports": [{"name": "client", "port": port, "targetPort": 10001}]}})
    policy = netpol.head_policy(RC)
    policy["metadata"]["namespace"] = NS
    store.create(reg.get("networking.k8s.io", "networkpolicies"), policy)
    proxy = KubeProxy(store, reg, net, lambda pod, p: echo if p == 10001 else None)
    try:
        proxy.reconcile()
        addr = (svc["spec"]["clusterIP"], port)
        assert talk(addr) == b"ping"  # from 127.0.0.1: no pod's address, not judged

        def from_ip(ip: str) -> socket.socket:
            s = socket.socket()
            s.bind((ip, 0))
            s.settimeout(5)
            s.connect(addr)
            s.sendall(b"ping")
            return s

        with from_ip(mine_ip) as s:
            got = b""
            while len(got) < 4 and (chunk := s.recv(4 - len(got))):
                got += chunk
            assert got == b"ping"  # the namespace's own pod may use the client port
        with from_ip(theirs_ip) as s:
            s.settimeout(0.5)
            with pytest.raises(TimeoutError):
                s.recv(1)  # dropped: accepted by the loopback, never answered
    finally:
        proxy.stop()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_applies_explains_and_lists_network_policies(tmp_path):
    api = Api(tmp_path)
    try:
        manifest = tmp_path / "policy.yaml"
        policy = netpol.worker_policy(RC)
        policy["metadata"]["name"] = "deny-but-cluster"
        manifest.write_text(yaml.safe_dump(policy))
        applied = api.kubectl("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.strip() == "networkpolicy.networking.k8s.io/deny-but-cluster created"
        listed = api.kubectl("get", "netpol", "-o", "name")
        assert listed.stdout.split() == ["networkpolicy.networking.k8s.io/deny-but-cluster"], listed.stderr
        explained = api.kubectl("explain", "networkpolicy.spec.ingress.from")
        assert explained.returncode == 0 and "namespaceSelector" in explained.stdout, explained.stderr
    finally:
        api.stop()
