"""run_ray_job's priority_class: the RayJob carries Kueue's label (KubeRay copies the job's labels
onto its cluster, but Kueue reads the top-level job's), the RayCluster path the same."""

from __future__ import annotations

from kfp_ray import cluster, rayjobs

LABEL = "kueue.x-k8s.io/priority-class"


def test_the_rayjob_and_the_raycluster_carry_the_priority_class(box, as_pipeline_runner):
    spec = cluster.ClusterSpec(name="ranked-job", namespace="sandbox", run_id="r-ranked", task_name="run-ray-job",
                               task_id="1", num_workers=0, head_cpu="500m", head_memory="1Gi", priority_class="batch-low")
    job = rayjobs.build(spec, "local-queue-test", "python -c pass", {}, "ranked-job-1", "K8sJobMode", 600, 0, 600)
    assert job["metadata"]["labels"][LABEL] == "batch-low"
    assert cluster.build_manifest(spec, "local-queue-test")["metadata"]["labels"][LABEL] == "batch-low"
    spec.priority_class = ""
    assert LABEL not in rayjobs.build(spec, "local-queue-test", "python -c pass", {}, "ranked-job-1", "K8sJobMode", 600, 0,
                                      600)["metadata"]["labels"]
