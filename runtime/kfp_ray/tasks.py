"""What each kfp-ray component does, behind its typed KFP signature (components/*/component.py).

Each function takes the component's inputs, does the work through the library, and
returns plain values for the component's outputs."""

from __future__ import annotations

import contextlib

from . import cluster, jobs, kube, lease, rayclusters
from .validate import Checker, label_value, sanitize_name
from .wait import log


def _namespace(namespace: str) -> str:
    return namespace or kube.current_namespace()


def provision(run_id: str, cluster_name: str = "", namespace: str = "", local_queue: str = "", num_workers: int = 1,
              head_cpu: str = "1", head_memory: str = "4Gi", worker_cpu: str = "1", worker_memory: str = "4Gi",
              head_cpu_limit: str = "", head_memory_limit: str = "", worker_cpu_limit: str = "",
              worker_memory_limit: str = "", worker_gpus: int = 0, image: str = "", env: dict | None = None,
              data_connection: str = "", tolerations: list | None = None, node_selector: dict | None = None,
              labels: dict | None = None, admission_timeout: float = 600, startup_timeout: float = 900,
              lease_seconds: float = lease.DEFAULT_LEASE_S,
              renew_every_seconds: float = lease.DEFAULT_RENEW_S) -> cluster.Provisioned:
    spec = cluster.ClusterSpec(
        name=cluster_name or sanitize_name(run_id or ""), namespace=_namespace(namespace), run_id=run_id,
        local_queue=local_queue, num_workers=num_workers, head_cpu=head_cpu, head_cpu_limit=head_cpu_limit,
        head_memory=head_memory, head_memory_limit=head_memory_limit, worker_cpu=worker_cpu,
        worker_cpu_limit=worker_cpu_limit, worker_memory=worker_memory, worker_memory_limit=worker_memory_limit,
        worker_gpus=worker_gpus, image=image, env=dict(env or {}), data_connection=data_connection,
        tolerations=list(tolerations or []), node_selector=dict(node_selector or {}), labels=dict(labels or {}))
    return cluster.provision(spec, admission_timeout, startup_timeout, lease_seconds, renew_every_seconds)


def submit(dashboard_url: str, entrypoint: str, run_id: str, task: str = "submit-ray-job", working_dir: str = "",
           embedded_root: str | None = None, pip: list | None = None, env_vars: dict | None = None,
           metadata: dict | None = None) -> str:
    return jobs.submit(dashboard_url, entrypoint, run_id, task, working_dir, embedded_root, pip, env_vars, metadata)


def follow(dashboard_url: str, job_id: str, log_path: str, cluster_name: str = "", namespace: str = "",
           timeout: float = 86400, delete_cluster: bool = True, max_poll_seconds: float = 5.0,
           lease_seconds: float = lease.DEFAULT_LEASE_S, renew_every_seconds: float = lease.DEFAULT_RENEW_S):
    """Follow the job; write its full log to log_path whatever happens; delete the cluster
    once the job is terminal (or stopped) when asked. Returns jobs.JobResult. While it
    follows, it renews cluster_name's lease (lease.py) every renew_every_seconds."""
    c = Checker()
    lease.check(c, lease_seconds, renew_every_seconds)
    c.done()
    renewer = _renewer(cluster_name, namespace, lease_seconds, renew_every_seconds)
    result = None
    try:
        result = jobs.follow(dashboard_url, job_id, timeout, max_poll=max_poll_seconds, echo=print, heartbeat=renewer)
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


def _renewer(cluster_name: str, namespace: str, lease_seconds: float, every: float) -> lease.Renewer | None:
    if not cluster_name:
        return None
    try:
        return lease.Renewer(cluster_name, _namespace(namespace), lease_seconds, every)
    except Exception as exc:  # noqa: BLE001 - following the job matters more; the lease runs out
        log(f"cannot renew the lease of RayCluster {cluster_name} ({exc}); following the job without renewing it")
        return None


def teardown(run_id: str, namespace: str = "", cluster_name: str = "", timeout: float = 300) -> float:
    """Delete the run's clusters (by name, and every one labelled with the run id).
    Idempotent: nothing left is success. Returns the longest lifetime in seconds."""
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


def sweep(namespace: str = "", all_namespaces: bool = False, delete: bool = True, timeout: float = 300,
          report_path: str = "") -> list:
    """The lease sweeper (lease.py) as one task: judge kfp-ray's RayClusters in the namespace
    (empty: the pipeline's own) by their leases, delete the expired ones when asked, print
    the table (and write it as Markdown to report_path). Raises, after reporting, when a
    deletion failed. Returns lease.Swept entries."""
    c = Checker()
    c.positive_seconds("timeout", timeout)
    c.done()
    ns = None if all_namespaces else _namespace(namespace)
    where = "in all namespaces" if ns is None else f"in namespace {ns}"
    entries = lease.sweep(ns, delete=delete, timeout=timeout)
    print(lease.render(entries, delete, where), flush=True)
    if report_path:
        with open(report_path, "w") as fh:
            fh.write(lease.markdown(entries, delete, where))
    failed = [e for e in entries if e.action == "failed"]
    if failed:
        from .errors import KfpRayError

        raise KfpRayError("could not delete RayClusters whose lease expired: " + "; ".join(
            f"{e.namespace}/{e.name}: {e.error}" for e in failed) + ". The next sweep tries again")
    return entries
