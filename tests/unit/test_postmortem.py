"""How the exit handler's report reads a failed task's pod: its task name and why it failed."""

from __future__ import annotations

from types import SimpleNamespace as NS

from kfp_ray.postmortem import task_of, why


def pod(name="p-123", labels=None, annotations=None):
    return NS(metadata=NS(name=name, labels=labels or {}, annotations=annotations or {}))


def test_the_task_name_comes_from_kfp_or_from_argos_node_name():
    assert task_of(pod(annotations={"pipelines.kubeflow.org/task_name": "follow-ray-job"})) == "follow-ray-job"
    assert task_of(pod(labels={"pipelines.kubeflow.org/task_name": "submit-ray-job"})) == "submit-ray-job"
    node = "ray-training-x7k.root.exit-handler-1.provision-ray-cluster.executor"
    assert task_of(pod(annotations={"workflows.argoproj.io/node-name": node})) == "provision-ray-cluster"
    assert task_of(pod(annotations={"workflows.argoproj.io/node-name": "wf.root.exit-handler-1.follow-ray-job(0)"})) \
        == "follow-ray-job"
    assert task_of(pod(name="impl-9")) == "impl-9"


def test_why_is_the_last_error_line_else_the_last_line():
    tail = ("[kfp-ray] queued: waiting for Kueue admission\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
            "kfp_ray.errors.AdmissionTimeout: not admitted by Kueue within 600s. Fix: raise admission_timeout\n")
    assert why(tail).startswith("kfp_ray.errors.AdmissionTimeout: not admitted")
    assert why("[kfp-ray] bad input\n[kfp-ray] image: 'x' is not an image. Fix: give a full image name\nexit\n") \
        == "[kfp-ray] image: 'x' is not an image. Fix: give a full image name"
    assert why("just\nlines\n") == "lines" and why("") == ""
