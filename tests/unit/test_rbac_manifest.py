"""deploy/rbac-kfp-ray.yaml: valid RBAC, every rule about what kfp-ray reads or sweeps, and
nothing in it that DSPO's pipeline-runner Role must already allow (those are checked by doctor)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kfp_ray.kube import PIPELINE_RUNNER_NEEDS

ROOT = Path(__file__).resolve().parents[2]
RUNNER_ROLE = ROOT / "sandbox" / "data" / "dspa-pipeline-runner-role.yaml"


def allowed(rules, group, resource, verb) -> bool:
    return any((group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
               and (resource in r.get("resources", []) or "*" in r.get("resources", []))
               and (verb in r.get("verbs", []) or "*" in r.get("verbs", [])) for r in rules)


def test_the_manifest_is_rbac_bound_to_what_it_names():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac-kfp-ray.yaml").read_text()))
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert set(roles) == {b["roleRef"]["name"] for b in bindings}  # each role bound, each binding to a role here
    for role in roles.values():
        for rule in role["rules"]:
            # Kueue reads, the sweeper, and the run's events (read only)
            assert set(rule["apiGroups"]) <= {"kueue.x-k8s.io", "ray.io"} or \
                (rule["apiGroups"] == [""] and rule["resources"] == ["events"] and rule["verbs"] == ["list"]), rule
            assert not set(rule["verbs"]) & {"create", "update", "*"}, rule  # never more than read, patch, delete


def test_the_default_runner_role_already_allows_every_verb_kfp_ray_needs():
    rules = yaml.safe_load(RUNNER_ROLE.read_text())["rules"]
    for group, resource, verb in PIPELINE_RUNNER_NEEDS:
        assert allowed(rules, group, resource, verb), (group, resource, verb)
