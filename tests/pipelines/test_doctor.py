"""`kfp-ray doctor` on the sandbox: every check passes on a healthy one, and each fails, with its
fix, on a sandbox broken in that way."""

from __future__ import annotations

import base64

import pytest
import yaml
from kubernetes import client as k8s

from kfp_ray.pipelines.__main__ import main
from tests.helpers import on_platforms


@pytest.fixture
def doctor(box, monkeypatch, capsys):
    """doctor as a user runs it after `oc login`: the kubeconfig, the route found through it."""
    monkeypatch.setenv("KUBECONFIG", box.info["kubeconfig"])
    monkeypatch.setenv("KFP_CA_BUNDLE", box.info["ca_file"])
    for name in ("KFP_HOST", "KFP_TOKEN", "KFP_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)

    fixes: dict[str, str] = {}

    def run(*args) -> tuple[int, dict[str, str]]:
        code = main(["doctor", *args])
        out = capsys.readouterr().out
        lines = {}
        for line in out.splitlines():
            status, _, rest = line.partition("  ")
            if status.strip() in ("PASS", "FAIL", "SKIP", "WARN"):
                name, _, detail = rest.strip().partition(": ")
                detail, _, fix = detail.partition(" -- fix: ")
                lines[name] = f"{status.strip()} {detail}"
                fixes[name] = fix
        return code, lines
    run.fixes = fixes
    return run


@on_platforms()
def test_a_healthy_sandbox_passes_every_check(doctor, box):
    code, lines = doctor()
    assert code == 0, lines
    assert lines["platform"].startswith({"rhoai-3.3": "PASS OpenShift AI 3.x: KubeRay secures RayClusters",
                                         "rhoai-2.25": "PASS OpenShift AI 2.x: the CodeFlare operator"}[box.platform.name])
    assert list(lines) == ["kubernetes API", "Ray API", "Kueue API", "platform", "Kueue opt-in", "LocalQueue", "ClusterQueue",
                           "default queue", "data connection", "bucket", "pipelines route", "pipelines API",
                           "pipeline-runner access", "queue position and usage", "run events"]
    assert all(v.startswith("PASS") for k, v in lines.items()
               if k not in ("default queue", "queue position and usage", "run events")), lines
    # RHOAI's pipeline-runner Role reads no Kueue and no events: warnings, with the fix
    assert lines["queue position and usage"].startswith("WARN pipeline-runner may not list Kueue Workloads")
    assert "deploy/rbac-kfp-ray.yaml" in doctor.fixes["queue position and usage"]
    assert lines["run events"].startswith("WARN pipeline-runner may not list events")
    assert "part 4 of deploy/rbac-kfp-ray.yaml" in doctor.fixes["run events"]
    assert f"{box.info['local_queue']} in sandbox, ClusterQueue" in lines["LocalQueue"]
    assert " used" in lines["ClusterQueue"] and "cpu " in lines["ClusterQueue"]  # usage against quota
    assert lines["pipelines route"] == f"PASS {box.info['pipelines_api']}"  # found from the DSPA's Route
    secret = base64.b64decode(k8s.CoreV1Api(_admin(box)).read_namespaced_secret(
        box.info["data_connection"], "sandbox").data["AWS_SECRET_ACCESS_KEY"]).decode()
    assert secret not in "".join(lines.values())


@on_platforms()
def test_a_namespace_without_the_kueue_opt_in_label_is_warned_about_on_3x(doctor, box):
    """The Red Hat build of Kueue acts only in namespaces labelled kueue.openshift.io/managed=true;
    2.x's embedded Kueue acts everywhere."""
    v1 = k8s.CoreV1Api(_admin(box))
    code, lines = doctor()
    assert lines["Kueue opt-in"] == "PASS sandbox is labelled kueue.openshift.io/managed=true"
    v1.patch_namespace("sandbox", {"metadata": {"labels": {"kueue.openshift.io/managed": None}}})
    try:
        code, lines = doctor()
    finally:
        v1.patch_namespace("sandbox", {"metadata": {"labels": {"kueue.openshift.io/managed": "true"}}})
    if box.platform.name == "rhoai-2.25":
        assert lines["Kueue opt-in"].startswith("PASS sandbox is not labelled kueue.openshift.io/managed=true; "
                                                "OpenShift AI 2.x's Kueue acts in every namespace")
    else:
        assert code == 0 and lines["Kueue opt-in"].startswith(
            "WARN sandbox is not labelled kueue.openshift.io/managed=true, so the Red Hat build of Kueue's webhooks skip it")
        assert doctor.fixes["Kueue opt-in"].startswith("`oc label namespace sandbox kueue.openshift.io/managed=true`")


def test_a_project_without_a_queue_named_default_is_warned_about_runs_without_local_queue(doctor, box):
    """The seeds' project: LocalQueue local-queue-test annotated default, none named `default`.
    pipeline-runner may not read Kueue, so a run from the dashboard without local_queue waits
    for `default`; doctor says so (a warning: kfp-ray's own commands pass the queue)."""
    code, lines = doctor()
    assert code == 0
    assert lines["default queue"] == (
        "WARN sandbox has no LocalQueue named default: a run started without local_queue from the dashboard or "
        "kfp.Client waits for LocalQueue default, which does not exist, until its admission_timeout (pipeline-runner "
        "may not list LocalQueues to find local-queue-test)")
    assert doctor.fixes["default queue"].startswith("set local_queue=local-queue-test on such runs")
    co = k8s.CustomObjectsApi(_admin(box))
    co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "default"},
        "spec": {"clusterQueue": "cluster-queue"}})
    try:
        code, lines = doctor()
        assert lines["default queue"] == "PASS LocalQueue default exists: a run without local_queue uses it"
        assert lines["LocalQueue"].startswith("PASS local-queue-test in sandbox")  # the annotated one still leads
    finally:
        co.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", "default")


