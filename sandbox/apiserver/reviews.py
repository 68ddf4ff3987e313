"""Self reviews: who am I, and what may I do, answered as kube-apiserver v1.31 answers them.

- authorization.k8s.io/v1 SelfSubjectAccessReview: the RBAC authorizer's decision for one
  request (allowed, and the binding that allowed it as its reason).
- authorization.k8s.io/v1 SelfSubjectRulesReview: the rules that apply in a namespace.
- authentication.k8s.io/v1 SelfSubjectReview: the user as the authenticator saw it.

The rules are the identity's (sandbox/apiserver/rbac.py), the RBAC objects applied through the
API (policy.py), plus the bootstrap policy every
cluster binds to `system:authenticated` (system:basic-user, system:discovery,
system:public-info-viewer). Matching follows plugin/pkg/auth/authorizer/rbac (RuleAllows),
reasons follow pkg/registry/rbac/validation/rule.go's binding describers (v1.31).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ApiError
from .rbac import Identity, role_rules

AUTHENTICATED = "system:authenticated"
ADMIN_GROUP = "system:cluster-admins"  # OpenShift binds cluster-admin to it ("cluster-admins")


@dataclass(frozen=True)
class PolicyRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def allows(self, attrs: dict) -> bool:
        """rbac.RuleAllows: verbs, then groups/resources/names, or non-resource URLs."""
        if not ("*" in self.verbs or attrs["verb"] in self.verbs):
            return False
        if "path" in attrs:
            return any(u == "*" or u == attrs["path"] or (u.endswith("*") and attrs["path"].startswith(u[:-1]))
                       for u in self.non_resource_urls)
        if not ("*" in self.api_groups or attrs.get("group", "") in self.api_groups):
            return False
        sub = attrs.get("subresource") or ""
        combined = f"{attrs.get('resource', '')}/{sub}" if sub else attrs.get("resource", "")
        if not any(r == "*" or r == combined or (sub and r == f"*/{sub}") for r in self.resources):
            return False
        return not self.resource_names or attrs.get("name", "") in self.resource_names

    def to_json(self) -> dict:
        out: dict = {"verbs": list(self.verbs)}
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        else:
            out["apiGroups"] = list(self.api_groups)
            out["resources"] = list(self.resources)
            if self.resource_names:
                out["resourceNames"] = list(self.resource_names)
        return out


@dataclass
class Binding:
    """A (Cluster)RoleBinding that grants a role's rules to one subject of the identity."""

    kind: str  # ClusterRoleBinding | RoleBinding
    name: str
    role_kind: str  # ClusterRole | Role
    role_name: str
    subject: str  # already described: 'Group "system:authenticated"'
    rules: list[PolicyRule] = field(default_factory=list)
    namespace: str | None = None  # RoleBindings only

    def describe(self) -> str:
        if self.kind == "RoleBinding":
            return f'RoleBinding "{self.name}/{self.namespace}" of {self.role_kind} "{self.role_name}" to {self.subject}'
        return f'ClusterRoleBinding "{self.name}" of {self.role_kind} "{self.role_name}" to {self.subject}'


# The bootstrap policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go, v1.31).
_BASIC_USER = [
    PolicyRule(("create",), ("authorization.k8s.io",), ("selfsubjectaccessreviews", "selfsubjectrulesreviews")),
    PolicyRule(("create",), ("authentication.k8s.io",), ("selfsubjectreviews",)),
]
_DISCOVERY = [PolicyRule(("get",), non_resource_urls=(
    "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"))]
_PUBLIC_INFO = [PolicyRule(("get",), non_resource_urls=("/healthz", "/livez", "/readyz", "/version", "/version/"))]
_CLUSTER_ADMIN = [PolicyRule(("*",), ("*",), ("*",)), PolicyRule(("*",), non_resource_urls=("*",))]


def _service_account(user: str) -> tuple[str, str] | None:
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return parts[2], parts[3]
    return None


def bindings_for(identity: Identity) -> list[Binding]:
    """The bindings that apply to an identity, cluster-wide first (as the rule resolver visits them)."""
    out: list[Binding] = []
    cluster_wide = [r for r in identity.rules if r.namespace is None]
    if cluster_wide and ADMIN_GROUP in identity.groups:
        out.append(Binding("ClusterRoleBinding", "cluster-admins", "ClusterRole", "cluster-admin",
                           f'Group "{ADMIN_GROUP}"', list(_CLUSTER_ADMIN)))
    elif cluster_wide:
        out.append(Binding("ClusterRoleBinding", identity.user, "ClusterRole", identity.user, f'User "{identity.user}"',
                           [PolicyRule(tuple(r.verbs), tuple(r.api_groups), tuple(r.resources)) for r in cluster_wide]))
    if AUTHENTICATED in identity.groups:
        subject = f'Group "{AUTHENTICATED}"'
        out += [Binding("ClusterRoleBinding", "system:basic-user", "ClusterRole", "system:basic-user", subject, list(_BASIC_USER)),
                Binding("ClusterRoleBinding", "system:discovery", "ClusterRole", "system:discovery", subject, list(_DISCOVERY)),
                Binding("ClusterRoleBinding", "system:public-info-viewer", "ClusterRole", "system:public-info-viewer",
                        subject, list(_PUBLIC_INFO))]
    sa = _service_account(identity.user)
    by_namespace: dict[str, list[PolicyRule]] = {}
    for r in identity.rules:
        if r.namespace is not None:
            by_namespace.setdefault(r.namespace, []).append(
                PolicyRule(tuple(r.verbs), tuple(r.api_groups), tuple(r.resources)))
    for ns, rules in by_namespace.items():
        # The DSP operator names Role, RoleBinding and ServiceAccount alike: pipeline-runner-<dspa>.
        role = sa[1] if sa else role_rules()[0]
        subject = f'ServiceAccount "{sa[1]}/{sa[0]}"' if sa else f'User "{identity.user}"'
        out.append(Binding("RoleBinding", role, "Role", role, subject, rules, namespace=ns))
    return out


