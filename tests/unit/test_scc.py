"""OpenShift's SecurityContextConstraints admission (sandbox/apiserver/scc.py), through the real
kubernetes client where a client creates the pod, and pass by pass through KubeRay where the
operator does (no Ray processes): restricted-v2's defaults, its refusals in the apiserver's
words, the anyuid grant that fixes them, RHOAI's run-as-ray-user for KubeRay's pods, and
kfp-ray's diagnosis of a refused head pod."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kfp_ray.diagnose import replica_failure
from kfp_ray_sandbox.apiserver.rbac import Authenticator
from kfp_ray_sandbox.apiserver.resources import Registry
from kfp_ray_sandbox.apiserver.server import ApiServer
from kfp_ray_sandbox.apiserver.store import Store
from kfp_ray_sandbox.certs import ServingCA
from kfp_ray_sandbox.controllers.namespaces import mcs_level
from kfp_ray_sandbox.controllers.serviceaccounts import ServiceAccountsController
from kfp_ray_sandbox.core import install_builtin_admission, wait_until
from kfp_ray_sandbox.faults import Faults
from kfp_ray_sandbox.network import Network
from tests.helpers import raycluster
from tests.unit.test_kuberay import Env

NS = "sandbox"
NOT_USABLE = 'provider "{}": Forbidden: not usable by user or serviceaccount'


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scc")
    reg, store, auth, faults = Registry(), Store(), Authenticator(NS), Faults()
    install_builtin_admission(store, reg, Network(), faults)
    for name in ("default", NS):
        store.create(reg.get("", "namespaces"), {"metadata": {"name": name}})
    ServiceAccountsController(store, reg).reconcile()
    ca = ServingCA()
    (tmp / "ca.crt").write_bytes(ca.ca_pem)
    srv = ApiServer(store, reg, auth, faults, audit_path=tmp / "audit.log", tls=ca.server_context())
    srv.start()

    def core(identity) -> client.CoreV1Api:
        cfg = client.Configuration()
        cfg.host, cfg.ssl_ca_cert = srv.url, str(tmp / "ca.crt")
        cfg.api_key = {"authorization": f"Bearer {identity.token}"}
        return client.CoreV1Api(client.ApiClient(cfg))

    srv.core = core
    yield srv
    srv.stop()


def _pod(name: str, container_sc: dict | None = None, **spec) -> dict:
    container = {"name": "main", "image": "quay.io/example/custom:uid1000", "command": ["sleep", "1"]}
    if container_sc:
        container["securityContext"] = container_sc
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def _range(api) -> tuple[int, int]:
    ann = api.store.get(api.registry.get("", "namespaces"), None, NS)["metadata"]["annotations"]
    start, size = ann["openshift.io/sa.scc.uid-range"].split("/")
    return int(start), int(start) + int(size) - 1


def test_namespaces_get_their_uid_block_and_mcs_level(api):
    default = api.store.get(api.registry.get("", "namespaces"), None, "default")["metadata"]["annotations"]
    mine = api.store.get(api.registry.get("", "namespaces"), None, NS)["metadata"]["annotations"]
    assert default == {"openshift.io/sa.scc.uid-range": "1000000000/10000",
                       "openshift.io/sa.scc.supplemental-groups": "1000000000/10000", "openshift.io/sa.scc.mcs": "s0:c1,c0"}
    assert mine["openshift.io/sa.scc.uid-range"] == "1000010000/10000" and mine["openshift.io/sa.scc.mcs"] == "s0:c2,c0"
    assert [mcs_level(i) for i in range(4)] == ["s0:c1,c0", "s0:c2,c0", "s0:c2,c1", "s0:c3,c0"]


def test_a_service_accounts_pod_gets_restricted_v2s_uid_and_defaults(api):
    runner = api.core(api.auth.pipeline_runner)
    pod = runner.create_namespaced_pod(NS, _pod("task")).to_dict()
    lo, _ = _range(api)
    assert pod["metadata"]["annotations"]["openshift.io/scc"] == "restricted-v2"
    assert pod["metadata"]["annotations"]["security.openshift.io/validated-scc-subject-type"] == "serviceaccount"
    psc = pod["spec"]["security_context"]
    assert psc["fs_group"] == lo and psc["se_linux_options"]["level"] == "s0:c2,c0"
    assert psc["seccomp_profile"] == {"type": "RuntimeDefault", "localhost_profile": None}
    sc = pod["spec"]["containers"][0]["security_context"]
    assert (sc["run_as_user"], sc["run_as_non_root"], sc["allow_privilege_escalation"]) == (lo, True, False)
    assert sc["capabilities"] == {"add": None, "drop": ["ALL"]}


@pytest.mark.parametrize("name,spec,error", [
    ("uid1000", {"container_sc": {"runAsUser": 1000}},
     "provider restricted-v2: .containers[0].runAsUser: Invalid value: 1000: must be in the ranges: [{lo}, {hi}]"),
    ("priv", {"container_sc": {"privileged": True}},
     "provider restricted-v2: .containers[0].privileged: Invalid value: true: Privileged containers are not allowed"),
    ("hostpath", {"volumes": [{"name": "data", "hostPath": {"path": "/data"}}]},
     'spec.volumes[0]: Invalid value: "hostPath": hostPath volumes are not allowed to be used'),
    ("hostnet", {"hostNetwork": True},
     "provider restricted-v2: .spec.securityContext.hostNetwork: Invalid value: true: Host network is not allowed to be used"),
    ("netadmin", {"container_sc": {"capabilities": {"add": ["NET_ADMIN"]}}},
     'provider restricted-v2: .containers[0].capabilities.add: Invalid value: "NET_ADMIN": capability may not be added'),
    ("fsgroup", {"securityContext": {"fsGroup": 1000}},
     "provider restricted-v2: .spec.securityContext.fsGroup: Invalid value: []int64{1000}: 1000 is not an allowed group"),
])
def test_restricted_v2_refuses_in_the_apiservers_words(api, name, spec, error):
    lo, hi = _range(api)
    with pytest.raises(ApiException) as exc:
        api.core(api.auth.pipeline_runner).create_namespaced_pod(NS, _pod(name, **spec))
    status = json.loads(exc.value.body)
    assert exc.value.status == 403 and status["reason"] == "Forbidden"
    assert (status["details"]["name"], status["details"]["kind"]) == (name, "pods")
    prefix = f'pods "{name}" is forbidden: unable to validate against any security context constraint: ['
    assert status["message"].startswith(prefix + NOT_USABLE.format("anyuid") + ", " + NOT_USABLE.format("run-as-ray-user"))
    assert error.replace("{lo}", str(lo)).replace("{hi}", str(hi)) in status["message"]
    assert status["message"].endswith(NOT_USABLE.format("hostaccess") + ", " + NOT_USABLE.format("privileged") + "]")


def test_an_admin_gets_anyuid_and_an_anyuid_grant_admits_the_service_accounts_pod(api):
    admin = api.core(api.auth.admin)
    mine = admin.create_namespaced_pod(NS, _pod("admin-uid1000", {"runAsUser": 1000})).to_dict()
    assert mine["metadata"]["annotations"]["openshift.io/scc"] == "anyuid"  # kube:admin is a cluster-admin
    assert mine["spec"]["containers"][0]["security_context"]["run_as_user"] == 1000
    rbac = client.RbacAuthorizationV1Api(admin.api_client)
    # what `oc adm policy add-scc-to-user anyuid -z default -n sandbox` makes
    rbac.create_namespaced_role_binding(NS, {
        "metadata": {"name": "system:openshift:scc:anyuid"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:openshift:scc:anyuid"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}]})
    try:
        pod = api.core(api.auth.pipeline_runner).create_namespaced_pod(NS, _pod("granted", {"runAsUser": 1000})).to_dict()
        assert pod["metadata"]["annotations"]["openshift.io/scc"] == "anyuid"
        assert pod["metadata"]["annotations"]["security.openshift.io/validated-scc-subject-type"] == "serviceaccount"
        assert pod["spec"]["containers"][0]["security_context"]["run_as_user"] == 1000
    finally:
        rbac.delete_namespaced_role_binding("system:openshift:scc:anyuid", NS)


def test_kuberays_pods_run_as_ray_user_and_a_refused_head_is_diagnosed():
    env = Env()
    env.create(raycluster("ray1000"), suspend=False)
    wait_until(lambda: env.kuberay.reconcile() or len(env.pods("ray1000")) == 2, 30, "the cluster's pods")
    for pod in env.pods("ray1000"):  # the kuberay-operator may use RHOAI's run-as-ray-user: uid 1000
        assert pod["metadata"]["annotations"]["openshift.io/scc"] == "run-as-ray-user"
        assert all(c["securityContext"]["runAsUser"] == 1000 for c in pod["spec"]["containers"])
    body = raycluster("root")
    body["spec"]["headGroupSpec"]["template"]["spec"]["securityContext"] = {"runAsUser": 0}
    env.create(body, suspend=False)
    wait_until(lambda: env.kuberay.reconcile() or env.cond("root", "ReplicaFailure"), 30, "ReplicaFailure")
    failure = env.cond("root", "ReplicaFailure")
    assert failure["reason"] == "FailedCreateHeadPod"
    assert failure["message"].startswith('FailedCreateHeadPod\npods "root-head-" is forbidden: unable to validate against '
                                         "any security context constraint: [")
    assert "provider run-as-ray-user: .containers[0].runAsUser: Invalid value: 0: must be: 1000" in failure["message"]
    event = env.events("FailedToCreateHeadPod")[0]
    assert event["message"].startswith('Failed to create head Pod sandbox/, pods "root-head-" is forbidden: unable to '
                                       "validate against any security context constraint")
    assert env.pods("root") == []
    problem = replica_failure(env.rc("root"))
    assert not problem.transient
    assert "OpenShift's security context constraints refuse the pod: the pod asks runAsUser 0, outside this " \
           "namespace's UID range" in problem.message
    assert "oc adm policy add-scc-to-user anyuid -z" in problem.fix and "-n sandbox" in problem.fix
