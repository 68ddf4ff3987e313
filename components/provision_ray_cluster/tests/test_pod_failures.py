"""provision_ray_cluster when a Ray container cannot start, against the sandbox's kubelet (kubelet
v1.31 back-offs, shortened through the `kubelet_backoff_s` platform fault): an image that keeps
failing to pull and a container in CrashLoopBackOff are fatal once they persist, with the
container's last words. (That one-off failures are ridden out: components/follow_ray_job/tests/
test_redaction.py provisions its cluster through two failed pulls and a crash.)"""

from __future__ import annotations

import re
import time

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from kfp_ray.diagnose import CRASH_RESTARTS
from kfp_ray.errors import PodsFailing
from tests.helpers import eventually

SMALL = dict(num_workers=0, head_cpu="500m", head_memory="1Gi", local_queue="local-queue-test")
FAST_KUBELET = {"kubelet_backoff_s": 0.25}  # 10 s on a real node: back-offs 0.25, 0.5, 1 s ...


def rayclusters(sbx):
    co = k8s.CustomObjectsApi(sbx.api_client())
    return [rc["metadata"]["name"] for rc in co.list_namespaced_custom_object("ray.io", "v1", "sandbox", "rayclusters")["items"]]


def test_an_image_that_keeps_failing_to_pull_is_fatal_after_the_grace(box, sbx, as_pipeline_runner):
    """A registry that stays unreachable: ErrImagePull / ImagePullBackOff with a transient
    error, fatal once it lasted image_pull_grace (60 s by default), naming the pull's error."""
    # the kubelet's own pace (ErrImagePull stays 10-15 s before the back-off): provision looks at
    # starting pods every 5 s, so a 0.25 s ErrImagePull would pass between two looks
    sbx.set_faults({"clusters": {"unreachable": {"image_pull_failures": 1000}}})
    started = time.monotonic()
    with pytest.raises(PodsFailing) as exc:
        tasks.provision(run_id="r-pull", cluster_name="unreachable", startup_timeout=120, image_pull_grace=3, **SMALL)
    took = time.monotonic() - started
    msg = str(exc.value)
    assert took >= 3, took  # it waited the grace (a busy machine only adds); PodsFailing, not the 120 s startup timeout
    assert "container ray-head: image quay.io/modh/ray@sha256:" in msg and " cannot be pulled for " in msg
    assert "the kubelet retrying with back-off" in msg and "dial tcp: lookup quay.io: i/o timeout" in msg
    assert "Fix: check the image name and tag" in msg
    eventually(lambda: rayclusters(sbx) == [], 30, what="the cluster to be deleted")


@pytest.mark.ray
def test_a_crash_loop_is_fatal_after_three_restarts_with_the_containers_last_log_lines(box, sbx, as_pipeline_runner):
    """The head's `ray start` exits at every start (crash_loop): the kubelet restarts it
    with back-off; the fourth exit, in CrashLoopBackOff with restartCount 3, fails the task."""
    sbx.set_faults({"clusters": {"crashing": {"crash_loop": True}}, "platform": FAST_KUBELET})
    with pytest.raises(PodsFailing) as exc:
        tasks.provision(run_id="r-crash", cluster_name="crashing", startup_timeout=180, **SMALL)
    msg = str(exc.value)
    restarts = re.search(r"container ray-head keeps crashing \(CrashLoopBackOff after (\d+) restarts\)", msg)
    # the pods are looked at every poll once a container restarts; a short back-off (1 s here) can still pass
    assert restarts and int(restarts.group(1)) >= CRASH_RESTARTS, msg
    assert "it last exited with code 2 (Error)" in msg
    # its last log lines, read through pods/log?previous=true as pipeline-runner
    assert "Error: Invalid value for '--num-cpus': 'two' is not a valid integer." in msg
    assert "oc logs crashing-head-" in msg and "--previous" in msg
    eventually(lambda: rayclusters(sbx) == [] and sbx.processes() == [], 60, what="the cluster and its Ray to be gone")