def _applicable(identity: Identity, namespace: str | None, policy=None) -> list[Binding]:
    """Cluster role bindings always; role bindings only inside their namespace. `policy`: the
    RBAC objects applied through the API (policy.StoredPolicy), after the identity's own."""
    every = bindings_for(identity) + (policy.bindings(identity) if policy is not None else [])
    return [b for b in every if b.kind == "ClusterRoleBinding" or (namespace and b.namespace == namespace)]


def authorize(identity: Identity, attrs: dict, policy=None) -> tuple[bool, str]:
    """(allowed, reason) for request attributes: {verb, group, resource, subresource, name,
    namespace} for resource requests, {verb, path} for non-resource ones."""
    for b in _applicable(identity, attrs.get("namespace") or None, policy):
        if any(rule.allows(attrs) for rule in b.rules):
            return True, f"RBAC: allowed by {b.describe()}"
    # The RBAC authorizer has no opinion and no reason; the node authorizer neither: denied, "".
    return False, ""


def rules_for(identity: Identity, namespace: str, policy=None) -> tuple[list[dict], list[dict]]:
    resource, non_resource = [], []
    for b in _applicable(identity, namespace, policy):
        for rule in b.rules:
            (non_resource if rule.non_resource_urls else resource).append(rule.to_json())
    return resource, non_resource


# --- the REST answers --------------------------------------------------------------
def _invalid(kind: str, group: str, causes: list[tuple[str, str]]) -> ApiError:
    parts = [f"{f}: {m}" for f, m in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return ApiError(422, "Invalid", f'{kind}.{group} "" is invalid: {joined}',
                    {"group": group, "kind": kind,
                     "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]})


def _empty_meta(obj: dict) -> bool:
    """Semantically empty ObjectMeta: zero values count as unset (protobuf bodies carry
    `generation: 0`, JSON ones `creationTimestamp: null`)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return not any(v not in (None, "", {}, [], 0) for v in meta.values())


def access_review(identity: Identity, body: dict, policy=None) -> dict:
    """SelfSubjectAccessReview: validate as ValidateSelfSubjectAccessReview, then authorize."""
    spec = body.get("spec") or {}
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    causes = []
    if res is not None and non is not None:
        causes.append(("spec.nonResourceAttributes", f"Invalid value: {non!r}: cannot be specified in combination with resourceAttributes"))
    if res is None and non is None:
        causes.append(("spec.resourceAttributes", 'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified'))
    if not _empty_meta(body):
        causes.append(("metadata", "Invalid value: metadata: must be empty"))
    if causes:
        raise _invalid("SelfSubjectAccessReview", "authorization.k8s.io", causes)
    if res is not None:
        attrs = {"verb": res.get("verb", ""), "group": res.get("group", ""), "resource": res.get("resource", ""),
                 "subresource": res.get("subresource", ""), "name": res.get("name", ""),
                 "namespace": res.get("namespace", "")}
    else:
        attrs = {"verb": non.get("verb", ""), "path": non.get("path", "")}
    allowed, reason = authorize(identity, attrs, policy)
    status: dict = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}


def rules_review(identity: Identity, body: dict, policy=None) -> dict:
    spec = body.get("spec") or {}
    namespace = spec.get("namespace") or ""
    if not namespace:
        raise ApiError(400, "BadRequest", "no namespace on request")
    resource, non_resource = rules_for(identity, namespace, policy)
    return {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec,
            "status": {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": False}}


def subject_review(identity: Identity, uid: str | None = None) -> dict:
    """SelfSubjectReview: username, uid (service accounts: the ServiceAccount's uid), groups."""
    from .store import now_rfc3339

    user: dict = {"username": identity.user}
    if uid:
        user["uid"] = uid
    user["groups"] = list(identity.groups)
    return {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": now_rfc3339()}, "status": {"userInfo": user}}


def service_account_of(identity: Identity) -> tuple[str, str] | None:
    """(namespace, name) when the identity is a service account."""
    return _service_account(identity.user)