def _admin(box):
    from kfp_ray_sandbox.client import SandboxClient

    return SandboxClient(box.info).api_client()


def test_a_kubeconfig_the_cluster_refuses_fails_first_and_skips_what_needs_it(doctor, box, tmp_path, monkeypatch):
    config = yaml.safe_load(open(box.info["kubeconfig"]))
    config["users"][0]["user"]["token"] = "sha256~expired"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    code, lines = doctor()
    assert code == 1
    assert lines["kubernetes API"].startswith("FAIL 401") and lines["Ray API"].startswith("SKIP")


@pytest.mark.parametrize("check, group", [("Ray API", "ray.io"), ("Kueue API", "kueue.x-k8s.io"),
                                          ("platform", "gateway.networking.k8s.io")])
def test_a_missing_component_api_fails_its_check(doctor, sbx, check, group):
    sbx.set_faults({"api": {"missing_groups": [group]}})
    code, lines = doctor()
    if check == "platform":  # neither release's tell: not OpenShift AI as kfp-ray knows it
        assert code == 1 and lines[check].startswith("FAIL neither the CodeFlare operator's API") and \
            "OpenShift AI 2.25 or 3.x" in doctor.fixes[check]
    else:
        assert code == 1 and lines[check].startswith(f"FAIL {group}/") and "not served" in lines[check]
    assert [k for k, v in lines.items() if v.startswith("FAIL")] == [check]


def test_a_missing_local_queue_and_a_local_queue_without_its_cluster_queue_fail(doctor, box):
    code, lines = doctor("--local-queue", "nope")
    assert code == 1 and lines["LocalQueue"] == "FAIL LocalQueue nope does not exist in sandbox"
    assert "oc get localqueues" in doctor.fixes["LocalQueue"]
    co = k8s.CustomObjectsApi(_admin(box))
    co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "orphan"},
        "spec": {"clusterQueue": "no-such-cq"}})
    try:
        code, lines = doctor("--local-queue", "orphan")
        assert code == 1 and lines["ClusterQueue"].startswith("FAIL the LocalQueue points at ClusterQueue no-such-cq, "
                                                              "which does not exist")
    finally:
        co.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", "orphan")


def test_a_data_connection_missing_lacking_keys_or_with_no_bucket_fails(doctor, box):
    code, lines = doctor("--data-connection", "nope")
    assert code == 1 and lines["data connection"] == "FAIL secret nope does not exist in sandbox"
    assert "Connections" in doctor.fixes["data connection"]
    v1 = k8s.CoreV1Api(_admin(box))
    data = dict(v1.read_namespaced_secret(box.info["data_connection"], "sandbox").data)
    partial = {k: v for k, v in data.items() if k != "AWS_S3_BUCKET"}
    nobucket = {**data, "AWS_S3_BUCKET": base64.b64encode(b"no-such-bucket").decode()}
    for name, values in (("dc-partial", partial), ("dc-nobucket", nobucket)):
        v1.create_namespaced_secret("sandbox", {"metadata": {"name": name}, "data": values})
    try:
        code, lines = doctor("--data-connection", "dc-partial")
        assert lines["data connection"] == "FAIL secret dc-partial lacks AWS_S3_BUCKET" and lines["bucket"].startswith("SKIP")
        code, lines = doctor("--data-connection", "dc-nobucket")
        assert code == 1 and lines["data connection"].startswith("PASS")
        assert lines["bucket"].startswith("FAIL bucket no-such-bucket does not exist at ")
    finally:
        for name in ("dc-partial", "dc-nobucket"):
            v1.delete_namespaced_secret(name, "sandbox")


def test_a_token_the_route_refuses_fails_the_api_check(doctor, monkeypatch):
    monkeypatch.setenv("KFP_TOKEN", "sha256~revoked")
    code, lines = doctor()
    assert code == 1 and lines["pipelines route"].startswith("PASS")
    assert lines["pipelines API"].startswith("FAIL ") and "(401 Unauthorized)" in lines["pipelines API"]  # kube-rbac-proxy


def test_a_namespace_without_a_dspa_or_pipeline_runner_rights_fails_those_checks(doctor, box):
    v1 = k8s.CoreV1Api(_admin(box))
    v1.create_namespace({"metadata": {"name": "no-dspa"}})
    try:
        code, lines = doctor("--namespace", "no-dspa")
        assert code == 1
        assert lines["pipelines route"].startswith("FAIL no DataSciencePipelinesApplication in namespace no-dspa")
        assert lines["pipeline-runner access"].startswith("FAIL pipeline-runner-dspa may not create rayclusters.ray.io")
    finally:
        v1.delete_namespace("no-dspa")
