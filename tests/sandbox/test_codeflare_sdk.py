"""The real CodeFlare SDK 0.34 against the sandbox, call by call, with real Ray."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.helpers import eventually, on_platforms

pytestmark = pytest.mark.ray

JOB = ("python -c \"import ray; ray.init(); print('nodes:', len(ray.nodes())); "
       "print('cpus:', ray.cluster_resources()['CPU'])\"")


def small_config(name, **kw):
    from codeflare_sdk import ClusterConfiguration

    base = dict(name=name, namespace="sandbox", num_workers=1, head_cpu_requests=1, head_cpu_limits=1,
                head_memory_requests=2, head_memory_limits=2, worker_cpu_requests=1, worker_cpu_limits=1,
                worker_memory_requests=2, worker_memory_limits=2)
    base.update(kw)
    return ClusterConfiguration(**base)


def owned_objects(sbx, name):
    v1 = k8s.CoreV1Api(sbx.api_client())
    co = k8s.CustomObjectsApi(sbx.api_client())
    return {
        "rayclusters": [o["metadata"]["name"] for o in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]],
        "workloads": [o["metadata"]["name"] for o in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "sandbox", "workloads")["items"]],
        "pods": [p.metadata.name for p in v1.list_namespaced_pod("sandbox", label_selector=f"ray.io/cluster={name}").items],
        "services": [s.metadata.name for s in v1.list_namespaced_service("sandbox").items],
        "routes": [o["metadata"]["name"] for o in co.list_namespaced_custom_object("route.openshift.io", "v1", "sandbox", "routes",
                                                                                      label_selector=f"ray.openshift.ai/cluster-name={name}")["items"]],
        "secrets": [s.metadata.name for s in v1.list_namespaced_secret("sandbox", label_selector=f"ray.openshift.ai/cluster-name={name}").items],
        "serviceaccounts": [s.metadata.name for s in v1.list_namespaced_service_account("sandbox", label_selector=f"ray.openshift.ai/cluster-name={name}").items],
    }


@on_platforms()
def test_sdk_apply_wait_ready_status_details_job_and_down(box, sbx, sdk_auth):
    """A workbench user's notebook, unmodified, on either release: on 3.x the SDK finds the
    dashboard through KubeRay's HTTPRoute on the data-science-gateway, on 2.x through the
    CodeFlare operator's Route."""
    from codeflare_sdk import Cluster
    from codeflare_sdk.ray.cluster.status import CodeFlareClusterStatus, RayClusterStatus

    cluster = Cluster(small_config("sdk-e2e", local_queue="local-queue-test"))
    cluster.apply(timeout=30)
    co = k8s.CustomObjectsApi(sbx.api_client())
    rc = co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "sdk-e2e")
    assert rc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "local-queue-test"
    assert [m["manager"] for m in rc["metadata"]["managedFields"]] == ["codeflare-sdk"]

    cluster.wait_ready(timeout=120)
    status, ready = cluster.status(print_to_console=False)
    assert (status, ready) == (CodeFlareClusterStatus.READY, True)
    details = cluster.details(print_to_console=False)
    assert details.status == RayClusterStatus.READY and details.num_workers == 1
    uri = cluster.cluster_dashboard_uri()
    assert details.dashboard == uri
    assert cluster.is_dashboard_ready()

    v1 = k8s.CoreV1Api(sbx.api_client())
    rc = co.get_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters", "sdk-e2e")
    svc = v1.read_namespaced_service("sdk-e2e-head-svc", "sandbox")
    assert {p.name: p.port for p in svc.spec.ports} == {"gcs": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
    head = v1.list_namespaced_pod("sandbox", label_selector="ray.io/cluster=sdk-e2e,ray.io/node-type=head").items[0]
    if box.platform.ray_security == "kuberay":
        # What RHOAI 3.3's KubeRay made of it (red-hat-data-services/kuberay rhoai-3.3)
        assert rc["metadata"]["finalizers"] == ["ray.io/authentication-resources"]
        assert rc["metadata"]["annotations"]["odh.ray.io/secure-trusted-network"] == "true"
        gateway = box.gateway_http.url.split("://", 1)[1]
        assert uri == f"https://{gateway}/ray/sandbox/sdk-e2e"  # the HTTPRoute on the data-science-gateway
        assert head.spec.service_account_name == "sdk-e2e-oauth-proxy-sa"
        assert [(c.name, c.ready) for c in head.status.container_statuses] == [("ray-head", True), ("kube-rbac-proxy", True)]
        assert not head.status.init_container_statuses
        assert {v.name: v.secret.secret_name for v in head.spec.volumes if v.secret} == {"ray-tls-vol": "ray-head-secret-sdk-e2e"}
        assert [s for s in owned_objects(sbx, "sdk-e2e")["secrets"] if s.startswith("sdk-e2e-ca-secret-")]
    else:
        # What the CodeFlare operator (v1.16.0) and KubeRay (v1.4) made of it on 2.25
        assert rc["metadata"]["finalizers"] == ["ray.openshift.ai/oauth-finalizer"]
        assert uri == f"http://{svc.spec.cluster_ip}:8265"  # the Route goes to the head Service's dashboard port
        [sa] = owned_objects(sbx, "sdk-e2e")["serviceaccounts"]
        assert sa.startswith("sdk-e2e-oauth-proxy-") and head.spec.service_account_name == sa
        assert [(c.name, c.ready) for c in head.status.container_statuses] == [("ray-head", True), ("oauth-proxy", True)]
        assert [(c.name, c.state.terminated.reason) for c in head.status.init_container_statuses] == [("create-cert", "Completed")]

    jobs = cluster.job_client
    job_id = jobs.submit_job(entrypoint=JOB)
    final = eventually(lambda: (s := jobs.get_job_status(job_id)).is_terminal() and s, 90, what="the Ray job")
    logs = jobs.get_job_logs(job_id)
    assert final.value == "SUCCEEDED", logs
    assert "nodes: 2" in logs and "cpus: 2.0" in logs

    cluster.down()
    gone = eventually(lambda: not any(owned_objects(sbx, "sdk-e2e")[k] for k in ("rayclusters", "workloads", "pods", "routes", "secrets",
                                                                                "serviceaccounts"))
                      and not [s for s in owned_objects(sbx, "sdk-e2e")["services"] if s.startswith("sdk-e2e")], 30,
                      what="every object of the cluster to be deleted")
    assert gone
    eventually(lambda: not [p for p in sbx.processes() if p["cluster"] == "sdk-e2e"], 60, what="the cluster's Ray processes to stop")
    assert set(sbx.summary()["queue_usage"].values()) == {"0"}
    assert cluster.status(print_to_console=False) == (CodeFlareClusterStatus.UNKNOWN, False)


def test_sdk_without_kueue_access_drops_the_label_and_the_webhook_rejects(box, sbx, capsys):
    """The pitfall kfp-ray exists for: as pipeline-runner (no Kueue access) the SDK's
    LocalQueue lookup is forbidden, it silently omits the queue label, and RHOAI's webhook
    rejects the cluster; `up()` only prints that."""
    from codeflare_sdk import Cluster, KubeConfigFileAuthentication
    from codeflare_sdk.common.kubernetes_cluster import auth

    KubeConfigFileAuthentication(kube_config_path=box.info["kubeconfig_pipeline_runner"]).load_kube_config()
    try:
        cluster = Cluster(small_config("as-runner"))
        assert "kueue.x-k8s.io/queue-name" not in cluster.resource_yaml["metadata"]["labels"]
        cluster.up()  # prints, does not raise
    finally:
        auth.api_client = auth.config_path = None
    out = capsys.readouterr().out
    assert "Failed to create RayCluster" in out
    assert owned_objects(sbx, "as-runner")["rayclusters"] == []
    denied = [e for e in sbx.audit() if e["method"] == "POST" and e["path"].endswith("/rayclusters")
              and e["user"].endswith("pipeline-runner-dspa")]
    assert denied and denied[-1]["code"] == 403
