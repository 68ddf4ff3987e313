"""deploy/rbac-kfp-ray.yaml is exactly enough. It is applied to the session sandbox through its
API (whose server enforces RBAC, as kube-apiserver does), kfp-ray runs as the service accounts it
binds, and each (resource, verb) of each rule, taken away in turn, makes something fail:

- the sweeper's ClusterRole: `kfp-ray gc --all-namespaces --delete` as kfp-ray-sweeper frees
  kfp-ray's expired RayClusters and RayJobs in two namespaces;
- the Kueue readers (parts 1 and 2), bound to a DSPA's pipeline-runner: `kfp-ray doctor` reads the
  queue and its quota, and the provision task finds the annotated default queue, checks a
  request against the quota before creating anything and says why Kueue holds a cluster.

And doctor asks for every verb the tasks use as pipeline-runner, RayJobs' included.

The DSPA here is `rbac`: its pipeline-runner-rbac account gets DSPO's Role as the operator gives
it, so the session's pipeline-runner-dspa keeps its rules for the other tests."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils

from kfp_ray import kube, lease, rayclusters
from tests.helpers import kube_identity, raycluster

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "rbac-kfp-ray.yaml"
DSPO_ROLE = ROOT / "sandbox" / "data" / "dspa-pipeline-runner-role.yaml"
NS, DSPA, TEAM = "sandbox", "rbac", "rbac-team"
RUNNER = f"pipeline-runner-{DSPA}"


def expired(body: dict, run: str) -> dict:
    """kfp-ray's labels and a lease that ran out a minute ago; suspended, so nothing starts."""
    meta = body["metadata"]
    meta.setdefault("labels", {}).update({"app.kubernetes.io/managed-by": "kfp-ray", rayclusters.RUN_LABEL: run})
    meta["annotations"] = {"kfp-ray.io/run-id": run,
                           lease.ANNOTATION: lease.format_time(datetime.now(UTC) - timedelta(seconds=60))}
    body["spec"]["suspend"] = True
    return body


def rayjob(name: str, run: str) -> dict:
    rc = raycluster(name, workers=0, cpu="250m", memory="512Mi", queue=None)
    return expired({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
                    "spec": {"entrypoint": "python -c pass", "shutdownAfterJobFinishes": True,
                             "rayClusterSpec": rc["spec"]}}, run)


class Rbac:
    """The manifest applied, with tokens for the accounts it binds."""

    def __init__(self, box, sbx, tmp: Path):
        self.box, self.api, self.tmp = box, sbx.api_client(), tmp
        self.rbac = k8s.RbacAuthorizationV1Api(self.api)
        self.created: list[dict] = []

    def apply(self, text: str) -> None:
        for doc in yaml.safe_load_all(text):
            if doc:
                utils.create_from_dict(self.api, doc)
                self.created.append(doc)

    def kubeconfig(self, namespace: str, account: str) -> str:
        """A token for the account (TokenRequest, as `oc create token`), in a kubeconfig."""
        token = k8s.CoreV1Api(self.api).create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        cfg = yaml.safe_load(Path(self.box.info["kubeconfig"]).read_text())
        cfg["users"][0]["user"]["token"] = token
        path = self.tmp / f"kubeconfig-{account}"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)

    def cluster_role(self, name: str):
        return self.rbac.read_cluster_role(name)

    def close(self) -> None:
        for doc in reversed(self.created):
            kind, name, ns = doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")
            with contextlib.suppress(k8s.ApiException):
                if kind == "ServiceAccount":
                    k8s.CoreV1Api(self.api).delete_namespaced_service_account(name, ns)
                elif kind == "Namespace":
                    k8s.CoreV1Api(self.api).delete_namespace(name)
                else:
                    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()
                    getattr(self.rbac, f"delete_{snake}" if ns is None else f"delete_namespaced_{snake}")(
                        *((name,) if ns is None else (name, ns)))


