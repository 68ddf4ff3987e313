"""provision_ray_cluster's choice of LocalQueue when none is given, and its refusal of a
namespace other than the task's own; against the sandbox."""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from kfp_ray import kube, queues, tasks
from kfp_ray.errors import InputError, StartupTimeout
from tests.helpers import priority_classes

KUEUE = ("kueue.x-k8s.io", "v1beta1")
SMALL = dict(num_workers=0, head_cpu="500m", head_memory="1Gi")


def local_queue(name: str, namespace: str, default: bool = False) -> dict:
    meta = {"name": name, "namespace": namespace}
    if default:
        meta["annotations"] = {queues.DEFAULT_QUEUE_ANNOTATION: "true"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": meta,
            "spec": {"clusterQueue": "cluster-queue"}}


@contextlib.contextmanager
def queue_named_default(sbx, namespace: str = "sandbox"):
    """RHOAI's operator-made LocalQueue `default` (no annotation); left as found."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    try:
        co.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", local_queue("default", namespace))
        created = True
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        created = False  # the sandbox already has it (its RHOAI fixture variant)
    try:
        yield
    finally:
        if created:
            co.delete_namespaced_custom_object(*KUEUE, namespace, "localqueues", "default")


@pytest.fixture
def project(sbx):
    """A namespace of our own for arranging LocalQueues, deleted afterwards."""
    core, co = k8s.CoreV1Api(sbx.api_client()), k8s.CustomObjectsApi(sbx.api_client())
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="queue-pick")))
    yield "queue-pick", co
    for q in co.list_namespaced_custom_object(*KUEUE, "queue-pick", "localqueues")["items"]:
        co.delete_namespaced_custom_object(*KUEUE, "queue-pick", "localqueues", q["metadata"]["name"])
    core.delete_namespace("queue-pick")


def test_default_queue_is_the_annotated_one_else_the_one_named_default(project, as_admin, capsys):
    ns, co = project
    with pytest.raises(InputError, match="has no default LocalQueue") as exc:
        queues.resolve_queue(ns, "")
    assert exc.value.field == "local_queue" and "(none exist)" in str(exc.value)
    co.create_namespaced_custom_object(*KUEUE, ns, "localqueues", local_queue("team-queue", ns))
    with pytest.raises(InputError, match="set local_queue to one of: team-queue"):
        queues.resolve_queue(ns, "")
    # RHOAI's operator creates `default` without the annotation: that is the one.
    co.create_namespaced_custom_object(*KUEUE, ns, "localqueues", local_queue("default", ns))
    assert queues.resolve_queue(ns, "") == "default"
    # An annotated default queue wins over the name.
    co.create_namespaced_custom_object(*KUEUE, ns, "localqueues", local_queue("annotated", ns, default=True))
    assert queues.resolve_queue(ns, "") == "annotated"
    assert "using 'annotated', the namespace's default LocalQueue" in capsys.readouterr().out


def test_pipeline_runner_falls_back_to_the_queue_named_default_and_says_so(box, sbx, as_pipeline_runner, capsys):
    assert queues.resolve_queue("sandbox", "") == "default"
    out = capsys.readouterr().out
    assert "may not list LocalQueues in 'sandbox': using the LocalQueue named 'default'" in out
    assert "set local_queue to use another" in out


def test_pipeline_runner_without_local_queue_is_admitted_through_default(box, sbx, as_pipeline_runner, capsys):
    """End to end as RHOAI's pipeline-runner, no local_queue: the cluster carries queue
    `default` and Kueue admits it. (Containers held in ContainerCreating: no Ray needed.)"""
    sbx.set_faults({"clusters": {"via-default": {"slow_start": 300}}})
    with queue_named_default(sbx), pytest.raises(StartupTimeout):
        tasks.provision(run_id="r-default-queue", cluster_name="via-default", startup_timeout=2, **SMALL)
    out = capsys.readouterr().out
    assert "RayCluster via-default created in sandbox, LocalQueue default" in out
    assert "admitted by Kueue after" in out


def test_the_unresolvable_default_says_so_at_the_admission_timeout(box, sbx, as_pipeline_runner):
    """pipeline-runner cannot see that there is no `default` LocalQueue: the timeout says
    which queue was assumed and why."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    if any(q["metadata"]["name"] == "default"
           for q in co.list_namespaced_custom_object(*KUEUE, "sandbox", "localqueues")["items"]):
        pytest.skip("this sandbox has a LocalQueue named default")
    from kfp_ray.errors import AdmissionTimeout

    with pytest.raises(AdmissionTimeout) as exc:
        tasks.provision(run_id="r-no-default", cluster_name="no-default", admission_timeout=2, **SMALL)
    assert "(LocalQueue 'default', chosen because local_queue was empty)" in str(exc.value)


