"""kfp-ray run/submit/schedule find the project's default LocalQueue with the user's own
credentials (pipeline-runner, the tasks' account, may not read Kueue on RHOAI) and pass it as
the run's local_queue: the annotated one, else the one named `default`."""

from __future__ import annotations

import io

import pytest
from kubernetes import client

from kfp_ray.pipelines.queue_default import NoDefaultQueue, with_default_queue

NS = "sandbox"
INPUTS = {"local_queue": {}, "entrypoint": {}}


def queue(name: str, default: str | None = None) -> dict:
    meta = {"name": name, **({"annotations": {"kueue.x-k8s.io/default-queue": default}} if default else {})}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": meta,
            "spec": {"clusterQueue": "cluster-queue"}}


@pytest.fixture
def queues(admin):
    co = client.CustomObjectsApi(admin)
    made = []

    def make(*qs):
        for q in qs:
            co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "localqueues", q)
            made.append(q["metadata"]["name"])

    yield make
    for name in made:
        co.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "localqueues", name)


def resolve(params, api_client, inputs=INPUTS) -> tuple[dict, str]:
    out = io.StringIO()
    return with_default_queue(params, inputs, NS, api_client, out=out), out.getvalue()


def test_the_annotated_queue_is_passed_where_none_is_named_default(admin, queues):
    queues(queue("local-queue-test", "true"), queue("other"))  # as the RHOAI docs set a project up
    params, said = resolve({"entrypoint": "python t.py"}, admin)
    assert params == {"entrypoint": "python t.py", "local_queue": "local-queue-test"}
    assert "local_queue=local-queue-test: the default LocalQueue of sandbox (annotated kueue.x-k8s.io/default-queue" in said


def test_the_annotation_wins_over_the_name_and_reads_as_kueue_reads_it(admin, queues):
    queues(queue("default"), queue("team", "True"))
    assert resolve({}, admin)[0] == {"local_queue": "team"}


def test_the_queue_named_default_is_used_when_none_is_annotated(admin, queues):
    queues(queue("default"), queue("other", "false"))
    params, said = resolve({}, admin)
    assert params == {"local_queue": "default"} and "(named 'default')" in said


def test_a_given_queue_or_a_pipeline_without_one_is_left_alone(admin, queues):
    queues(queue("local-queue-test", "true"))
    assert resolve({"local_queue": "mine"}, admin) == ({"local_queue": "mine"}, "")
    assert resolve({}, admin, inputs={"namespace": {}}) == ({}, "")


def test_a_project_without_a_default_queue_is_refused_before_anything_is_sent(admin, queues):
    queues(queue("a"), queue("b"))
    with pytest.raises(NoDefaultQueue, match=r"namespace sandbox has no default LocalQueue .* \(it has: a, b\)"):
        resolve({}, admin)


def test_a_user_who_may_not_list_queues_is_told_what_the_task_will_use(runner, queues):
    queues(queue("local-queue-test", "true"))
    params, said = resolve({}, runner)  # RHOAI's pipeline-runner: no Kueue access
    assert params == {}
    assert "the project's LocalQueues unknown (you may not list them): the provision task uses the LocalQueue named " \
           "'default'; if there is none, pass --param local_queue=<name>" in said
