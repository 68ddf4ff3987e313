"""The RBAC objects an admin applies (Roles, ClusterRoles and their bindings), read as
kube-apiserver's RBAC authorizer reads them (plugin/pkg/auth/authorizer/rbac, v1.31).

The sandbox's own identities keep their fixed rules (rbac.py: the admin, and pipeline-runner
bound to DSPO's Role); what an admin applies through the API adds to them, as on a cluster.
A binding whose role does not exist grants nothing; a RoleBinding's ServiceAccount subject
without a namespace is in the binding's namespace."""

from __future__ import annotations

from .reviews import Binding, PolicyRule

GROUP = "rbac.authorization.k8s.io"


def _rules(role: dict | None) -> list[PolicyRule]:
    return [PolicyRule(tuple(r.get("verbs") or ()), tuple(r.get("apiGroups") or ()), tuple(r.get("resources") or ()),
                       tuple(r.get("resourceNames") or ()), tuple(r.get("nonResourceURLs") or ()))
            for r in (role or {}).get("rules") or []]


def _subject(subject: dict, binding_ns: str | None, user: str, groups: list[str]) -> str | None:
    """The subject described as the authorizer's reason words it, when it names this identity."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User" and name == user:
        return f'User "{name}"'
    if kind == "Group" and name in groups:
        return f'Group "{name}"'
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns or ""
        if user == f"system:serviceaccount:{ns}:{name}":
            return f'ServiceAccount "{name}/{ns}"'
    return None


class StoredPolicy:
    def __init__(self, store, registry):
        self.store = store
        self.types = {kind: registry.by_kind(GROUP, kind)
                      for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")}

    def bindings(self, identity) -> list[Binding]:
        """The applied bindings naming this identity, ClusterRoleBindings first."""
        out: list[Binding] = []
        for kind in ("ClusterRoleBinding", "RoleBinding"):
            items, _ = self.store.list(self.types[kind])
            for b in sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
                ns = b["metadata"].get("namespace") if kind == "RoleBinding" else None
                subject = next((s for s in (_subject(x, ns, identity.user, identity.groups)
                                            for x in b.get("subjects") or []) if s), None)
                if subject is None:
                    continue
                ref = b.get("roleRef") or {}
                role_kind = ref.get("kind", "")
                if role_kind not in ("Role", "ClusterRole") or (role_kind == "Role" and ns is None):
                    continue
                role = self.store.find(self.types[role_kind], ns if role_kind == "Role" else None, ref.get("name", ""))
                out.append(Binding(kind, b["metadata"]["name"], role_kind, ref.get("name", ""), subject, _rules(role),
                                   namespace=ns))
        return out