@pytest.fixture
def applied(box, sbx, tmp_path):
    """DSPO's pipeline-runner for DSPA `rbac`, then deploy/rbac-kfp-ray.yaml for PROJECT=sandbox,
    DSPA=rbac, applied as an admin would (`oc apply -f`)."""
    rbac = Rbac(box, sbx, tmp_path)
    role = yaml.safe_load(DSPO_ROLE.read_text())
    role["metadata"] = {"name": RUNNER, "namespace": NS}
    rbac.apply(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": RUNNER, "namespace": NS}},
        role,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": RUNNER, "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNNER},
         "subjects": [{"kind": "ServiceAccount", "name": RUNNER, "namespace": NS}]}]))
    rbac.apply(MANIFEST.read_text().replace("PROJECT", NS).replace("DSPA", DSPA))
    try:
        yield rbac
    finally:
        rbac.close()
        kube.api_client.cache_clear()


def kfp_ray_cli(*args) -> tuple[int, str]:
    """kfp-ray's CLI in this process (the environment's KUBECONFIG): exit code, stdout + stderr."""
    from kfp_ray.pipelines.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def without(rules, resource: str, verb: str) -> list[dict]:
    """The rules with one (resource, verb) taken away, everything else kept."""
    out = []
    for r in rules:
        for res in r.resources:
            verbs = [v for v in r.verbs if (res, v) != (resource, verb)]
            if verbs:
                out.append({"apiGroups": list(r.api_groups), "resources": [res], "verbs": verbs})
    return out


def pairs(rules) -> list[tuple[str, str]]:
    return [(res, v) for r in rules for res in r.resources for v in r.verbs]


