"""Self reviews (who am I, what may I do) answered as kube-apiserver's RBAC authorizer answers them."""

from __future__ import annotations

from kubernetes import client

from kfp_ray_sandbox.apiserver import reviews
from kfp_ray_sandbox.apiserver.rbac import Authenticator
from tests.unit.apiserver_kit import NS, raw

RUNNER_BINDING = ('RBAC: allowed by RoleBinding "pipeline-runner-dspa/sandbox" of Role "pipeline-runner-dspa" '
                  'to ServiceAccount "pipeline-runner-dspa/sandbox"')
ADMIN_BINDING = ('RBAC: allowed by ClusterRoleBinding "cluster-admins" of ClusterRole "cluster-admin" '
                 'to Group "system:cluster-admins"')


def _res(verb, group, resource, namespace=NS, subresource="", name=""):
    return {"verb": verb, "group": group, "resource": resource, "namespace": namespace,
            "subresource": subresource, "name": name}


def test_authorize_follows_the_dspa_role_and_names_the_binding():
    auth = Authenticator(NS)
    runner = auth.pipeline_runner
    assert reviews.authorize(runner, _res("create", "ray.io", "rayclusters")) == (True, RUNNER_BINDING)
    assert reviews.authorize(runner, _res("get", "", "pods", subresource="log", name="x"))[0]
    # What the Role leaves out is denied with no reason (the RBAC authorizer has no opinion).
    assert reviews.authorize(runner, _res("create", "kueue.x-k8s.io", "workloads")) == (False, "")
    assert reviews.authorize(runner, _res("watch", "ray.io", "rayclusters")) == (False, "")
    assert reviews.authorize(runner, _res("list", "", "events")) == (False, "")
    # A RoleBinding applies only in its own namespace, never cluster-wide.
    assert reviews.authorize(runner, _res("create", "ray.io", "rayclusters", namespace="plain")) == (False, "")
    assert reviews.authorize(runner, _res("list", "ray.io", "rayclusters", namespace="")) == (False, "")
    # Every authenticated user: self reviews and discovery (system:basic-user, system:discovery).
    ok, why = reviews.authorize(runner, _res("create", "authorization.k8s.io", "selfsubjectaccessreviews", namespace=""))
    assert ok and why == ('RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user" '
                          'to Group "system:authenticated"')
    assert reviews.authorize(runner, {"verb": "get", "path": "/apis/ray.io"})[0]
    assert not reviews.authorize(runner, {"verb": "get", "path": "/metrics"})[0]
    assert reviews.authorize(auth.admin, _res("delete", "kueue.x-k8s.io", "clusterqueues", namespace="")) == (True, ADMIN_BINDING)
    assert reviews.authorize(auth.admin, {"verb": "get", "path": "/metrics"}) == (True, ADMIN_BINDING)


def test_policy_rule_matching_is_rbacs():
    rule = reviews.PolicyRule(("get",), ("",), ("pods", "*/scale"), resource_names=("a",))
    assert rule.allows(_res("get", "", "pods", name="a"))
    assert not rule.allows(_res("get", "", "pods", name="b"))
    assert not rule.allows(_res("get", "", "pods", subresource="log", name="a"))
    assert rule.allows(_res("get", "", "deployments", subresource="scale", name="a"))
    assert reviews.PolicyRule(("*",), ("*",), ("*",)).allows(_res("get", "x", "y", subresource="status"))
    urls = reviews.PolicyRule(("get",), non_resource_urls=("/apis/*", "/version"))
    assert urls.allows({"verb": "get", "path": "/apis/ray.io/v1"}) and urls.allows({"verb": "get", "path": "/version"})
    assert not urls.allows({"verb": "get", "path": "/version/x"})


def test_self_subject_access_review_through_the_client(runner, admin):
    authz = client.AuthorizationV1Api(runner)

    def ask(verb, group, resource, namespace=NS):
        body = {"spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": namespace}}}
        return authz.create_self_subject_access_review(body).status

    yes = ask("create", "ray.io", "rayclusters")
    assert yes.allowed is True and yes.reason == RUNNER_BINDING
    no = ask("create", "kueue.x-k8s.io", "workloads")
    assert no.allowed is False and not no.reason and not no.denied
    assert ask("create", "", "nodes", namespace="").allowed is False
    assert client.AuthorizationV1Api(admin).create_self_subject_access_review(
        {"spec": {"nonResourceAttributes": {"verb": "get", "path": "/metrics"}}}).status.allowed is True


