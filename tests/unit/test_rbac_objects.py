"""The sandbox's API server enforces the RBAC objects an admin applies, as kube-apiserver's RBAC
authorizer does, and gives a ServiceAccount a token (TokenRequest, `oc create token`)."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.unit.apiserver_kit import api_client, raw

NS = "sandbox"
RBAC = "rbac.authorization.k8s.io"


class Token:
    def __init__(self, token):
        self.token = token


def as_account(api, admin, name: str, ns: str = NS) -> client.ApiClient:
    client.CoreV1Api(admin).create_namespaced_service_account(ns, {"metadata": {"name": name}})
    token = client.CoreV1Api(admin).create_namespaced_service_account_token(name, ns, {"spec": {}}).status.token
    return api_client(api, Token(token))


def can(api_cl, verb, resource, ns=NS, group="ray.io") -> tuple[bool, str]:
    review = client.AuthorizationV1Api(api_cl).create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"namespace": ns, "group": group, "resource": resource, "verb": verb}}})
    return review.status.allowed, review.status.reason or ""


def test_a_token_request_needs_the_account_and_is_create_only(api, admin):
    core = client.CoreV1Api(admin)
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_service_account_token("nobody", NS, {"spec": {}})
    assert exc.value.status == 404
    sa = as_account(api, admin, "token-only")
    who = client.AuthenticationV1Api(sa).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                      "kind": "SelfSubjectReview"})
    assert who.status.user_info.username == f"system:serviceaccount:{NS}:token-only"
    assert raw(admin, "GET", f"/api/v1/namespaces/{NS}/serviceaccounts/token-only/token")[0] == 405


def test_a_role_binding_grants_its_role_in_its_namespace_only(api, admin):
    sa = as_account(api, admin, "bound")
    rbac = client.RbacAuthorizationV1Api(admin)
    assert can(sa, "list", "rayclusters") == (False, "")  # no binding yet: nothing but the bootstrap policy
    rbac.create_namespaced_role(NS, {"metadata": {"name": "ray-reader"},
                                     "rules": [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(NS, {"metadata": {"name": "bound-reads"},
                                             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "ray-reader"},
                                             "subjects": [{"kind": "ServiceAccount", "name": "bound"}]})
    assert can(sa, "list", "rayclusters") == (True, f'RBAC: allowed by RoleBinding "bound-reads/{NS}" of Role '
                                                    f'"ray-reader" to ServiceAccount "bound/{NS}"')
    client.CustomObjectsApi(sa).list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")
    assert can(sa, "list", "rayclusters", ns="plain")[0] is False
    assert can(sa, "delete", "rayclusters")[0] is False
    with pytest.raises(client.ApiException) as exc:
        client.CustomObjectsApi(sa).list_cluster_custom_object("ray.io", "v1", "rayclusters")
    assert exc.value.status == 403
    rbac.delete_namespaced_role("ray-reader", NS)  # a binding to a role that is gone grants nothing
    assert can(sa, "list", "rayclusters")[0] is False


def test_a_cluster_role_binding_to_a_group_grants_everywhere(api, admin):
    sa = as_account(api, admin, "grouped", ns="plain")
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role({"metadata": {"name": "rayjob-sweeper"},
                              "rules": [{"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["list", "delete"]}]})
    rbac.create_cluster_role_binding({"metadata": {"name": "plain-sweeps"},
                                      "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "rayjob-sweeper"},
                                      "subjects": [{"kind": "Group", "apiGroup": RBAC, "name": "system:serviceaccounts:plain"}]})
    try:
        client.CustomObjectsApi(sa).list_cluster_custom_object("ray.io", "v1", "rayjobs")
        assert can(sa, "delete", "rayjobs", ns=NS)[0] and not can(sa, "get", "rayjobs", ns=NS)[0]
    finally:
        rbac.delete_cluster_role_binding("plain-sweeps")
        rbac.delete_cluster_role("rayjob-sweeper")
    assert not can(sa, "delete", "rayjobs", ns=NS)[0]
