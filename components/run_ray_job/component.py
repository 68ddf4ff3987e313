from pathlib import Path
from typing import NamedTuple

from kfp.dsl import Artifact, Metrics, Output

from kfp_ray.components._build import RAYJOB, ray_component


def run_ray_job(
    run_id: str,
    entrypoint: str,
    job_log: Output[Artifact],
    metrics: Output[Metrics],
    task_name: str = "",
    task_id: str = "",
    job_name: str = "",
    namespace: str = "",
    local_queue: str = "",
    priority_class: str = "",
    num_workers: int = 1,
    head_cpu: str = "1",
    head_memory: str = "4Gi",
    worker_cpu: str = "1",
    worker_memory: str = "4Gi",
    worker_gpus: int = 0,
    image: str = "",
    env: dict = {},
    data_connection: str = "",
    tolerations: list = [],
    node_selector: dict = {},
    labels: dict = {},
    working_dir: str = "",
    pip: list = [],
    env_vars: dict = {},
    requirements_file: str = "",
    install_requirements: bool = True,
    submission_mode: str = "K8sJobMode",
    admission_timeout: int = 600,
    startup_timeout: int = 900,
    job_timeout: int = 86400,
    ttl_seconds_after_finished: int = 0,
    max_poll_seconds: float = 0.5,
    outage_tolerance_seconds: float = 600.0,
    lease_seconds: int = 600,
    renew_every_seconds: int = 60,
    pip_index_url: str = "",
    pip_trusted_host: str = "",
    max_preemptions: int = 3,
) -> NamedTuple("RunRayJobOutputs", [("status", str), ("duration_seconds", float), ("teardown_seconds", float),
                                     ("rayjob_name", str), ("cluster_name", str), ("queued_seconds", float),
                                     ("starting_seconds", float), ("shape", str)]):
    """Run a Ray job as a KubeRay RayJob: KubeRay creates the Kueue-queued cluster, submits
    the job and deletes the cluster when the job ends, even if this task is gone.

    The RayJob path (lifecycle "rayjob"): one task instead of provision, submit and follow.
    Its inputs are theirs and are checked the same way, before anything is created. The
    RayJob carries the Kueue queue label, shutdownAfterJobFinishes, activeDeadlineSeconds
    (startup_timeout + job_timeout, counted by KubeRay from admission) and
    ttlSecondsAfterFinished, the limits KubeRay enforces when every pipeline pod is gone
    (a killed task, a deleted run). The task waits in the same two phases (Kueue admission,
    then pods) with the same messages, uploads the job's code once the cluster is ready,
    streams the job's log through the Ray dashboard (the submitter pod's log if the cluster
    is already gone), and fails with the job's error, KubeRay's reason (DeadlineExceeded,
    SubmissionFailed) or Kueue's eviction. A Kueue preemption while the job runs (a
    higher-priority workload takes the quota; KubeRay deletes the cluster) is ridden out up
    to max_preemptions times: the task waits for re-admission and follows the job KubeRay runs
    again on a new cluster (metrics preemptions, preempted_seconds). When the job is over, and on any failure, it
    deletes the RayJob (the cluster goes with it) and waits until both are gone; on SIGTERM
    it stops the job and deletes the RayJob at once. A retried task adopts its RayJob. The
    RayJob carries a lease renewed while this task runs, for the kfp_ray_gc sweeper. Turn
    caching off for this task.

    While queued, its progress lines give the RayJob's position in the LocalQueue (where
    Workloads are readable). It copies the job log to $KFP_RAY_OUTPUT/logs/job.log in S3
    (from env_vars; a part every 30 s, the whole log at the end), so it outlives the cluster.

    Args:
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER); labels the RayJob.
        entrypoint: The command the job runs, e.g. "python train.py --epochs 5".
        task_name: This task's name (dsl.PIPELINE_TASK_NAME_PLACEHOLDER).
        task_id: This task's id (dsl.PIPELINE_TASK_ID_PLACEHOLDER). Give both when
            job_name is empty.
        job_name: RayJob name; empty derives one from the run id and the task.
        namespace: Namespace; empty uses the pipeline's own (no other: the dashboard is
            reachable only from the cluster's own namespace).
        local_queue: Kueue LocalQueue; empty uses the namespace's default-queue LocalQueue,
            else the one named "default"; where LocalQueues are not readable (RHOAI's
            pipeline-runner) always "default" (kfp-ray run/submit/schedule pass the default).
        priority_class: Kueue WorkloadPriorityClass of the cluster's Workload (label
            kueue.x-k8s.io/priority-class; must exist where readable); empty: priority 0.
            Where the ClusterQueue allows preemption, a higher class may take a lower one's quota.
        num_workers: Number of Ray worker pods (0 for a head-only cluster).
        head_cpu: CPU request of the head, e.g. "1" or "500m".
        head_memory: Memory request of the head, e.g. "4Gi".
        worker_cpu: CPU request of each worker.
        worker_memory: Memory request of each worker.
        worker_gpus: NVIDIA GPUs per worker.
        image: Ray image; empty uses the RHOAI Ray image (ray 2.52.1, Python 3.11, CUDA).
        env: Environment variables for every Ray pod.
        data_connection: Secret of an RHOAI data connection, exposed to Ray pods as env.
        tolerations: Tolerations for worker pods, e.g. for tainted GPU nodes.
        node_selector: Node selector for worker pods.
        labels: Extra labels for the RayJob (KubeRay copies them to its cluster).
        working_dir: The job's code: a directory embedded in this component ("code" for
            components made by run_ray_job_with_code), an s3:// URI (prefix or .zip) or an
            https:// zip URL.
        pip: pip requirements installed for the job on every Ray node (runtime_env pip).
        env_vars: Environment variables for the job.
        requirements_file: A pip requirements file in the embedded working_dir; its lines go
            first into runtime_env pip.
        install_requirements: False leaves requirements_file out.
        submission_mode: K8sJobMode (KubeRay's submitter pod runs `ray job submit`; its log
            keeps the job's log) or HTTPMode (KubeRay submits through the dashboard; code
            only as an https:// URL).
        admission_timeout: Seconds to wait for Kueue admission (summed over evictions).
        startup_timeout: Seconds to wait, once admitted, for every pod to be ready.
        job_timeout: Seconds the job may run; with startup_timeout, KubeRay's
            activeDeadlineSeconds.
        ttl_seconds_after_finished: Seconds KubeRay keeps the cluster after the job ends
            when this task is no longer there to delete it (0: at once; HTTPMode: at least 10,
            so that the last lines of the job's log can still be read).
        max_poll_seconds: Longest pause between job status checks.
        outage_tolerance_seconds: How long an unreachable dashboard is ridden out.
        lease_seconds: Length of the RayJob's lease (from each renewal).
        renew_every_seconds: How often the lease is renewed.
        pip_index_url: A PyPI mirror for a disconnected cluster (PIP_INDEX_URL in every Ray pod).
        pip_trusted_host: The mirror's host, reached without TLS verification.
        max_preemptions: Kueue preemptions ridden out before the run fails (0: fail at the first).

    Returns:
        job_log: The job's full log.
        metrics: Metrics reported by the job (KFP_RAY_METRICS lines), with job_duration_seconds,
            preemptions and preempted_seconds.
        status: The job's final status.
        duration_seconds: How long the job ran.
        teardown_seconds: How long deleting the RayJob and its cluster took, until gone.
        rayjob_name: The RayJob's name.
        cluster_name: The RayCluster KubeRay created for it.
        queued_seconds: Seconds spent waiting for Kueue.
        starting_seconds: Seconds from admission to every pod ready.
        shape: The cluster as the run report shows it.
    """
    # Every input but these is run_job's argument of the same name. Named once, not twice: each
    # character of this body is in the executor's ARGO_TEMPLATE twice, within the kernel's limit.
    inputs = dict(locals())
    for name in ("job_log", "metrics", "requirements_file", "install_requirements"):
        del inputs[name]
    import os

    import kfp_ray
    from kfp_ray.tasks import run_job

    # the folder the embedded code/ is in (kfp_ray may be the image's: an --image build)
    embedded_root = globals().get("__KFP_EMBEDDED_ASSET_DIR") or os.path.dirname(os.path.dirname(kfp_ray.__file__))
    ran = run_job(**inputs, embedded_root=embedded_root, log_path=job_log.path,
                  requirements_file=requirements_file if install_requirements else "")
    job_log.metadata.update(ran.record())  # job id, status, preemptions; Kueue's admission, the quota's release
    for name, value in ran.metrics().items():
        metrics.log_metric(name, value)
    return ran.outputs()  # RunRayJobOutputs' values, in its order

_run_ray_job = run_ray_job
run_ray_job = ray_component(packages=RAYJOB)(_run_ray_job)


def run_ray_job_with_code(code_dir: str | Path, files=None, strip_code: bool = False):
    """A run_ray_job component with `code_dir` embedded as its `code/` directory: pass
    working_dir="code" to run it. The job's code then travels inside the compiled YAML.
    `files`: only these paths of code_dir (relative to it); default all. `strip_code`: its
    Python travels without comments and docstrings (each line where it was)."""
    return ray_component(packages=RAYJOB, code_dir=code_dir, code_files=files, strip_code=strip_code)(_run_ray_job)
