"""A project's LimitRange and ResourceQuota, enforced on pod creates as kube-apiserver's
LimitRanger and ResourceQuota admission do, through the real kubernetes client."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from kfp_ray_sandbox.apiserver.admission import LimitRanger, ResourceQuotaAdmission
from tests.unit.apiserver_kit import start_api, status_of

NS = "plain"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    srv = start_api(tmp_path_factory.mktemp("quota"))
    srv.store.admission.append(LimitRanger(srv.store, srv.registry))
    srv.store.validation.append(ResourceQuotaAdmission(srv.store, srv.registry))
    v1 = client.CoreV1Api(_admin(srv))
    v1.create_namespaced_limit_range(NS, {"metadata": {"name": "limits"}, "spec": {"limits": [{
        "type": "Container", "default": {"cpu": "500m", "memory": "512Mi"},
        "defaultRequest": {"cpu": "100m", "memory": "256Mi"}, "max": {"cpu": "2", "memory": "4Gi"}}]}})
    v1.create_namespaced_resource_quota(NS, {"metadata": {"name": "compute"}, "spec": {"hard": {
        "requests.cpu": "1", "limits.memory": "2Gi", "pods": "4"}}})
    yield srv
    srv.stop()


def _admin(srv):
    from tests.unit.apiserver_kit import api_client

    return api_client(srv, srv.auth.admin)


def pod(name, **resources):
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "ubi9/python-311",
                                                                 "resources": resources}]}}


def refused(v1, body, ns: str = NS) -> str:
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod(ns, body)
    assert exc.value.status == 403
    return status_of(exc.value)["message"]


def test_defaults_fill_a_pod_then_the_quota_counts_it_and_refuses_the_one_too_many(api):
    v1 = client.CoreV1Api(_admin(api))
    made = v1.create_namespaced_pod(NS, pod("plain-1"))
    assert made.spec.containers[0].resources.requests == {"cpu": "100m", "memory": "256Mi"}
    assert made.spec.containers[0].resources.limits == {"cpu": "500m", "memory": "512Mi"}
    v1.create_namespaced_pod(NS, pod("big-1", requests={"cpu": "800m"}, limits={"cpu": "1", "memory": "1Gi"}))
    assert refused(v1, pod("big-2", requests={"cpu": "200m"}, limits={"cpu": "1"})) == (
        'pods "big-2" is forbidden: exceeded quota: compute, requested: requests.cpu=200m, used: requests.cpu=900m, '
        "limited: requests.cpu=1")
    # over the LimitRange's max: refused whatever the quota has left
    assert refused(v1, pod("huge", limits={"cpu": "4"})) == (
        'pods "huge" is forbidden: maximum cpu usage per Container is 2, but limit is 4')
    # a pod that ended counts no more
    big = v1.read_namespaced_pod("big-1", NS)
    big.status = client.V1PodStatus(phase="Succeeded")
    v1.replace_namespaced_pod_status("big-1", NS, big)
    v1.create_namespaced_pod(NS, pod("big-2", requests={"cpu": "200m"}, limits={"cpu": "1"}))


def test_a_quota_on_limits_refuses_a_container_that_states_none_where_no_limit_range_defaults_it(api):
    v1 = client.CoreV1Api(_admin(api))
    v1.create_namespaced_resource_quota("sandbox", {"metadata": {"name": "strict"}, "spec": {"hard": {
        "limits.cpu": "4", "limits.memory": "8Gi"}}})
    assert refused(v1, pod("bare"), "sandbox") == (
        'pods "bare" is forbidden: failed quota: strict: must specify limits.cpu for: main; limits.memory for: main')
    v1.create_namespaced_pod("sandbox", pod("stated", limits={"cpu": "1", "memory": "1Gi"}))

