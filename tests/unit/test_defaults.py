"""What kube-apiserver v1.31 fills in on core objects, seen by the real client after a create."""

from __future__ import annotations

import ipaddress

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kfp_ray_sandbox.apiserver import defaults
from tests.unit.apiserver_kit import NS, api_client, status_of


@pytest.fixture
def v1(api):
    return client.CoreV1Api(api_client(api, api.auth.admin))


def test_image_pull_policy_follows_the_tag():
    assert defaults.image_pull_policy("quay.io/modh/ray:2.52.1-py311-cu121") == "IfNotPresent"
    assert defaults.image_pull_policy("quay.io/modh/ray") == "Always"
    assert defaults.image_pull_policy("quay.io/modh/ray:latest") == "Always"
    assert defaults.image_pull_policy("localhost:5000/ray") == "Always"  # a registry port is no tag
    assert defaults.image_pull_policy("quay.io/modh/ray@sha256:" + "a" * 64) == "IfNotPresent"


def test_qos_class():
    def pod(*resources):
        return {"spec": {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}}

    assert defaults.qos_class(pod({})) == "BestEffort"
    assert defaults.qos_class(pod({"limits": {"cpu": "1", "memory": "1Gi"},
                                   "requests": {"cpu": "1000m", "memory": "1Gi"}})) == "Guaranteed"
    assert defaults.qos_class(pod({"requests": {"cpu": "1"}})) == "Burstable"
    assert defaults.qos_class(pod({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
                                  {})) == "Burstable"


def test_created_pod_is_defaulted_as_the_apiserver_does(v1):
    pod = v1.create_namespaced_pod(NS, {"metadata": {"name": "defaulted"}, "spec": {"containers": [
        {"name": "main", "image": "quay.io/modh/ray:2.52.1", "ports": [{"containerPort": 8265}],
         "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
         "readinessProbe": {"httpGet": {"port": 8265}}}]}})
    spec, c = pod.spec, pod.spec.containers[0]
    assert (spec.restart_policy, spec.dns_policy, spec.scheduler_name) == ("Always", "ClusterFirst", "default-scheduler")
    assert spec.termination_grace_period_seconds == 30 and spec.enable_service_links is True
    assert spec.security_context is not None
    assert (spec.service_account_name, spec.service_account) == ("default", "default")
    assert (spec.priority, spec.preemption_policy) == (0, "PreemptLowerPriority")
    assert {(t.key, t.effect, t.toleration_seconds) for t in spec.tolerations} == {
        ("node.kubernetes.io/not-ready", "NoExecute", 300), ("node.kubernetes.io/unreachable", "NoExecute", 300)}
    assert (c.termination_message_path, c.termination_message_policy) == ("/dev/termination-log", "File")
    assert c.image_pull_policy == "IfNotPresent" and c.ports[0].protocol == "TCP"
    assert c.resources.requests == {"cpu": "1", "memory": "1Gi"}  # requests default to limits
    probe = c.readiness_probe
    assert (probe.timeout_seconds, probe.period_seconds, probe.success_threshold, probe.failure_threshold) == (1, 10, 1, 3)
    assert (probe.http_get.path, probe.http_get.scheme) == ("/", "HTTP")
    token = next(v for v in spec.volumes if v.name.startswith("kube-api-access-"))
    assert token.projected.sources[0].service_account_token.path == "token"
    assert any(m.mount_path == defaults.SA_MOUNT and m.read_only for m in c.volume_mounts)
    assert (pod.status.phase, pod.status.qos_class) == ("Pending", "Guaranteed")


def test_pod_needs_its_service_account(v1, monkeypatch):
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod(NS, {"metadata": {"name": "orphan"}, "spec": {
            "serviceAccountName": "nobody", "containers": [{"name": "main", "image": "busybox"}]}})
    assert exc.value.status == 403
    assert status_of(exc.value)["message"] == ('pods "orphan" is forbidden: error looking up service account '
                                               'sandbox/nobody: serviceaccount "nobody" not found')
    # No automount: no token volume.
    pod = v1.create_namespaced_pod(NS, {"metadata": {"name": "no-token"}, "spec": {
        "automountServiceAccountToken": False, "containers": [{"name": "main", "image": "busybox"}]}})
    assert not pod.spec.volumes and pod.status.qos_class == "BestEffort"
    assert pod.spec.containers[0].image_pull_policy == "Always"


def test_default_account_is_awaited_briefly_then_required(api, v1, monkeypatch):
    monkeypatch.setattr(defaults, "DEFAULT_SA_WAIT_S", 0.2)
    v1.create_namespace({"metadata": {"name": "no-accounts-yet"}})  # no controller runs in this server
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod("no-accounts-yet", {"metadata": {"generateName": "p-"},
                                                     "spec": {"containers": [{"name": "m", "image": "busybox"}]}})
    assert exc.value.status == 403
    assert status_of(exc.value)["message"].startswith("pods is forbidden: error looking up service account no-accounts-yet/default")


def test_service_gets_a_cluster_ip_and_defaults(v1):
    svc = v1.create_namespaced_service(NS, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}})
    s = svc.spec
    assert ipaddress.ip_address(s.cluster_ip) in ipaddress.ip_network(defaults.SERVICE_CIDR)
    assert s.cluster_i_ps == [s.cluster_ip] and s.ip_families == ["IPv4"] and s.ip_family_policy == "SingleStack"
    assert (s.type, s.session_affinity, s.internal_traffic_policy) == ("ClusterIP", "None", "Cluster")
    assert (s.ports[0].protocol, s.ports[0].target_port) == ("TCP", 80)
    # An update that leaves the clusterIP out keeps it; changing it is refused.
    ip = s.cluster_ip
    svc.spec.cluster_ip, svc.spec.cluster_i_ps = None, None
    svc.metadata.resource_version = None
    assert v1.replace_namespaced_service("web", NS, svc).spec.cluster_ip == ip
    with pytest.raises(ApiException) as exc:
        v1.patch_namespaced_service("web", NS, {"spec": {"clusterIP": "172.30.9.9", "clusterIPs": ["172.30.9.9"]}})
    assert exc.value.status == 422 and "may not change once set" in status_of(exc.value)["message"]
    # Headless stays headless; an address already given is refused; NodePorts are allocated.
    headless = v1.create_namespaced_service(NS, {"metadata": {"name": "headless"}, "spec": {
        "clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 6379}]}})
    assert headless.spec.cluster_i_ps == ["None"] and headless.spec.ip_family_policy == "SingleStack"
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_service(NS, {"metadata": {"name": "twin"}, "spec": {
            "clusterIP": ip, "ports": [{"port": 80}]}})
    assert exc.value.status == 422 and "provided IP is already allocated" in status_of(exc.value)["message"]
    node_port = v1.create_namespaced_service(NS, {"metadata": {"name": "np"}, "spec": {
        "type": "NodePort", "ports": [{"port": 80, "targetPort": "http"}]}}).spec
    assert 30000 <= node_port.ports[0].node_port <= 32767 and node_port.external_traffic_policy == "Cluster"
    assert node_port.ports[0].target_port == "http"


def test_a_controller_given_cluster_ip_is_kept(v1):
    svc = v1.create_namespaced_service(NS, {"metadata": {"name": "loopback"}, "spec": {
        "clusterIP": "127.31.4.2", "ports": [{"port": 8265}]}})
    assert svc.spec.cluster_ip == "127.31.4.2" and svc.spec.cluster_i_ps == ["127.31.4.2"]


def test_namespace_secret_and_configmap(v1):
    ns = v1.create_namespace({"metadata": {"name": "team-a"}})
    assert ns.metadata.labels == {"kubernetes.io/metadata.name": "team-a"}
    assert ns.spec.finalizers == ["kubernetes"] and ns.status.phase == "Active"
    secret = v1.create_namespaced_secret(NS, {"metadata": {"name": "s"}, "stringData": {"user": "me"},
                                              "data": {"old": "eA=="}})
    assert secret.type == "Opaque" and secret.data == {"old": "eA==", "user": "bWU="}
    assert "stringData" not in v1.api_client.sanitize_for_serialization(secret)
    with pytest.raises(ApiException) as exc:
        v1.patch_namespaced_secret("s", NS, {"type": "kubernetes.io/tls"})
    assert exc.value.status == 422 and "field is immutable" in status_of(exc.value)["message"]
    cm = v1.create_namespaced_config_map(NS, {"metadata": {"name": "plain-cm"}})
    assert cm.data is None
