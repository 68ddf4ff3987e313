from typing import NamedTuple

from kfp_ray.components._build import CODEFLARE, ray_component


@ray_component(packages=CODEFLARE)
def provision_ray_cluster(
    run_id: str,
    task_name: str = "",
    task_id: str = "",
    cluster_name: str = "",
    namespace: str = "",
    local_queue: str = "",
    priority_class: str = "",
    num_workers: int = 1,
    head_cpu: str = "1",
    head_memory: str = "4Gi",
    worker_cpu: str = "1",
    worker_memory: str = "4Gi",
    head_cpu_limit: str = "",
    head_memory_limit: str = "",
    worker_cpu_limit: str = "",
    worker_memory_limit: str = "",
    worker_gpus: int = 0,
    image: str = "",
    env: dict = {},
    data_connection: str = "",
    tolerations: list = [],
    node_selector: dict = {},
    labels: dict = {},
    admission_timeout: int = 600,
    startup_timeout: int = 900,
    lease_seconds: int = 600,
    renew_every_seconds: int = 60,
    pip_index_url: str = "",
    pip_trusted_host: str = "",
) -> NamedTuple("ProvisionOutputs", [("cluster_name", str), ("namespace", str), ("dashboard_url", str),
                                     ("queued_seconds", float), ("starting_seconds", float), ("shape", str),
                                     ("admitted", str)]):
    """Provision a Kueue-queued RayCluster and wait until it is ready.

    Builds the cluster with the CodeFlare SDK, sets the Kueue queue label (even when the
    pipeline's service account cannot read LocalQueues), labels it with the run, then waits
    in two phases: queued (Kueue admission) and starting (pods), back to queued when Kueue
    evicts it (pods not ready within its pods-ready timeout); the second eviction fails the
    task. Pods that cannot start (image pull failure, untolerated taint, missing secret,
    KubeRay's ReplicaFailure) fail the task at once. On any failure, timeout or
    cancellation the cluster is deleted. A retried task adopts the cluster it created, never
    one being deleted nor one of another task. Inputs that can never work (names, quantities,
    limits below requests, the image reference, tolerations, more than the ClusterQueue's
    quota where readable) fail the task before anything is created. Turn caching off for
    this task.

    The cluster carries a lease (annotation kfp-ray.io/lease-expires) that this task renews
    while it waits and the follow task while the job runs; once it has expired, the
    kfp_ray_gc pipeline (a recurring run) deletes the cluster, e.g. after the run was
    deleted or a task killed, when no exit handler or cleanup code runs.

    Args:
        run_id: The pipeline run's id (dsl.PIPELINE_JOB_ID_PLACEHOLDER); labels the cluster.
        task_name: This task's name (dsl.PIPELINE_TASK_NAME_PLACEHOLDER); with task_id, tells
            this task's cluster from another provision task's of the same run.
        task_id: This task's id (dsl.PIPELINE_TASK_ID_PLACEHOLDER): distinct per ParallelFor
            iteration, the same when the task is retried. Give both when cluster_name
            is empty.
        cluster_name: RayCluster name; empty derives one from the run id and the task.
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
        head_cpu_limit: CPU limit of the head; empty means the request.
        head_memory_limit: Memory limit of the head; empty means the request.
        worker_cpu_limit: CPU limit of each worker; empty means the request.
        worker_memory_limit: Memory limit of each worker; empty means the request.
        worker_gpus: NVIDIA GPUs per worker.
        image: Ray image; empty uses the RHOAI Ray image (ray 2.52.1, Python 3.11, CUDA).
        env: Environment variables for every Ray pod.
        data_connection: Secret of an RHOAI data connection, exposed to Ray pods as env.
        tolerations: Tolerations for worker pods, e.g. for tainted GPU nodes.
        node_selector: Node selector for worker pods.
        labels: Extra labels for the RayCluster.
        admission_timeout: Seconds to wait for Kueue admission (summed over evictions).
        startup_timeout: Seconds to wait, once admitted, for every pod to be ready (summed
            over evictions).
        lease_seconds: Length of the cluster's lease, renewed while this task waits and
            once more when the cluster is ready, to cover the hand-over to the next task.
        renew_every_seconds: How often the lease is renewed (lease_seconds must be at
            least twice as long).
        pip_index_url: A PyPI mirror for a disconnected cluster: PIP_INDEX_URL in every Ray
            pod, so the jobs' runtime_env pip takes packages from it. Empty: the image's default.
        pip_trusted_host: The mirror's host, reached without TLS verification (PIP_TRUSTED_HOST).

    Returns:
        cluster_name: The RayCluster's name.
        namespace: Its namespace.
        dashboard_url: Ray dashboard/job API through the head Service (reachable from pipeline pods).
        queued_seconds: Seconds spent waiting for Kueue.
        starting_seconds: Seconds from admission to every pod ready.
        shape: The cluster as the run report shows it: queue, head and workers.
        admitted: What Kueue admitted for it (JSON: resources and their source), for the
            run's usage ledger (publish_training_results).
    """
    import json
    from collections import namedtuple

    from kfp_ray.tasks import provision

    p = provision(run_id=run_id, task_name=task_name, task_id=task_id, cluster_name=cluster_name, namespace=namespace, local_queue=local_queue, priority_class=priority_class,
                  num_workers=num_workers, head_cpu=head_cpu, head_memory=head_memory, worker_cpu=worker_cpu,
                  worker_memory=worker_memory, head_cpu_limit=head_cpu_limit, head_memory_limit=head_memory_limit,
                  worker_cpu_limit=worker_cpu_limit, worker_memory_limit=worker_memory_limit, worker_gpus=worker_gpus,
                  image=image, env=env, data_connection=data_connection, tolerations=tolerations,
                  node_selector=node_selector, labels=labels, admission_timeout=admission_timeout,
                  startup_timeout=startup_timeout, lease_seconds=lease_seconds,
                  renew_every_seconds=renew_every_seconds, pip_index_url=pip_index_url,
                  pip_trusted_host=pip_trusted_host)
    out = namedtuple("ProvisionOutputs", ["cluster_name", "namespace", "dashboard_url", "queued_seconds", "starting_seconds",
                                          "shape", "admitted"])
    gpus = f", {worker_gpus} GPU" if worker_gpus else ""
    shape = (f"LocalQueue {local_queue or '(the namespace default)'}; head {head_cpu} CPU, {head_memory}; "
             f"{num_workers} worker{'s' if num_workers != 1 else ''} x ({worker_cpu} CPU, {worker_memory}{gpus})")
    return out(p.name, p.namespace, p.dashboard_url, p.queued_seconds, p.starting_seconds, shape,
               json.dumps(p.admitted, sort_keys=True))
