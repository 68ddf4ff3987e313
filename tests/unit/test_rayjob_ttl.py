"""The RayJob's ttlSecondsAfterFinished (rayjobs.effective_ttl): in HTTPMode no submitter reads
the job's log to its end before KubeRay counts the job as over, so KubeRay keeps the cluster
long enough for this task's final log read; the task deletes it itself once it has the log."""

from __future__ import annotations

import pytest

from kfp_ray import rayjobs


@pytest.mark.parametrize("mode, asked, given", [
    ("K8sJobMode", 0, 0), ("K8sJobMode", 30, 30),
    ("HTTPMode", 0, rayjobs.HTTP_MODE_MIN_TTL_S), ("HTTPMode", 60, 60),
])
def test_httpmode_keeps_the_cluster_for_the_last_log_lines(mode, asked, given):
    assert rayjobs.effective_ttl(mode, asked) == given
    assert rayjobs.HTTP_MODE_MIN_TTL_S >= 3  # Ray's log tail reads the file about once a second; KubeRay requeues in 3 s