def test_access_review_is_validated_and_reviews_are_create_only(runner):
    code, body = raw(runner, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {"spec": {}})
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: ')
    assert "exactly one of nonResourceAttributes or resourceAttributes must be specified" in body["message"]
    ask = {"spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": NS}}}
    # Zero values are empty metadata (kubectl's protobuf body decodes with generation 0); a name is not.
    code, body = raw(runner, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                     {**ask, "metadata": {"generation": 0, "creationTimestamp": None}})
    assert code == 201 and body["status"]["allowed"] is True
    code, body = raw(runner, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                     {**ask, "metadata": {"name": "mine"}})
    assert code == 422 and body["message"].endswith("metadata: Invalid value: metadata: must be empty")
    code, body = raw(runner, "GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
    assert code == 405 and body["reason"] == "MethodNotAllowed"
    code, body = raw(runner, "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", {"spec": {}})
    assert (code, body["message"]) == (400, "no namespace on request")


def test_self_subject_rules_review_lists_the_role_and_the_bootstrap_policy(runner, admin):
    authz = client.AuthorizationV1Api(runner)
    status = authz.create_self_subject_rules_review({"spec": {"namespace": NS}}).status
    rules = [(tuple(r.api_groups), tuple(r.resources), tuple(r.verbs)) for r in status.resource_rules]
    assert (("ray.io",), ("rayclusters", "rayjobs", "rayservices"), ("create", "get", "list", "patch", "delete")) in rules
    assert (("authorization.k8s.io",), ("selfsubjectaccessreviews", "selfsubjectrulesreviews"), ("create",)) in rules
    assert not any("kueue.x-k8s.io" in groups for groups, _, _ in rules)
    assert any("/apis/*" in r.non_resource_ur_ls for r in status.non_resource_rules)
    assert status.incomplete is False
    elsewhere = authz.create_self_subject_rules_review({"spec": {"namespace": "plain"}}).status
    assert not any("ray.io" in (r.api_groups or []) for r in elsewhere.resource_rules)
    everything = client.AuthorizationV1Api(admin).create_self_subject_rules_review({"spec": {"namespace": NS}}).status
    assert everything.resource_rules[0].verbs == ["*"] and everything.resource_rules[0].resources == ["*"]


def test_self_subject_review_names_the_user_its_groups_and_the_account_uid(api, runner, admin):
    me = client.AuthenticationV1Api(runner).create_self_subject_review({}).status.user_info
    assert me.username == "system:serviceaccount:sandbox:pipeline-runner-dspa"
    assert me.groups == ["system:serviceaccounts", "system:serviceaccounts:sandbox", "system:authenticated"]
    sa = client.CoreV1Api(admin).create_namespaced_service_account(NS, {"metadata": {"name": "pipeline-runner-dspa"}})
    me = client.AuthenticationV1Api(runner).create_self_subject_review({}).status.user_info
    assert me.uid == sa.metadata.uid
    boss = client.AuthenticationV1Api(admin).create_self_subject_review({}).status.user_info
    assert boss.username == "kube:admin" and "system:cluster-admins" in boss.groups and not boss.uid


def test_discovery_lists_the_reviews_as_create_only(admin):
    apis = client.ApisApi(admin).get_api_versions().groups
    assert {"authorization.k8s.io", "authentication.k8s.io"} <= {g.name for g in apis}
    found = {}
    for group in ("authorization.k8s.io", "authentication.k8s.io"):
        _, body = raw(admin, "GET", f"/apis/{group}/v1")
        found.update({r["name"]: r["verbs"] for r in body["resources"]})
    assert found == {"selfsubjectaccessreviews": ["create"], "selfsubjectrulesreviews": ["create"],
                     "selfsubjectreviews": ["create"]}
