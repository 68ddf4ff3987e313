"""What each kfp-ray component does, behind its typed KFP signature (components/*/component.py).

Each function takes the component's inputs, does the work through the library, and
returns plain values for the component's outputs."""

from __future__ import annotations

import contextlib

from . import cluster, jobs, kube, rayclusters
from .validate import Checker, derive_cluster_name, label_value, task_identity
from .wait import log


def _namespace(namespace: str) -> str:
    return namespace or kube.current_namespace()


def provision(run_id: str, cluster_name: str = "", namespace: str = "", local_queue: str = "", num_workers: int = 1,
              head_cpu: str = "1", head_memory: str = "4Gi", worker_cpu: str = "1", worker_memory: str = "4Gi",
              head_cpu_limit: str = "", head_memory_limit: str = "", worker_cpu_limit: str = "",
              worker_memory_limit: str = "", worker_gpus: int = 0, image: str = "", env: dict | None = None,
              data_connection: str = "", tolerations: list | None = None, node_selector: dict | None = None,
              labels: dict | None = None, admission_timeout: float = 600, startup_timeout: float = 900,
              task_name: str = "", task_id: str = "", image_pull_grace: float | None = None) -> cluster.Provisioned:
    """Provision one task's cluster. Its name, when not given, derives from the run and the
    task identity (task_name, task_id), so each provision task of a run gets its own.
    image_pull_grace: how long an image may keep failing to pull (default
    diagnose.IMAGE_PULL_GRACE; not a component input, tests shorten it)."""
    derived = not cluster_name
    name = cluster_name or derive_cluster_name(run_id or "", task_identity(task_name or "", task_id or ""))
    spec = cluster.ClusterSpec(
        name=name, namespace=_namespace(namespace), run_id=run_id, task_name=task_name or "", task_id=task_id or "",
        local_queue=local_queue, num_workers=num_workers, head_cpu=head_cpu, head_cpu_limit=head_cpu_limit,
        head_memory=head_memory, head_memory_limit=head_memory_limit, worker_cpu=worker_cpu,
        worker_cpu_limit=worker_cpu_limit, worker_memory=worker_memory, worker_memory_limit=worker_memory_limit,
        worker_gpus=worker_gpus, image=image, env=dict(env or {}), data_connection=data_connection,
        tolerations=list(tolerations or []), node_selector=dict(node_selector or {}), labels=dict(labels or {}))
    return cluster.provision(spec, admission_timeout, startup_timeout, derived_name=derived,
                             image_pull_grace=image_pull_grace)


def submit(dashboard_url: str, entrypoint: str, run_id: str, task: str = "submit-ray-job", working_dir: str = "",
           embedded_root: str | None = None, pip: list | None = None, env_vars: dict | None = None,
           metadata: dict | None = None) -> str:
    return jobs.submit(dashboard_url, entrypoint, run_id, task, working_dir, embedded_root, pip, env_vars, metadata)


def follow(dashboard_url: str, job_id: str, log_path: str, cluster_name: str = "", namespace: str = "",
           timeout: float = 86400, delete_cluster: bool = True, max_poll_seconds: float = 5.0):
    """Follow the job; write its full log to log_path whatever happens; delete the cluster
    once the job is terminal (or stopped) when asked. Returns jobs.JobResult."""
    result = None
    try:
        result = jobs.follow(dashboard_url, job_id, timeout, max_poll=max_poll_seconds, echo=print)
        return result
    finally:
        with contextlib.suppress(Exception):
            text = result.logs if result else jobs.RayJobsClient(dashboard_url).logs(job_id)
            from .redact import redact

            with open(log_path, "w") as fh:
                fh.write(redact(text))
        if delete_cluster and cluster_name:
            try:
                rayclusters.delete(cluster_name, _namespace(namespace))
            except Exception as exc:  # noqa: BLE001 - the exit handler's teardown tries again
                log(f"could not delete RayCluster {cluster_name} ({type(exc).__name__}: {exc}); teardown will retry")


TEARDOWN_TIMEOUT = 300.0


def teardown(run_id: str, namespace: str = "", cluster_name: str = "", timeout: float = TEARDOWN_TIMEOUT) -> float:
    """Delete the run's clusters (by name, and every one labelled with the run id).
    Idempotent: nothing left is success. Returns the longest lifetime in seconds.
    A bad `timeout` fails the task, but only after the deletions (with the default wait):
    an exit handler that refused to delete would leave the quota held."""
    c = Checker()
    c.positive_seconds("timeout", timeout, example=TEARDOWN_TIMEOUT)
    if c.errors:
        log(f"{c.errors[0]}; deleting the run's clusters anyway, waiting up to {TEARDOWN_TIMEOUT:.0f}s for each")
        timeout = TEARDOWN_TIMEOUT
    longest = _teardown(run_id, namespace, cluster_name, timeout)
    c.done()
    return longest


def _teardown(run_id: str, namespace: str, cluster_name: str, timeout: float) -> float:
    ns = _namespace(namespace)
    names = set(rayclusters.clusters_of_run(ns, run_id)) if run_id else set()
    if cluster_name:
        rc = rayclusters.get(cluster_name, ns)
        if rc is not None and rayclusters.run_of(rc) not in (None, label_value(run_id)):
            log(f"RayCluster {cluster_name} belongs to another run; leaving it")
        elif rc is not None:
            names.add(cluster_name)
    if not names:
        log(f"no RayCluster of run {run_id} left in {ns}: nothing to tear down")
        return 0.0
    lifetimes = [rayclusters.delete(name, ns, timeout) or 0.0 for name in sorted(names)]
    return round(max(lifetimes), 2)