def test_the_sweeper_role_is_exactly_what_gc_all_namespaces_needs(box, sbx, applied):
    co = k8s.CustomObjectsApi(sbx.api_client())
    made: list[tuple[str, str, str]] = []

    def expired_pair(tag: str) -> tuple[str, str]:
        rc, rj = f"swept-rc-{tag}", f"swept-rj-{tag}"
        co.create_namespaced_custom_object("ray.io", "v1", TEAM, "rayclusters",
                                           expired(raycluster(rc, workers=0, cpu="250m", memory="512Mi", queue=None), "r-gc"))
        co.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", rayjob(rj, "r-gc"))
        made.extend([(TEAM, "rayclusters", rc), ("default", "rayjobs", rj)])
        return rc, rj

    def exists(ns, plural, name) -> bool:
        try:
            co.get_namespaced_custom_object("ray.io", "v1", ns, plural, name)
            return True
        except k8s.ApiException as exc:
            assert exc.status == 404
            return False

    sweeper = applied.kubeconfig(NS, "kfp-ray-sweeper")
    try:
        # 1. As shipped: the CLI, as a user runs it, frees both, in two namespaces.
        rc, rj = expired_pair("all")
        env = {**os.environ, "KUBECONFIG": sweeper,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "gc", "--all-namespaces", "--delete",
                               "--timeout", "60"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(rf"{TEAM}\s+{rc}\s.*deleted", done.stdout) and re.search(rf"default\s+rayjob/{rj}\s.*deleted", done.stdout)
        assert not exists(TEAM, "rayclusters", rc) and not exists("default", "rayjobs", rj)

        # 2. Each (resource, verb) of the applied ClusterRole taken away: gc fails, naming it.
        role = applied.cluster_role("kfp-ray-sweeper")
        shipped = role.rules
        assert ("rayjobs", "list") in pairs(shipped)  # the rule whose absence freed nothing (issue 25, item 3)
        for n, (resource, verb) in enumerate(pairs(shipped)):
            expired_pair(str(n))
            applied.rbac.patch_cluster_role("kfp-ray-sweeper", {"rules": without(shipped, resource, verb)})
            with kube_identity(sweeper):
                code, out = kfp_ray_cli("gc", "--all-namespaces", "--delete", "--timeout", "60")
            assert code == 1, (resource, verb, out)
            said = (rf"may not list {'RayClusters' if resource == 'rayclusters' else 'RayJobs'} \(ray.io\) in all namespaces"
                    if verb == "list" else rf"may not {verb} {resource}\.ray\.io")
            assert re.search(said, out), (resource, verb, out)
        applied.rbac.patch_cluster_role("kfp-ray-sweeper", {"rules": shipped})
    finally:
        for ns, plural, name in made:
            with contextlib.suppress(k8s.ApiException):
                co.delete_namespaced_custom_object("ray.io", "v1", ns, plural, name)


def kueue_reads(box, kubeconfig: str, held: dict) -> dict[str, bool]:
    """What doctor and the provision task learn from Kueue as this account (and doctor, run by
    an admin, about it)."""
    from kfp_ray import queues
    from kfp_ray.pipelines import doctor
    from kfp_ray.pipelines.__main__ import build_parser

    with kube_identity(box.info["kubeconfig"]):
        d = doctor.Doctor(build_parser().parse_args(["doctor", "--namespace", NS]))
        d.kubernetes()
        d.dspa = DSPA
        finds_default = d.default_queue()
    with kube_identity(kubeconfig):
        code, out = kfp_ray_cli("doctor")
        with queues.read_once():
            default = queues.resolve_queue(NS, "")
        with queues.read_once():
            quota = queues.nominal_quota(NS, "local-queue-test")
        why = queues.KueueView().waiting_reason(held)
    return {"doctor: the LocalQueue": bool(re.search(r"^PASS\s+LocalQueue: local-queue-test in sandbox", out, re.M)),
            "doctor: the quota": bool(re.search(r"^PASS\s+ClusterQueue: cluster-queue: .*cpu \S+/9", out, re.M)),
            "provision: the default queue": default == "local-queue-test",
            "doctor: the task finds the default queue": finds_default.status == "PASS"
            and "pipeline-runner may list LocalQueues: a run without local_queue finds local-queue-test" in finds_default.detail,
            "provision: the quota check": quota is not None and quota.nominal.get("cpu") == 9,
            "provision: why Kueue holds it": "ClusterQueue cluster-queue in use: cpu" in why}


def test_the_kueue_readers_are_exactly_what_doctor_and_provision_read(box, sbx, applied):
    from kfp_ray import tasks
    from kfp_ray.errors import InputError

    sbx.set_faults({"clusters": {"rbac-held": {"never_admit": True}}})
    co = k8s.CustomObjectsApi(sbx.api_client())
    held = co.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters",
                                              raycluster("rbac-held", workers=0, cpu="100m", memory="256Mi"))
    runner = applied.kubeconfig(NS, RUNNER)

    # As shipped: all of it, and a request beyond the quota is refused before anything is created.
    assert all(kueue_reads(box, runner, held).values())
    with kube_identity(runner), pytest.raises(InputError, match="nominal quota of 9 cpu"):
        tasks.provision(run_id="rbac-big", task_name="provision-ray-cluster", task_id="7", local_queue="",
                        num_workers=0, head_cpu="10", head_memory="1Gi")
    assert [rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", NS, "rayclusters")["items"]] \
        == ["rbac-held"]

    # Each (resource, verb) taken away loses something.
    rbac = applied.rbac
    reader, cq_reader = rbac.read_namespaced_role("kfp-ray-kueue-reader", NS), rbac.read_cluster_role("kfp-ray-clusterqueue-reader")
    taken = [("Role", reader, p) for p in pairs(reader.rules)] + [("ClusterRole", cq_reader, p) for p in pairs(cq_reader.rules)]
    assert {p for _, _, p in taken} == {("localqueues", "get"), ("localqueues", "list"), ("workloads", "list"),
                                        ("clusterqueues", "get")}
    for kind, role, (resource, verb) in taken:
        body = {"rules": without(role.rules, resource, verb)}
        if kind == "Role":
            rbac.patch_namespaced_role(role.metadata.name, NS, body)
        else:
            rbac.patch_cluster_role(role.metadata.name, body)
        try:
            lost = [k for k, ok in kueue_reads(box, runner, held).items() if not ok]
        finally:
            restore = {"rules": role.rules}
            if kind == "Role":
                rbac.patch_namespaced_role(role.metadata.name, NS, restore)
            else:
                rbac.patch_cluster_role(role.metadata.name, restore)
        assert lost, f"{kind} {role.metadata.name} without {verb} {resource}: nothing lost"


def test_doctor_checks_that_pipeline_runner_may_run_rayjobs(box, sbx, applied):
    """lifecycle=rayjob's task creates, reads, renews and deletes a RayJob as pipeline-runner:
    doctor asks for each verb (impersonating the account, as a project admin may)."""
    from kfp_ray.pipelines import doctor
    from kfp_ray.pipelines.__main__ import build_parser

    def runner_access():
        with kube_identity(box.info["kubeconfig"]):
            d = doctor.Doctor(build_parser().parse_args(["doctor", "--namespace", NS]))
            assert d.kubernetes().status == "PASS"
            d.dspa = DSPA
            return d.runner_access()

    assert runner_access().status == "PASS"  # DSPO's Role, as the operator gives it
    rbac = applied.rbac
    rules = rbac.read_namespaced_role(RUNNER, NS).rules
    older = [{"apiGroups": r.api_groups, "resources": [x for x in r.resources if x != "rayjobs"], "verbs": r.verbs}
             for r in rules]  # a Role from before RayJobs
    rbac.patch_namespaced_role(RUNNER, NS, {"rules": older})
    check = runner_access()
    assert check.status == "FAIL"
    assert check.detail == (f"{RUNNER} may not create rayjobs.ray.io, get rayjobs.ray.io, list rayjobs.ray.io, "
                            "patch rayjobs.ray.io, delete rayjobs.ray.io")


def test_the_event_reader_is_what_the_run_events_copy_needs(box, sbx, applied):
    """Part 4: pipeline-runner lists the project's events, so the follow task copies its
    cluster's to events.jsonl (run_events.py); without it, none, and doctor warns."""
    from kfp_ray import run_events
    from kfp_ray.pipelines import doctor
    from kfp_ray.pipelines.__main__ import build_parser

    v1 = k8s.CoreV1Api(sbx.api_client())
    v1.create_namespaced_event(NS, {
        "metadata": {"generateName": "rbac-ev."}, "type": "Normal", "reason": "QuotaReserved",
        "message": "Quota reserved in ClusterQueue cluster-queue", "count": 1,
        "involvedObject": {"kind": "Workload", "name": "raycluster-rbac-ev-1a2b3", "namespace": NS},
        "source": {"component": "kueue-admission"}, "lastTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
    runner = applied.kubeconfig(NS, RUNNER)

    def reads() -> tuple[list | None, str]:
        with kube_identity(box.info["kubeconfig"]):
            d = doctor.Doctor(build_parser().parse_args(["doctor", "--namespace", NS]))
            d.kubernetes()
            d.dspa = DSPA
            status = d.run_events().status
        with kube_identity(runner):
            return run_events.collect(NS, ["rbac-ev"]), status

    picked, status = reads()
    assert status == "PASS" and [(e["kind"], e["reason"], e["source"]) for e in picked] == \
        [("Workload", "QuotaReserved", "kueue-admission")]
    rbac = applied.rbac
    role = rbac.read_namespaced_role("kfp-ray-event-reader", NS)
    assert pairs(role.rules) == [("events", "list")]
    rbac.patch_namespaced_role(role.metadata.name, NS, {"rules": without(role.rules, "events", "list")})
    try:
        assert reads() == (None, "WARN")
    finally:
        rbac.patch_namespaced_role(role.metadata.name, NS, {"rules": role.rules})
