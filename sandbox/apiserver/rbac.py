"""Authentication (bearer tokens) and RBAC authorization, as kube-apiserver does them.

Identities: an admin (OpenShift's kube:admin, cluster-admin) and the service account
every RHOAI pipeline task runs as, `pipeline-runner-<dspa>`, bound to the very Role the
Data Science Pipelines operator ships (sandbox/data/dspa-pipeline-runner-role.yaml).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROLE_FILE = Path(__file__).resolve().parent.parent / "data" / "dspa-pipeline-runner-role.yaml"
# Discovery and version documents are readable by every authenticated user
# (ClusterRole system:discovery).
DISCOVERY_PREFIXES = ("/api", "/apis", "/version", "/healthz", "/readyz", "/livez", "/openapi")


@dataclass
class Rule:
    api_groups: list[str]
    resources: list[str]
    verbs: list[str]
    namespace: str | None = None  # None: cluster-wide (ClusterRoleBinding)

    def allows(self, group: str, resource: str, verb: str, namespace: str | None) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        return (("*" in self.api_groups or group in self.api_groups)
                and ("*" in self.resources or resource in self.resources)
                and ("*" in self.verbs or verb in self.verbs))


@dataclass
class Identity:
    user: str
    token: str
    rules: list[Rule] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)

    def can(self, group: str, resource: str, verb: str, namespace: str | None) -> bool:
        return any(r.allows(group, resource, verb, namespace) for r in self.rules)


def role_rules(path: Path = ROLE_FILE) -> tuple[str, list[Rule]]:
    role = yaml.safe_load(path.read_text())
    ns = role["metadata"]["namespace"]
    rules = [Rule(r.get("apiGroups", []), r.get("resources", []), r.get("verbs", []), ns)
             for r in role["rules"]]
    return role["metadata"]["name"], rules


class Authenticator:
    def __init__(self, namespace: str = "sandbox"):
        role_name, rules = role_rules()
        self.admin = Identity("kube:admin", secrets.token_urlsafe(32),
                              [Rule(["*"], ["*"], ["*"])], ["system:cluster-admins", "system:authenticated"])
        self.pipeline_runner = Identity(
            f"system:serviceaccount:{namespace}:{role_name}", secrets.token_urlsafe(32), rules,
            ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"])
        self.by_token = {i.token: i for i in (self.admin, self.pipeline_runner)}

    def issue(self, namespace: str, name: str) -> str:
        """A new token for a ServiceAccount (TokenRequest). The sandbox's own accounts keep their
        fixed rules; any other account may do only what RBAC objects bind to it."""
        user = f"system:serviceaccount:{namespace}:{name}"
        known = next((i for i in (self.admin, self.pipeline_runner) if i.user == user), None)
        who = Identity(user, secrets.token_urlsafe(32), list(known.rules) if known else [],
                       ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"])
        self.by_token[who.token] = who
        return who.token

    def service_account_token(self, namespace: str, name: str) -> str | None:
        """A token for a pod running as that service account (the kubelet mounts it); only the
        accounts the sandbox knows have one (the pipeline runner)."""
        user = f"system:serviceaccount:{namespace}:{name}"
        return next((i.token for i in list(self.by_token.values()) if i.user == user), None)

    def as_user(self, user: str) -> Identity:
        """Who `user` is when impersonated: one of the sandbox's identities, else a user with
        no role (a service account still in its groups)."""
        known = next((i for i in (self.admin, self.pipeline_runner) if i.user == user), None)
        if known is not None:
            return known
        parts = user.split(":")
        groups = (["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}"]
                  if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else [])
        return Identity(user, "", [], [*groups, "system:authenticated"])

    def identify(self, authorization: str | None) -> Identity | None:
        # the scheme is case-insensitive, as the apiserver's bearertoken authenticator reads it
        # (the kubernetes client's in-cluster config sends "bearer <token>")
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.by_token.get(token.strip())