def test_a_namespace_other_than_the_tasks_own_is_refused_before_anything_is_created(box, sbx, as_pipeline_runner):
    before = [e for e in sbx.audit() if e["method"] == "POST"]
    with pytest.raises(InputError) as exc:
        tasks.provision(run_id="r-elsewhere", cluster_name="elsewhere", namespace="team-b", local_queue="local-queue-test",
                        **SMALL)
    assert exc.value.field == "namespace"
    msg = str(exc.value)
    assert "'team-b' is not this pipeline's namespace 'sandbox'" in msg and "NetworkPolicy" in msg
    assert "leave namespace empty" in msg
    assert [e for e in sbx.audit() if e["method"] == "POST"] == before


def test_in_a_pod_the_service_account_namespace_is_the_tasks_own(box, sbx, as_pipeline_runner, tmp_path, monkeypatch):
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "namespace").write_text("team-a\n")
    monkeypatch.setattr(kube, "SA_DIR", sa)
    assert kube.own_namespace() == "team-a" and kube.current_namespace() == "team-a"
    before = [e for e in sbx.audit() if e["method"] == "POST"]
    with pytest.raises(InputError, match="'sandbox' is not this pipeline's namespace 'team-a'"):
        tasks.provision(run_id="r-pod", cluster_name="in-a-pod", namespace="sandbox", local_queue="local-queue-test",
                        **SMALL)
    assert [e for e in sbx.audit() if e["method"] == "POST"] == before


def test_a_missing_priority_class_is_refused_before_anything_is_created(box, sbx, as_admin):
    """Kueue would create no Workload and say nothing: the cluster would wait out admission_timeout."""
    before = [e for e in sbx.audit() if e["method"] == "POST"]
    with pytest.raises(InputError) as exc:
        tasks.provision(run_id="r-no-class", cluster_name="no-class", local_queue="local-queue-test",
                        priority_class="nightly-batch", **SMALL)
    assert exc.value.field == "priority_class"
    assert "WorkloadPriorityClass 'nightly-batch' does not exist" in str(exc.value)
    assert "oc get workloadpriorityclasses" in str(exc.value)
    assert [e for e in sbx.audit() if e["method"] == "POST"] == before


def test_the_priority_class_labels_the_cluster_and_ranks_its_workload(box, sbx, as_pipeline_runner, capsys):
    """As pipeline-runner (no Kueue reads): the class is taken as given, said so, and Kueue gives
    the Workload its value."""
    co = k8s.CustomObjectsApi(sbx.api_client())
    sbx.set_faults({"clusters": {"ranked": {"slow_start": 300}}})
    since = co.list_namespaced_custom_object(*KUEUE, "sandbox", "workloads")["metadata"]["resourceVersion"]
    with priority_classes(co, {"pc-batch": 250}):
        with pytest.raises(StartupTimeout):  # and the failed provision deletes its cluster, Workload too
            tasks.provision(run_id="r-ranked", cluster_name="ranked", local_queue="local-queue-test",
                            priority_class="pc-batch", startup_timeout=2, **SMALL)
        assert "cannot verify WorkloadPriorityClass 'pc-batch'" in capsys.readouterr().out
        # the Workload as Kueue created it: the watch replays what happened since `since`
        created = [ev["object"] for ev in watch.Watch().stream(co.list_namespaced_custom_object, *KUEUE, "sandbox",
                                                               "workloads", resource_version=since, timeout_seconds=2)
                   if ev["type"] == "ADDED" and ev["object"]["metadata"]["ownerReferences"][0]["name"] == "ranked"]
        assert [(w["spec"]["priorityClassName"], w["spec"]["priority"]) for w in created] == [("pc-batch", 250)]


def test_priority_class_must_be_a_label_value():
    spec = tasks.cluster_spec("r", "c", "", "", "sandbox", "", "", None, None, None, None, priority_class="Low Priority!")
    with pytest.raises(InputError) as exc:
        spec.check()
    assert exc.value.field == "priority_class"
